"""The cluster as the bundled scheduler sees it, built from Kubernetes Node and Pod objects.

A Node becomes a ``NodeSpec``: allocatable ``cpu`` and ``memory``, ``nvidia.com/gpu`` GPUs of
the model GPU feature discovery labels (``nvidia.com/gpu.product``), each GPU's health from the
tagger's annotations (``gpuwarden.io/at-risk-gpus``, ``gpuwarden.io/unhealthy-gpus``). A Pod
becomes a ``Job``: its containers' requests, ``nvidia.com/gpu`` whole GPUs, or a share of one
GPU in the annotation ``gpuwarden.io/gpu-milli`` (1..1000, as openb's pods carry it), and
interruptible when it tolerates the at-risk taint or carries the label
``gpuwarden.io/interruptible=true``. Pods bound to a node (``spec.nodeName``) and not finished
take their requests off that node, on its lowest free GPUs: which GPUs the kubelet gave them is
not in the API, so per-GPU occupancy is a guess, while per-node counts are exact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from gpuwarden.errors import InputError
from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.resources import GPU_MILLI, GpuSpec, Health, NodeSpec

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb)$")
GPU_MILLI_ANNOTATION = "gpuwarden.io/gpu-milli"
INTERRUPTIBLE_LABEL = "gpuwarden.io/interruptible"
AT_RISK_KEY = "gpuwarden.io/at-risk"
MODEL_LABEL = "nvidia.com/gpu.product"
_SUFFIX: dict[str, Decimal | int] = {
    "": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}  # fmt: skip
_QUANTITY = re.compile(r"^([0-9.]+(?:[eE][-+]?[0-9]+)?)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")


def quantity(text: Any) -> Decimal:
    """A Kubernetes resource quantity (``500m``, ``64``, ``256Gi``, ``1e9``) as a number."""
    m = _QUANTITY.match(str(text).strip())
    if m is None:
        raise InputError(f"not a Kubernetes quantity: {text!r}")
    try:
        return Decimal(m.group(1)) * _SUFFIX[m.group(2) or ""]
    except InvalidOperation:
        raise InputError(f"not a Kubernetes quantity: {text!r}") from None


@dataclass(frozen=True)
class GpuMark:
    """One GPU the tagger named in a node annotation."""

    index: int
    uuid: str = ""


def marked_gpus(annotations: Mapping[str, str], key: str) -> list[GpuMark]:
    """The GPUs listed in annotation ``key``: the JSON the tagger writes, or the older
    comma-separated indices ("0,3"). A value that is neither names none."""
    text = (annotations or {}).get(key) or ""
    if not text.strip():
        return []
    try:
        items = json.loads(text)
    except ValueError:
        items = [{"index": p} for p in text.split(",")]
    if isinstance(items, int):
        items = [{"index": items}]
    out = []
    for item in items if isinstance(items, list) else []:
        try:
            out.append(GpuMark(int(item["index"]), str(item.get("uuid") or "")))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return out


def node_spec(node: Mapping[str, Any]) -> NodeSpec:
    """The bundled scheduler's picture of one Node object."""
    meta = node.get("metadata") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    notes = meta.get("annotations") or {}
    n_gpus = int(quantity(alloc.get(GPU_RESOURCE, 0)))
    health = {g.index: Health.AT_RISK for g in marked_gpus(notes, "gpuwarden.io/at-risk-gpus")}
    health |= {g.index: Health.UNHEALTHY for g in marked_gpus(notes, "gpuwarden.io/unhealthy-gpus")}
    model = (meta.get("labels") or {}).get(MODEL_LABEL) or ("GPU" if n_gpus else "")
    return NodeSpec(
        meta["name"],
        int(quantity(alloc.get("cpu", 0)) * 1000),
        int(quantity(alloc.get("memory", 0)) / 2**20),
        model,
        tuple(GpuSpec(i, health.get(i, Health.OK)) for i in range(n_gpus)),
    )


def _requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] = total.get(k, Decimal(0)) + quantity(v)
        for k, v in ((c.get("resources") or {}).get("limits") or {}).items():
            if k == GPU_RESOURCE or MIG_RESOURCE.match(k):  # extended resources: limits only
                total.setdefault(k, quantity(v))
    return total


