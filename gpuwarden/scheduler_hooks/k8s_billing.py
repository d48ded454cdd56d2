"""GPU-hours per Kubernetes namespace and pod, from dcgm-exporter's series in Prometheus.

dcgm-exporter (with its Kubernetes pod mapping on, the default in the GPU operator) labels a
GPU's series with the ``namespace``, ``pod`` and ``container`` using it, and a MIG instance's
with ``GPU_I_ID`` and ``GPU_I_PROFILE``. So a pod held a GPU for as long as that GPU's
``DCGM_FI_DEV_GPU_UTIL`` carried its name. Per hour ``[t - 1 h, t)`` and per device (``UUID``,
``GPU_I_ID``), each pod's share of the hour is its samples over a full hour's samples:

    sum by (namespace, pod, UUID, GPU_I_ID, GPU_I_PROFILE)
        (count_over_time(DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}[1h]))

A full hour's samples is what one series holds over a whole hour (3600 s / the scrape
interval): the largest count of any one series in any hour, unless ``scrape_interval_s`` says.
Shares and MIG slices count as the bundled scheduler bills them (``scheduler.billing``): a MIG
instance is its compute slices out of 7 (3g.40gb: 3/7 GPU), and pods sharing one device (time
slicing) split it, so a device never bills more than itself in an hour. Rows are
``billing.BillRow`` with the namespace as tenant and the pod as job, so ``tenant_totals`` and
``write_csv`` serve both schedulers. A pod that held no GPU in the window has no row: missing is
never zero.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from gpuwarden.errors import InputError
from gpuwarden.scheduler import mig
from gpuwarden.scheduler.billing import BillRow

METRIC = "DCGM_FI_DEV_GPU_UTIL"
HOUR_S = 3600.0
_POINTS = 10_000  # steps per query_range, under Prometheus's 11,000 points per series


def device_weight(profile: str) -> float:
    """GPUs one device is: 1 for a whole GPU, compute slices / 7 for a MIG instance."""
    if not profile:
        return 1.0
    slices = profile.split("g.", 1)[0]
    if not slices.isdigit() or profile.removesuffix("+me") not in mig.profile_names():
        raise InputError(f"unknown MIG profile {profile!r} in {METRIC}'s GPU_I_PROFILE")
    return int(slices) / mig.COMPUTE_SLICES


def _hours(api: Any, expr: str, since: float, until: float) -> list[Any]:
    out = []
    start = since + HOUR_S  # the first hour ends here
    while start <= until:
        end = min(until, start + HOUR_S * (_POINTS - 1))
        out += api.query_range(expr, start, end, HOUR_S)
        start = end + HOUR_S
    return out


def gpu_hours(
    api: Any,
    since: float,
    until: float,
    *,
    scrape_interval_s: float | None = None,
    metric: str = METRIC,
) -> list[BillRow]:
    """GPU-hours per pod (namespace as tenant) in ``[since, until)``, whole hours from
    ``since``. ``api``: a ``PromApi`` (``PrometheusStore(...).api``)."""
    if not (math.isfinite(since) and math.isfinite(until)) or until - since < HOUR_S:
        raise InputError("the billing window must be at least one hour, since < until")
    window = api.dialect.window(f'{metric}{{namespace!="",pod!=""}}', HOUR_S)
    by = "namespace, pod, UUID, GPU_I_ID, GPU_I_PROFILE"
    rows = _hours(api, f"sum by ({by}) (count_over_time({window}))", since, until)
    if scrape_interval_s is not None:
        if not scrape_interval_s > 0:
            raise InputError("scrape_interval_s must be > 0")
        full = HOUR_S / scrape_interval_s
    else:
        everything = api.dialect.window(metric, HOUR_S)
        top = _hours(api, f"max(count_over_time({everything}))", since, until)
        full = max((float(v) for r in top for v in r.values if math.isfinite(v)), default=0.0)
    if not full:
        return []
    # (hour, device) -> pod -> share of the hour
    held: dict[tuple[float, str, str], dict[tuple[str, str], float]] = defaultdict(dict)
    weight: dict[tuple[float, str, str], float] = {}
    for r in rows:
        lab = r.labels
        pod = (lab.get("namespace", ""), lab.get("pod", ""))
        for t, v in zip(r.ts.tolist(), r.values.tolist(), strict=True):
            if not (math.isfinite(v) and v > 0):
                continue
            key = (t, lab.get("UUID", ""), lab.get("GPU_I_ID", ""))
            held[key][pod] = held[key].get(pod, 0.0) + min(1.0, v / full)
            weight[key] = device_weight(lab.get("GPU_I_PROFILE", ""))
    total: dict[tuple[str, str], float] = defaultdict(float)
    for key, pods in held.items():
        scale = min(1.0, 1.0 / sum(pods.values()))  # sharers split the device's hour
        for pod, share in pods.items():
            total[pod] += share * scale * weight[key]
    return [
        BillRow(ns, pod, pod, round(hours, 9))
        for (ns, pod), hours in sorted(total.items())
        if hours > 0
    ]


__all__ = ["METRIC", "device_weight", "gpu_hours"]
