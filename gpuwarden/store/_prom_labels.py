"""What dcgm-exporter's own labels say about a GPU: the pod holding it, and the driver.

dcgm-exporter on Kubernetes (``--kubernetes``, the default in its Helm chart) labels a GPU's
series with the pod, namespace and container using it; Prometheus renames them
``exported_pod``... when the scrape's own target labels clash (``honor_labels: false``). With
``DCGM_FI_DRIVER_VERSION`` in its counters file, every series carries the driver version as a
label of that name. Neither needs gpuwarden's collector: billing by namespace or pod, and the
driver version per host, can be read from a TSDB that only dcgm-exporter writes to.

    pods(api, start, end, step_s=300)      one row per GPU and pod stay
    drivers(api, at, lookback_s)           one row per GPU: the newest driver label
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuwarden.store._promapi import MAX_STEPS, PromApi, time_spans
from gpuwarden.store._promql import GPU_BY, selector
from gpuwarden.store._series import gpu_of

#: The series that say a GPU reported (every exporter sends its temperature).
PRESENT = "DCGM_FI_DEV_GPU_TEMP"
#: Each of pod, namespace, container, as dcgm-exporter names it and as Prometheus renames it.
POD_LABELS = {k: (k, f"exported_{k}") for k in ("namespace", "pod", "container")}
DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"
POD_COLUMNS = ["uuid", "hostname", "gpu", "namespace", "pod", "container", "ts_from", "ts_to"]


def pods(api: PromApi, start: float, end: float, step_s: float = 300.0) -> pd.DataFrame:
    """Who held each GPU in ``[start, end)``, from the pod labels of its temperature series,
    looked at every ``step_s``: one row per GPU and unbroken stay of one pod, ``[ts_from,
    ts_to)`` to ``step_s``, by uuid and ts_from. No pod label: no row."""
    by = ", ".join([GPU_BY, *(n for names in POD_LABELS.values() for n in names)])
    d = api.dialect
    # a look at t sees the samples in [t - step, t): a stay is [first look - step, last look)
    held = [selector([PRESENT], [name + '!=""']) for name in POD_LABELS["pod"]]
    has_pod = " or ".join(f"count_over_time({d.window(sel, step_s)})" for sel in held)
    expr = f"max by ({by}) ({has_pod})"
    rows = []
    for a, b in time_spans(start, end, MAX_STEPS * step_s):
        for r in api.query_range(expr, a + step_s, b, step_s):
            gpu = gpu_of(r.labels, whole=True)
            if gpu is None or not len(r.ts):
                continue
            said = {k: next((r.labels[n] for n in names if r.labels.get(n)), "")
                    for k, names in POD_LABELS.items()}  # fmt: skip
            # an unbroken stay: looks a step apart; a gap means the pod left and came back
            breaks = np.flatnonzero(np.diff(r.ts) > step_s * 1.5) + 1
            for seg in np.split(r.ts, breaks):
                rows.append((gpu.uuid, gpu.hostname, gpu.index, said["namespace"], said["pod"],
                             said["container"], float(seg[0]) - step_s, float(seg[-1])))  # fmt: skip
    out = pd.DataFrame(rows, columns=POD_COLUMNS)
    if out.empty:
        return out.astype({"gpu": np.int64, "ts_from": np.float64, "ts_to": np.float64})
    # a stay read in two time spans is one stay
    out = out.sort_values(["uuid", "namespace", "pod", "container", "ts_from"], kind="stable")
    key = out[["uuid", "namespace", "pod", "container"]].astype(str).agg("\0".join, axis=1)
    new = (key != key.shift()) | (out["ts_from"] > out["ts_to"].shift())
    out = out.groupby(new.cumsum().to_numpy()).agg(
        {**{c: "first" for c in POD_COLUMNS if c != "ts_to"}, "ts_to": "max"}
    )
    return out.sort_values(["uuid", "ts_from"], kind="stable", ignore_index=True)


def drivers(api: PromApi, at: float, lookback_s: float) -> pd.DataFrame:
    """Each GPU's driver version as its newest series in the lookback labels it: hostname,
    uuid, driver_version, last_ts; no such label, no row."""
    sel = selector([PRESENT], [DRIVER_LABEL + '!=""'])
    d = api.dialect
    if d.tfuncs:  # VictoriaMetrics: the last sample's time, exactly
        last = f"tlast_over_time({sel}[{d.range(lookback_s)}])"
    else:  # Prometheus: to the hour, enough to order an upgrade
        last = f"max_over_time(timestamp({sel})[{d.range(lookback_s)}:1h])"
    rows = []
    for r in api.query(f"max by ({GPU_BY}, {DRIVER_LABEL}) ({last})", at):
        gpu = gpu_of(r.labels, whole=True)
        if gpu is not None and len(r.values):
            rows.append((gpu.hostname, gpu.uuid, r.labels[DRIVER_LABEL], float(r.values[-1])))
    out = pd.DataFrame(rows, columns=["hostname", "uuid", "driver_version", "last_ts"])
    out = out.sort_values("last_ts", kind="stable").drop_duplicates("uuid", keep="last")
    return out.sort_values(["hostname", "uuid"], ignore_index=True)


__all__ = ["DRIVER_LABEL", "POD_COLUMNS", "POD_LABELS", "drivers", "pods"]