def interruptible(pod: Mapping[str, Any]) -> bool:
    """The pod may run on an at-risk GPU: it tolerates the at-risk taint, or says so."""
    meta = pod.get("metadata") or {}
    if ((meta.get("labels") or {}).get(INTERRUPTIBLE_LABEL) or "").lower() == "true":
        return True
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        key, op = t.get("key") or "", t.get("operator") or "Equal"
        effect_ok = t.get("effect") in (None, "", "NoSchedule")
        if not effect_ok:
            continue
        if op == "Exists" and key in ("", AT_RISK_KEY):
            return True
        if op == "Equal" and key == AT_RISK_KEY and t.get("value") == "true":
            return True
    return False


def uses_dra(pod: Mapping[str, Any]) -> bool:
    """The pod's devices come through DRA claims, which device taints steer per GPU."""
    return bool((pod.get("spec") or {}).get("resourceClaims"))


def pod_job(pod: Mapping[str, Any]) -> Job:
    """The bundled scheduler's picture of one Pod (one task)."""
    meta = pod.get("metadata") or {}
    req = _requests(pod)
    gpus = int(req.get(GPU_RESOURCE, 0))
    milli = GPU_MILLI
    share = (meta.get("annotations") or {}).get(GPU_MILLI_ANNOTATION)
    if share is not None:
        try:
            milli = int(share)
        except ValueError:
            raise InputError(f"{GPU_MILLI_ANNOTATION} must be a whole number: {share!r}") from None
        gpus = max(gpus, 1)
    mig = next((m.group(1) for k in req if (m := MIG_RESOURCE.match(k))), None)
    return Job(
        f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        tenant=meta.get("namespace") or "default",
        interruptible=interruptible(pod),
        gpus_per_task=1 if mig else gpus,
        gpu_milli=milli if gpus == 1 else GPU_MILLI,
        mig_profile=mig,
        cpu_milli=int(req.get("cpu", 0) * 1000),
        memory_mib=int(req.get("memory", 0) / 2**20),
    )


class ClusterView:
    """Nodes and bound pods as a ``ClusterState``, plus what the filter reads per node: the
    at-risk GPUs and how many GPUs no pod holds."""

    def __init__(self, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]] = ()):
        specs, self.at_risk = [], {}
        for n in nodes:
            spec = node_spec(n)
            specs.append(spec)
            notes = (n.get("metadata") or {}).get("annotations") or {}
            if marks := marked_gpus(notes, "gpuwarden.io/at-risk-gpus"):
                self.at_risk[spec.name] = marks  # only nodes with one: the filter walks these
        self.cluster = ClusterState(specs)
        self.skipped = 0  # bound pods that did not fit the picture (it is already stale)
        self.jobs: list[Job] = []  # the bound pods: the workload's task mix
        self._idle: Any = None
        for p in pods:
            self.add_pod(p)

    def add_pod(self, pod: Mapping[str, Any]) -> bool:
        """Take a bound pod's requests off its node; False if it is not bound here or does
        not fit (the picture is already stale: the next resync fixes it)."""
        i = self.cluster.index.get((pod.get("spec") or {}).get("nodeName") or "")
        if i is None:
            return False
        self.jobs.append(pod_job(pod))
        # a bound pod may sit on an at-risk GPU (it got there first, or tolerates it)
        job = replace(self.jobs[-1], interruptible=True)
        c = self.cluster
        if not c.feasible(job)[i]:
            self.skipped += 1
            return False
        gpus, start = c.default_gpus(job, i)
        c.apply(job, i, gpus, start)
        self._idle = None
        return True

    def idle_gpus(self, node: str) -> int:
        """GPUs of ``node`` that no bound pod holds any part of."""
        if self._idle is None:  # once per picture: a filter asks about many nodes
            c = self.cluster
            self._idle = ((c.free == GPU_MILLI) & c.exists).sum(axis=1)
        return int(self._idle[self.cluster.index[node]])


__all__ = [
    "ClusterView",
    "GpuMark",
    "interruptible",
    "marked_gpus",
    "node_spec",
    "pod_job",
    "quantity",
    "uses_dra",
]
