"""Tenancy on Kubernetes, rendered from the tenant file the bundled scheduler reads.

Per tenant (``[quotas.TENANT]``), in a namespace of its own:

    Namespace       gpuwarden.io/tenant=TENANT
    ResourceQuota   requests.nvidia.com/gpu = gpus (the tenant's limit; Kubernetes has no
                    borrowing, so guaranteed_gpus is the bundled scheduler's alone), and
                    requests.nvidia.com/mig-<profile> per MIG profile given
    LimitRange      at most max_gpus_per_pod GPUs per container (default limit 0, so CPU-only
                    containers pass); default CPU and memory requests, so a pod without
                    requests still counts against the quota
    NetworkPolicy   ingress only from pods of the same namespace: tenants cannot reach
                    each other (egress is left open: DNS, registries, object stores)
    PVC             the tenant's own volume: a claim binds in its namespace only, so no other
                    tenant's pod can mount it (a StorageClass would not isolate: any namespace
                    may name any class)

and once for the cluster, one PriorityClass per job class (inference > training > batch >
dev, as the bundled scheduler ranks them). Optional settings, in the same file:

    [kubernetes]
    namespace_prefix = "gpu-"            # namespace = prefix + tenant (default: the tenant)
    storage_class = "fast-rwx"           # the PVCs' class (default: the cluster's default)
    storage_size = "1Ti"
    max_gpus_per_pod = 8
    [kubernetes.mig.team-a]              # MIG instances per profile
    "1g.10gb" = 14

Applied with server-side apply (``fieldManager=gpuwarden``, forced), so running it again
changes only what the file changed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from gpuwarden.errors import ConfigError
from gpuwarden.scheduler import mig
from gpuwarden.scheduler.jobs import PriorityClass
from gpuwarden.scheduler.quota import load_tenant_file

MANAGED = {"app.kubernetes.io/managed-by": "gpuwarden"}
FIELD_MANAGER = "gpuwarden"
#: PriorityClass values, highest first as ``PriorityClass`` ranks them (user pods stay below
#: the 1e9 reserved for system-cluster-critical).
PRIORITY_VALUES = {
    PriorityClass.INFERENCE: 100_000,
    PriorityClass.TRAINING: 10_000,
    PriorityClass.BATCH: 1_000,
    PriorityClass.DEV: 100,
}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SETTINGS = {"namespace_prefix", "storage_class", "storage_size", "max_gpus_per_pod", "mig"}


def _meta(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**MANAGED, **labels}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def priority_classes() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": _meta(f"gpuwarden-{p.value}"),
            "value": PRIORITY_VALUES[p],
            "globalDefault": False,
            "preemptionPolicy": "Never" if p is PriorityClass.DEV else "PreemptLowerPriority",
            "description": f"gpuwarden job class {p.value}",
        }
        for p in PriorityClass
    ]


def tenant_objects(
    tenant: str, limits: dict[str, Any], k8s: dict[str, Any]
) -> list[dict[str, Any]]:
    """The namespaced objects of one tenant."""
    ns = f"{k8s.get('namespace_prefix', '')}{tenant}"
    if not _DNS_LABEL.match(ns):
        raise ConfigError(f"tenant {tenant!r}: namespace {ns!r} is not a DNS label (a-z, 0-9, -)")
    hard: dict[str, Any] = {}
    gpus = limits.get("gpus")
    if gpus is not None:
        if not (isinstance(gpus, int | float) and math.isfinite(gpus) and gpus >= 0):
            raise ConfigError(f"[quotas.{tenant}] gpus must be a number >= 0, got {gpus!r}")
        hard["requests.nvidia.com/gpu"] = math.floor(gpus)  # device-plugin GPUs are whole
    for profile, count in sorted(((k8s.get("mig") or {}).get(tenant) or {}).items()):
        if profile not in mig.profile_names() or profile.endswith("+me"):
            raise ConfigError(f"[kubernetes.mig.{tenant}]: no MIG resource for {profile!r}")
        if not isinstance(count, int) or count < 0:
            raise ConfigError(f"[kubernetes.mig.{tenant}] {profile} must be a whole number >= 0")
        hard[f"requests.nvidia.com/mig-{profile}"] = count
    per_pod = k8s.get("max_gpus_per_pod", 8)
    if gpus is not None:
        per_pod = min(per_pod, math.floor(gpus))
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": _meta(ns, **{"gpuwarden.io/tenant": tenant}),
        }
    ]
    if hard:
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": _meta("gpuwarden-gpus", ns),
                "spec": {"hard": {k: str(v) for k, v in hard.items()}},
            }
        )
    out += [
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": _meta("gpuwarden-limits", ns),
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "max": {"nvidia.com/gpu": str(per_pod)},
                        # a max leaves a container without a GPU limit "unbounded", which
                        # the LimitRanger refuses: CPU-only containers get a limit of 0
                        "default": {"nvidia.com/gpu": "0"},
                        "defaultRequest": {"cpu": "1", "memory": "4Gi"},
                    }
                ]
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta("gpuwarden-tenant-isolation", ns),
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {}}]}],
            },
        },
    ]
    pvc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta("tenant-data", ns),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": str(k8s.get("storage_size", "100Gi"))}},
        },
    }
    if k8s.get("storage_class"):
        pvc["spec"]["storageClassName"] = str(k8s["storage_class"])
    return [*out, pvc]


def render(path: str) -> list[dict[str, Any]]:
    """Every object for the tenant file at ``path``: PriorityClasses, then each tenant's."""
    doc = load_tenant_file(path)
    k8s = doc.get("kubernetes") or {}
    if not isinstance(k8s, dict) or set(k8s) - _SETTINGS:
        extra = sorted(set(k8s) - _SETTINGS) if isinstance(k8s, dict) else ["(not a table)"]
        raise ConfigError(f"tenant file {path}: [kubernetes] does not take {', '.join(extra)}")
    tenants = doc.get("quotas") or {}
    if not tenants:
        raise ConfigError(f"tenant file {path} names no tenant ([quotas.TENANT] tables)")
    objects = priority_classes()
    for tenant in sorted(tenants):
        objects += tenant_objects(tenant, tenants[tenant], k8s)
    return objects


