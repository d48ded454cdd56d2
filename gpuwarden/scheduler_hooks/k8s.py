"""Tag Kubernetes nodes through the API server (the ``kubernetes`` client, ``gpuwarden[k8s]``).

    at-risk    label  gpuwarden.io/health=at-risk
               annotation gpuwarden.io/at-risk-gpus="0,3"   (the at-risk GPU indices)
               taint  gpuwarden.io/at-risk=true:NoSchedule  (interruptible pods tolerate it)
    unhealthy  label  gpuwarden.io/health=unhealthy, annotation gpuwarden.io/unhealthy-gpus
               cordon (spec.unschedulable) and taint gpuwarden.io/unhealthy=true:NoExecute
    ok         all of ours removed; uncordoned only if gpuwarden cordoned it
               (annotation gpuwarden.io/cordoned), never a node an admin cordoned

kubectl equivalent: ``kubectl label node N gpuwarden.io/health=at-risk``, ``kubectl taint node N
gpuwarden.io/at-risk=true:NoSchedule``, ``kubectl cordon N``. Each change is one JSON merge patch
(``application/merge-patch+json``) of only what differs, carrying the node's resourceVersion,
so a concurrent edit is a 409 and is retried on a fresh read instead of being overwritten. A node
already as it should be gets no PATCH at all.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from gpuwarden.errors import ConfigError, HookError
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks.base import Echo, NodeHealth, TagResult, default_echo

LABEL = "gpuwarden.io/health"
AT_RISK_ANNOTATION = "gpuwarden.io/at-risk-gpus"
UNHEALTHY_ANNOTATION = "gpuwarden.io/unhealthy-gpus"
CORDONED_ANNOTATION = "gpuwarden.io/cordoned"
AT_RISK_TAINT = {"key": "gpuwarden.io/at-risk", "value": "true", "effect": "NoSchedule"}
UNHEALTHY_TAINT = {"key": "gpuwarden.io/unhealthy", "value": "true", "effect": "NoExecute"}
_OURS = {(t["key"], t["effect"]) for t in (AT_RISK_TAINT, UNHEALTHY_TAINT)}
_PATCH = "application/merge-patch+json"


def node_patch(node: dict[str, Any], want: NodeHealth) -> dict[str, Any]:
    """The merge patch that makes the Node object ``node`` show ``want`` ({} if none needed)."""
    meta = node.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    spec = node.get("spec") or {}
    state = want.state
    label_patch: dict[str, str | None] = {}
    note_patch: dict[str, str | None] = {}
    wanted_label = None if state is GpuState.OK else str(state)
    if labels.get(LABEL) != wanted_label:
        label_patch[LABEL] = wanted_label
    for key, s in (
        (AT_RISK_ANNOTATION, GpuState.AT_RISK),
        (UNHEALTHY_ANNOTATION, GpuState.UNHEALTHY),
    ):
        value = ",".join(map(str, want.indices(s))) or None
        if notes.get(key) != value:
            note_patch[key] = value
    spec_patch: dict[str, Any] = {}
    cordoned = bool(spec.get("unschedulable"))
    if state is GpuState.UNHEALTHY and not cordoned:
        spec_patch["unschedulable"] = True
        note_patch[CORDONED_ANNOTATION] = "true"  # ours to undo
    elif state is not GpuState.UNHEALTHY and notes.get(CORDONED_ANNOTATION) == "true":
        note_patch[CORDONED_ANNOTATION] = None
        if cordoned:
            spec_patch["unschedulable"] = False
    taints = list(spec.get("taints") or [])
    have = {(t.get("key"), t.get("effect")) for t in taints} & _OURS
    wanted = {
        GpuState.OK: [],
        GpuState.AT_RISK: [AT_RISK_TAINT],
        GpuState.UNHEALTHY: [UNHEALTHY_TAINT],
    }[state]
    if have != {(t["key"], t["effect"]) for t in wanted}:
        # taints is a plain list to a merge patch: send it whole, others' taints kept in order
        kept = [t for t in taints if (t.get("key"), t.get("effect")) not in _OURS]
        spec_patch["taints"] = kept + [dict(t) for t in wanted]
    patch: dict[str, Any] = {}
    if label_patch or note_patch:
        patch["metadata"] = {}
        if label_patch:
            patch["metadata"]["labels"] = label_patch
        if note_patch:
            patch["metadata"]["annotations"] = note_patch
    if spec_patch:
        patch["spec"] = spec_patch
    if patch:
        patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")
    return patch


class KubernetesTagger:
    """Labels, annotates, taints and cordons nodes. ``api``: a ``kubernetes.client.CoreV1Api``
    (``from_url`` builds one from a kubeconfig or the in-cluster service account).
    ``node_name``: hostname -> Node name (default: the same)."""

    name = "kubernetes"

    def __init__(
        self,
        api: Any,
        *,
        dry_run: bool = False,
        echo: Echo = default_echo,
        timeout_s: float = 10.0,
        retries: int = 3,
    ) -> None:
        self.api = api
        self.dry_run = dry_run
        self.timeout_s = timeout_s
        self.retries = retries
        self._echo = echo

    @classmethod
    def from_url(cls, url: str, *, dry_run: bool = False) -> KubernetesTagger:
        """``k8s://`` (in-cluster when run in a pod, else ~/.kube/config) or
        ``k8s://?kubeconfig=PATH&context=NAME``."""
        try:
            from kubernetes import client, config
        except ImportError as exc:
            raise ConfigError(
                "the Kubernetes hook needs the kubernetes client: pip install 'gpuwarden[k8s]'"
            ) from exc
        params = dict(parse_qsl(urlsplit(url).query))
        unknown = set(params) - {"kubeconfig", "context"}
        if unknown:
            raise ConfigError(f"{url}: unknown parameter(s) {', '.join(sorted(unknown))}")
        try:
            if "kubeconfig" not in params and os.environ.get("KUBERNETES_SERVICE_HOST"):
                cfg = client.Configuration()
                config.load_incluster_config(client_configuration=cfg)
                api_client = client.ApiClient(cfg)
            else:
                api_client = config.new_client_from_config(
                    config_file=params.get("kubeconfig"), context=params.get("context")
                )
        except (config.ConfigException, OSError) as exc:
            raise ConfigError(f"{url}: cannot load Kubernetes credentials: {exc}") from exc
        return cls(client.CoreV1Api(api_client), dry_run=dry_run)

    def apply(self, node: NodeHealth) -> TagResult:
        for _ in range(max(1, self.retries)):
            current = self._call("read", node.hostname, self._read, node.hostname)
            patch = node_patch(current, node)
            if not patch:
                return TagResult(False, f"node {node.hostname} already {node.state}", self.dry_run)
            body = json.dumps(patch, sort_keys=True)
            if self.dry_run:
                self._echo(f"[dry-run] kubernetes: PATCH /api/v1/nodes/{node.hostname} {body}")
                return TagResult(True, f"would PATCH node {node.hostname} {body}", True)
            try:
                self._call("patch", node.hostname, self._patch, node.hostname, patch)
            except _Conflict:
                continue  # someone else edited the node between our read and our write
            return TagResult(True, f"patched node {node.hostname} {body}")
        raise HookError(
            f"kubernetes: node {node.hostname} kept changing under us ({self.retries} conflicts)"
        )

    def _read(self, name: str) -> dict[str, Any]:
        resp = self.api.read_node(name, _preload_content=False, _request_timeout=self.timeout_s)
        return json.loads(resp.data)

    def _patch(self, name: str, patch: dict[str, Any]) -> None:
        self.api.patch_node(
            name,
            patch,
            _content_type=_PATCH,
            _preload_content=False,
            _request_timeout=self.timeout_s,
        )

    def _call(self, what: str, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args)
        except ApiException as exc:
            if exc.status == 409:
                raise _Conflict() from exc
            if exc.status == 404:
                raise HookError(f"kubernetes: no node named {name!r}") from exc
            reason = _api_reason(exc)
            raise HookError(
                f"kubernetes: {what} node {name} failed: {exc.status} {reason}"
            ) from exc
        except (HTTPError, OSError, ValueError) as exc:
            raise HookError(f"kubernetes: {what} node {name} failed: {exc}") from exc


class _Conflict(Exception):
    pass


def _api_reason(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


__all__ = [
    "AT_RISK_ANNOTATION",
    "AT_RISK_TAINT",
    "CORDONED_ANNOTATION",
    "KubernetesTagger",
    "LABEL",
    "UNHEALTHY_ANNOTATION",
    "UNHEALTHY_TAINT",
    "node_patch",
]
