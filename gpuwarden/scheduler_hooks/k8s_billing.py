"""GPU-hours per Kubernetes namespace and pod, from dcgm-exporter's series in Prometheus.

dcgm-exporter (with its Kubernetes pod mapping on, the default in the GPU operator) labels a
GPU's series with the ``namespace``, ``pod`` and ``container`` using it, and a MIG instance's
with ``GPU_I_ID`` and ``GPU_I_PROFILE``. So a pod held a GPU for as long as that GPU's
``DCGM_FI_DEV_GPU_UTIL`` carried its name. Per hour ``[t - 1 h, t)`` and per device (``UUID``,
``GPU_I_ID``), each pod's share of the hour is its samples over a full hour's samples. The
samples per hour, device and pod are the store's ``read_pod_samples`` (the one reader of the
exporter's pod labels, ``read_pod_labels`` is built on it too; it knows Prometheus' renamed
``exported_pod``... as well):

    sum by (UUID, GPU_I_ID, GPU_I_PROFILE, namespace, pod, container, ...)
        (count_over_time(DCGM_FI_DEV_GPU_UTIL{pod!=""}[1h]))

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
from typing import Protocol

import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.scheduler import mig
from gpuwarden.scheduler.billing import BillRow

METRIC = "DCGM_FI_DEV_GPU_UTIL"
HOUR_S = 3600.0


class PodSampleStore(Protocol):
    """What billing reads: a Prometheus-API store's pod samples (``PrometheusStore``)."""

    def read_pod_samples(
        self, *, start: float, end: float, step_s: float = ..., metric: str = ...
    ) -> pd.DataFrame: ...

    def read_step_samples(
        self, *, start: float, end: float, step_s: float = ..., metric: str = ...
    ) -> float: ...


def device_weight(profile: str) -> float:
    """GPUs one device is: 1 for a whole GPU, compute slices / 7 for a MIG instance."""
    if not profile:
        return 1.0
    slices = profile.split("g.", 1)[0]
    if not slices.isdigit() or profile.removesuffix("+me") not in mig.profile_names():
        raise InputError(f"unknown MIG profile {profile!r} in {METRIC}'s GPU_I_PROFILE")
    return int(slices) / mig.COMPUTE_SLICES


def gpu_hours(
    store: PodSampleStore,
    since: float,
    until: float,
    *,
    scrape_interval_s: float | None = None,
    metric: str = METRIC,
) -> list[BillRow]:
    """GPU-hours per pod (namespace as tenant) in ``[since, until)``, whole hours from
    ``since``. ``store``: a Prometheus-API store (``PrometheusStore``, VictoriaMetrics')."""
    if not (math.isfinite(since) and math.isfinite(until)) or until - since < HOUR_S:
        raise InputError("the billing window must be at least one hour, since < until")
    looks = store.read_pod_samples(start=since, end=until, step_s=HOUR_S, metric=metric)
    if scrape_interval_s is not None:
        if not scrape_interval_s > 0:
            raise InputError("scrape_interval_s must be > 0")
        full = HOUR_S / scrape_interval_s
    else:
        full = store.read_step_samples(start=since, end=until, step_s=HOUR_S, metric=metric)
    if not full:
        return []
    # (hour, device) -> pod -> share of the hour
    held: dict[tuple[float, str, str], dict[tuple[str, str], float]] = defaultdict(dict)
    weight: dict[tuple[float, str, str], float] = {}
    for t, uuid, instance, profile, ns, pod, v in zip(
        *(looks[c].tolist() for c in ("ts", "uuid", "gpu_i_id", "gpu_i_profile", "namespace",
                                      "pod", "samples")), strict=True,
    ):  # fmt: skip
        key = (t, uuid, instance)
        held[key][(ns, pod)] = held[key].get((ns, pod), 0.0) + min(1.0, v / full)
        weight[key] = device_weight(profile)
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