def to_yaml(objects: Iterable[dict[str, Any]]) -> str:
    """``kubectl apply -f -`` input: one YAML document per object."""
    import yaml

    return "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in objects)


#: kind -> (client API class, its server-side-apply method, namespaced)
_APPLY = {
    "Namespace": ("CoreV1Api", "patch_namespace", False),
    "ResourceQuota": ("CoreV1Api", "patch_namespaced_resource_quota", True),
    "LimitRange": ("CoreV1Api", "patch_namespaced_limit_range", True),
    "PersistentVolumeClaim": ("CoreV1Api", "patch_namespaced_persistent_volume_claim", True),
    "NetworkPolicy": ("NetworkingV1Api", "patch_namespaced_network_policy", True),
    "PriorityClass": ("SchedulingV1Api", "patch_priority_class", False),
}


def apply(
    objects: Iterable[dict[str, Any]],
    api_client: Any,
    *,
    echo: Callable[[str], None] = print,
    timeout_s: float = 30.0,
) -> int:
    """Server-side apply each object in order; returns how many were applied. ``HookError``
    names the first object the API server refused (those before it stay applied)."""
    from kubernetes import client

    from gpuwarden.scheduler_hooks._k8s_api import call

    n = 0
    for obj in objects:
        cls_name, method, namespaced = _APPLY[obj["kind"]]
        fn = getattr(getattr(client, cls_name)(api_client), method)
        meta = obj["metadata"]
        args = (meta["name"], meta["namespace"], obj) if namespaced else (meta["name"], obj)
        where = f"{meta['namespace']}/" if namespaced else ""
        call(
            f"apply {obj['kind']} {where}{meta['name']}",
            lambda fn=fn, args=args: fn(
                *args,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type="application/apply-patch+yaml",
                _preload_content=False,
                _request_timeout=timeout_s,
            ),
        )
        echo(
            f"{obj['kind'].lower()}/{meta['name']}{' -n ' + meta['namespace'] if namespaced else ''} applied"
        )
        n += 1
    return n


__all__ = [
    "FIELD_MANAGER",
    "PRIORITY_VALUES",
    "apply",
    "priority_classes",
    "render",
    "tenant_objects",
    "to_yaml",
]
