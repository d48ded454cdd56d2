"""DRA device taints: keep new claims off the at-risk GPU itself, not off its whole node.

Where a cluster allocates GPUs through Dynamic Resource Allocation (DRA; beta in Kubernetes
1.32, GA in 1.34) and has device taints (``DRADeviceTaints``: alpha in 1.33, off by default;
see docs/kubernetes.md), one ``DeviceTaintRule`` per at-risk GPU taints that device
``gpuwarden.io/at-risk=true:NoSchedule``. The scheduler then allocates it only to claims that
tolerate the taint, and the GPU's 7 neighbours stay schedulable for everyone.

    apiVersion: resource.k8s.io/v1alpha3
    kind: DeviceTaintRule
    metadata: {name: gpuwarden-NODE-gpu-3, labels: {app.kubernetes.io/managed-by: gpuwarden}}
    spec:
      deviceSelector: {driver: gpu.nvidia.com, pool: NODE, device: gpu-3}
      taint: {key: gpuwarden.io/at-risk, value: "true", effect: NoSchedule}

The selector assumes the NVIDIA DRA driver's naming: a pool per node, named after it, with
devices ``gpu-<index>``. Rules are created (POST) and deleted (DELETE) to match the node's
at-risk GPUs; rules are never edited in place, so there is no write to race.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gpuwarden.errors import ConfigError
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks.base import NodeHealth

MANAGED = {"app.kubernetes.io/managed-by": "gpuwarden"}
TAINT = {"key": "gpuwarden.io/at-risk", "value": "true", "effect": "NoSchedule"}


def rule_name(node: str, index: int) -> str:
    """A valid object name (DNS subdomain, at most 253 characters) for one GPU's rule."""
    safe = re.sub(r"[^a-z0-9.-]", "-", node.lower()).strip(".-")[:230]
    return f"gpuwarden-{safe}-gpu-{index}"


class DeviceTaints:
    """Creates and deletes ``DeviceTaintRule`` objects. ``api_client``: a
    ``kubernetes.client.ApiClient``; ``api_version``: ``resource.k8s.io/v1alpha3`` on 1.33-1.35,
    the version the cluster serves otherwise (``kubectl api-versions | grep resource``)."""

    API_VERSION = "resource.k8s.io/v1alpha3"
    DRIVER = "gpu.nvidia.com"

    def __init__(
        self,
        api_client: Any,
        *,
        api_version: str = API_VERSION,
        driver: str = DRIVER,
        timeout_s: float = 10.0,
    ) -> None:
        self.api_client = api_client
        self.api_version = api_version
        self.driver = driver
        self.timeout_s = timeout_s
        if api_version.count("/") != 1:
            raise ConfigError(f"dra-api={api_version!r}: want GROUP/VERSION")
        self.path = f"/apis/{api_version}/devicetaintrules"

    def rule(self, node: str, index: int) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": "DeviceTaintRule",
            "metadata": {"name": rule_name(node, index), "labels": dict(MANAGED)},
            "spec": {
                "deviceSelector": {"driver": self.driver, "pool": node, "device": f"gpu-{index}"},
                "taint": dict(TAINT),
            },
        }

    def plan(self, node: str, want: NodeHealth) -> list[str]:
        """What ``apply`` would do for ``node``, one line per request ([] when nothing)."""
        have, wanted = self._have(node), self._wanted(node, want)
        return [
            f"POST {self.path} {json.dumps(wanted[n], sort_keys=True)}"
            for n in sorted(set(wanted) - set(have))
        ] + [f"DELETE {self.path}/{n}" for n in sorted(set(have) - set(wanted))]

    def apply(self, node: str, want: NodeHealth) -> None:
        from gpuwarden.scheduler_hooks._k8s_api import Conflict as _Conflict
        from gpuwarden.scheduler_hooks._k8s_api import call

        have, wanted = self._have(node), self._wanted(node, want)
        for name in sorted(set(wanted) - set(have)):
            try:
                call(f"create DeviceTaintRule {name}", self._send, "POST", self.path, wanted[name])
            except _Conflict:
                pass  # created meanwhile (by another replica): the rule is there either way
        for name in sorted(set(have) - set(wanted)):
            call(
                f"delete DeviceTaintRule {name}",
                self._send,
                "DELETE",
                f"{self.path}/{name}",
                None,
                missing_ok=True,
            )

    def _wanted(self, node: str, want: NodeHealth) -> dict[str, dict[str, Any]]:
        rules = [self.rule(node, i) for i in want.indices(GpuState.AT_RISK)]
        return {r["metadata"]["name"]: r for r in rules}

    def _have(self, node: str) -> set[str]:
        from gpuwarden.scheduler_hooks._k8s_api import call

        selector = ",".join(f"{k}={v}" for k, v in MANAGED.items())
        resp = call("list DeviceTaintRules", self._send, "GET", self.path, None, selector)
        items = json.loads(resp.data).get("items") or []
        return {
            r["metadata"]["name"]
            for r in items
            if ((r.get("spec") or {}).get("deviceSelector") or {}).get("pool") == node
        }

    def _send(self, method: str, path: str, body: Any, selector: str = "") -> Any:
        # CustomObjectsApi speaks to any /apis/GROUP/VERSION/PLURAL, built-in groups included
        from kubernetes import client

        api = client.CustomObjectsApi(self.api_client)
        group, version = self.api_version.split("/", 1)
        opts: dict[str, Any] = {"_preload_content": False, "_request_timeout": self.timeout_s}
        if method == "GET":
            return api.list_cluster_custom_object(
                group, version, "devicetaintrules", label_selector=selector, **opts
            )
        if method == "POST":
            return api.create_cluster_custom_object(
                group, version, "devicetaintrules", body, **opts
            )
        name = path.rsplit("/", 1)[1]
        return api.delete_cluster_custom_object(group, version, "devicetaintrules", name, **opts)


__all__ = ["MANAGED", "TAINT", "DeviceTaints", "rule_name"]
