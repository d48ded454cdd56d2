"""Tag Kubernetes nodes through the API server (the ``kubernetes`` client, ``gpuwarden[k8s]``).

    at-risk    label  gpuwarden.io/health=at-risk, gpuwarden.io/at-risk-gpu-count=2
               annotation gpuwarden.io/at-risk-gpus='[{"index":0,"uuid":"GPU-..."},{"index":3}]'
               taint  gpuwarden.io/at-risk=true:NoSchedule   (mode=taint, the default)
               or no node taint: the scheduler extender     (mode=extender)
               or a DeviceTaintRule per at-risk GPU          (mode=dra, ``_k8s_dra``)
    unhealthy  label  gpuwarden.io/health=unhealthy, gpuwarden.io/unhealthy-gpu-count,
               annotation gpuwarden.io/unhealthy-gpus; cordon (spec.unschedulable) and taint
               gpuwarden.io/unhealthy=true:NoExecute
    ok         all of ours removed; uncordoned only if gpuwarden cordoned it
               (annotation gpuwarden.io/cordoned), never a node an admin cordoned

A node taint withholds all 8 GPUs of a node for one at-risk GPU; the per-GPU modes keep the
other 7 for critical pods (docs/kubernetes.md says which Kubernetes versions get which).

kubectl equivalent: ``kubectl label node N gpuwarden.io/health=at-risk``, ``kubectl taint node N
gpuwarden.io/at-risk=true:NoSchedule``, ``kubectl cordon N``. Each change is one JSON merge patch
(``application/merge-patch+json``) of only what differs, carrying the node's resourceVersion,
so a concurrent edit is a 409 and is retried on a fresh read instead of being overwritten. A node
already as it should be gets no PATCH at all. Host names become node names through the node's
``kubernetes.io/hostname`` label by default (``_k8s_names.NodeNames``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from gpuwarden.errors import ConfigError, HookError
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks._k8s_api import Conflict, api_client_from, call
from gpuwarden.scheduler_hooks._k8s_names import HOSTNAME_LABEL, NodeNames
from gpuwarden.scheduler_hooks.base import Echo, NodeHealth, TagResult, default_echo
from gpuwarden.wording import plural

LABEL = "gpuwarden.io/health"
AT_RISK_COUNT_LABEL = "gpuwarden.io/at-risk-gpu-count"
UNHEALTHY_COUNT_LABEL = "gpuwarden.io/unhealthy-gpu-count"
AT_RISK_ANNOTATION = "gpuwarden.io/at-risk-gpus"
UNHEALTHY_ANNOTATION = "gpuwarden.io/unhealthy-gpus"
CORDONED_ANNOTATION = "gpuwarden.io/cordoned"
AT_RISK_TAINT = {"key": "gpuwarden.io/at-risk", "value": "true", "effect": "NoSchedule"}
UNHEALTHY_TAINT = {"key": "gpuwarden.io/unhealthy", "value": "true", "effect": "NoExecute"}
#: How critical pods are kept off at-risk GPUs: a node taint, the extender, or DRA device taints.
AT_RISK_MODES = ("taint", "extender", "dra")
_OURS = {(t["key"], t["effect"]) for t in (AT_RISK_TAINT, UNHEALTHY_TAINT)}
_PATCH = "application/merge-patch+json"


def gpu_list(want: NodeHealth, state: GpuState) -> str | None:
    """The annotation value naming the GPUs in ``state``: compact JSON, indices ascending,
    each with its UUID where known; None when there are none (the annotation is removed)."""
    found = [
        {"index": i, **({"uuid": want.uuids[i]} if want.uuids.get(i) else {})}
        for i in want.indices(state)
    ]
    return json.dumps(found, separators=(",", ":")) if found else None


def node_patch(node: dict[str, Any], want: NodeHealth, at_risk: str = "taint") -> dict[str, Any]:
    """The merge patch that makes the Node object ``node`` show ``want`` ({} if none needed).
    ``at_risk``: one of ``AT_RISK_MODES``; only "taint" puts the at-risk taint on the node."""
    meta = node.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    spec = node.get("spec") or {}
    state = want.state
    label_patch: dict[str, str | None] = {}
    note_patch: dict[str, str | None] = {}
    wanted_labels = {
        LABEL: None if state is GpuState.OK else str(state),
        AT_RISK_COUNT_LABEL: str(len(want.indices(GpuState.AT_RISK))),
        UNHEALTHY_COUNT_LABEL: str(len(want.indices(GpuState.UNHEALTHY))),
    }
    for key, value in wanted_labels.items():
        value = None if value == "0" else value
        if labels.get(key) != value:
            label_patch[key] = value
    for key, s in (
        (AT_RISK_ANNOTATION, GpuState.AT_RISK),
        (UNHEALTHY_ANNOTATION, GpuState.UNHEALTHY),
    ):
        value = gpu_list(want, s)
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
        GpuState.AT_RISK: [AT_RISK_TAINT] if at_risk == "taint" else [],
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
    ``node_label``: the Node label whose value is the host name (default
    ``kubernetes.io/hostname``; "" takes host names as node names). ``at_risk``: see
    ``AT_RISK_MODES``; "dra" also needs ``dra`` (a ``_k8s_dra.DeviceTaints``)."""

    name = "kubernetes"

    def __init__(
        self,
        api: Any,
        *,
        dry_run: bool = False,
        echo: Echo = default_echo,
        timeout_s: float = 10.0,
        retries: int = 3,
        node_label: str = HOSTNAME_LABEL,
        at_risk: str = "taint",
        dra: Any = None,
    ) -> None:
        if at_risk not in AT_RISK_MODES:
            raise ConfigError(f"mode={at_risk!r}: choose one of {', '.join(AT_RISK_MODES)}")
        if at_risk == "dra" and dra is None:
            raise ConfigError("mode=dra needs a DeviceTaints writer")
        self.api = api
        self.dry_run = dry_run
        self.timeout_s = timeout_s
        self.retries = retries
        self.at_risk = at_risk
        self.dra = dra
        self.names = NodeNames(api, node_label, timeout_s=timeout_s)
        self._echo = echo

    @classmethod
    def from_url(cls, url: str, *, dry_run: bool = False) -> KubernetesTagger:
        """``k8s://`` (in-cluster when run in a pod, else ~/.kube/config) or
        ``k8s://?kubeconfig=PATH&context=NAME&node-label=KEY&mode=taint|extender|dra``."""
        params = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
        known = {"kubeconfig", "context", "node-label", "mode", "dra-api", "dra-driver"}
        unknown = set(params) - known
        if unknown:
            raise ConfigError(
                f"{url}: unknown {plural(len(unknown), 'parameter')} {', '.join(sorted(unknown))}"
            )
        api_client = api_client_from(
            params.get("kubeconfig"), params.get("context"), url, "?kubeconfig=PATH in the URL"
        )
        from kubernetes import client

        at_risk = params.get("mode", "taint")
        dra = None
        if at_risk == "dra":
            from gpuwarden.scheduler_hooks._k8s_dra import DeviceTaints

            dra = DeviceTaints(
                api_client,
                api_version=params.get("dra-api", DeviceTaints.API_VERSION),
                driver=params.get("dra-driver", DeviceTaints.DRIVER),
            )
        return cls(
            client.CoreV1Api(api_client),
            dry_run=dry_run,
            node_label=params.get("node-label", HOSTNAME_LABEL),
            at_risk=at_risk,
            dra=dra,
        )

    def apply(self, node: NodeHealth) -> TagResult:
        name = self.names.resolve(node.hostname)
        for _ in range(max(1, self.retries)):
            try:
                current = self._call("read", name, self._read, name)
            except HookError:
                self.names.forget(node.hostname)  # the Node may have been replaced: look again
                raise
            patch = node_patch(current, node, self.at_risk)
            dra_plan = self.dra.plan(name, node) if self.dra is not None else None
            if not patch and not dra_plan:
                return TagResult(False, f"node {name} already {node.state}", self.dry_run)
            body = json.dumps(patch, sort_keys=True)
            if self.dry_run:
                if patch:
                    self._echo(f"[dry-run] kubernetes: PATCH /api/v1/nodes/{name} {body}")
                for line in dra_plan or []:
                    self._echo(f"[dry-run] kubernetes: {line}")
                return TagResult(True, f"would PATCH node {name} {body}", True)
            if patch:
                try:
                    self._call("patch", name, self._patch, name, patch)
                except Conflict:
                    continue  # someone else edited the node between our read and our write
            if dra_plan:
                self.dra.apply(name, node)
            return TagResult(True, f"patched node {name} {body}")
        raise HookError(
            f"kubernetes: node {name} kept changing under us ({self.retries} conflicts)"
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
        return call(f"{what} node {name}", fn, *args, not_found=f"no node named {name!r}")


__all__ = [
    "AT_RISK_ANNOTATION",
    "AT_RISK_COUNT_LABEL",
    "AT_RISK_MODES",
    "AT_RISK_TAINT",
    "CORDONED_ANNOTATION",
    "KubernetesTagger",
    "LABEL",
    "UNHEALTHY_ANNOTATION",
    "UNHEALTHY_COUNT_LABEL",
    "UNHEALTHY_TAINT",
    "gpu_list",
    "node_patch",
]
