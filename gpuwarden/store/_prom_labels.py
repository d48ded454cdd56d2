"""What dcgm-exporter's own labels say about a GPU: the pod holding it, and the driver.

dcgm-exporter on Kubernetes (``--kubernetes``, the default in its Helm chart) labels a GPU's
series with the pod, namespace and container using it; Prometheus renames them
``exported_pod``... when the scrape's own target labels clash (``honor_labels: false``). With
``DCGM_FI_DRIVER_VERSION`` in its counters file, every series carries the driver version as a
label of that name. Neither needs gpuwarden's collector: billing by namespace or pod, and the
driver version per host, can be read from a TSDB that only dcgm-exporter writes to.

    pod_samples(api, start, end, step_s)   per step, device (GPU or MIG instance) and pod:
                                           the samples that carried the pod's labels
    step_samples(api, start, end, step_s)  the most samples one series holds in a step
    pods(api, start, end, step_s=300)      one row per GPU and pod stay (from pod_samples)
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
SAMPLE_COLUMNS = ["uuid", "hostname", "gpu", "gpu_i_id", "gpu_i_profile", "namespace", "pod",
                  "container", "ts", "samples"]  # fmt: skip


def pod_samples(
    api: PromApi, start: float, end: float, step_s: float, metric: str = PRESENT
) -> pd.DataFrame:
    """Per look ``ts`` every ``step_s`` in ``(start, end]``, each seeing ``[ts - step_s, ts)``,
    and per device (a GPU, or its MIG instance ``gpu_i_id``) and pod: how many of ``metric``'s
    samples carried that pod's labels (``samples``, > 0). Columns ``SAMPLE_COLUMNS``, by uuid,
    gpu_i_id and ts. No pod label: no row."""
    by = ", ".join([GPU_BY, *(n for names in POD_LABELS.values() for n in names)])
    d = api.dialect
    # the two spellings of the pod label, or-ed: a series that has both is counted once
    held = [selector([metric], [name + '!=""']) for name in POD_LABELS["pod"]]
    has_pod = " or ".join(f"count_over_time({d.window(sel, step_s)})" for sel in held)
    expr = f"sum by ({by}) ({has_pod})"
    keys: list[tuple[str, str, int, str, str, str, str, str]] = []
    looks: list[tuple[np.ndarray, np.ndarray]] = []
    for a, b in time_spans(start, end, MAX_STEPS * step_s):
        for r in api.query_range(expr, a + step_s, b, step_s):
            gpu = gpu_of(r.labels, whole=True)
            if gpu is None or not len(r.ts):
                continue
            said = {k: next((r.labels[n] for n in names if r.labels.get(n)), "")
                    for k, names in POD_LABELS.items()}  # fmt: skip
            lab = r.labels.get
            keys.append((gpu.uuid, gpu.hostname, gpu.index, lab("GPU_I_ID", ""),
                         lab("GPU_I_PROFILE", ""), said["namespace"], said["pod"],
                         said["container"]))  # fmt: skip
            looks.append((np.asarray(r.ts, dtype=np.float64), np.asarray(r.values, np.float64)))
    sizes = [len(ts) for ts, _ in looks]
    out = pd.DataFrame(
        np.repeat(np.array(keys, dtype=object).reshape(-1, 8), sizes, axis=0),
        columns=SAMPLE_COLUMNS[:8],
    )
    out["ts"] = np.concatenate([ts for ts, _ in looks]) if looks else np.empty(0)
    out["samples"] = np.concatenate([v for _, v in looks]) if looks else np.empty(0)
    out = out[np.isfinite(out["samples"]) & (out["samples"] > 0)].astype({"gpu": np.int64})
    return out.sort_values(["uuid", "gpu_i_id", "ts"], kind="stable", ignore_index=True)


def step_samples(
    api: PromApi, start: float, end: float, step_s: float, metric: str = PRESENT
) -> float:
    """The most samples any one series of ``metric`` holds in one step of ``(start, end]``:
    what a whole step holds at the exporter's scrape interval (0: no sample)."""
    expr = f"max(count_over_time({api.dialect.window(metric, step_s)}))"
    most = 0.0
    for a, b in time_spans(start, end, MAX_STEPS * step_s):
        for r in api.query_range(expr, a + step_s, b, step_s):
            finite = r.values[np.isfinite(r.values)]
            most = max(most, float(finite.max(initial=0.0)))
    return most


def pods(api: PromApi, start: float, end: float, step_s: float = 300.0) -> pd.DataFrame:
    """Who held each GPU in ``[start, end)``, from the pod labels of its temperature series
    (``pod_samples``), looked at every ``step_s``: one row per GPU and unbroken stay of one pod,
    ``[ts_from, ts_to)`` to ``step_s``, by uuid and ts_from. No pod label: no row."""
    key = ["uuid", "namespace", "pod", "container"]
    seen = pod_samples(api, start, end, step_s)[[*key, "hostname", "gpu", "ts"]]
    # a MIG instance's looks are its GPU's; a stay is looks a step apart: a gap means the pod
    # left and came back; a look at ts saw [ts - step, ts), so a stay is [first - step, last)
    seen = seen.drop_duplicates([*key, "ts"]).sort_values([*key, "ts"], kind="stable")
    moved = (seen[key] != seen[key].shift()).any(axis=1) | (seen["ts"].diff() > step_s * 1.5)
    out = seen.groupby(moved.cumsum().to_numpy()).agg(
        uuid=("uuid", "first"), hostname=("hostname", "first"), gpu=("gpu", "first"),
        namespace=("namespace", "first"), pod=("pod", "first"),
        container=("container", "first"), ts_from=("ts", "min"), ts_to=("ts", "max"),
    )  # fmt: skip
    out["ts_from"] -= step_s
    out = out.reindex(columns=POD_COLUMNS)
    if out.empty:
        return out.astype({"gpu": np.int64, "ts_from": np.float64, "ts_to": np.float64})
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


__all__ = [
    "DRIVER_LABEL", "POD_COLUMNS", "POD_LABELS", "SAMPLE_COLUMNS", "drivers", "pod_samples",
    "pods", "step_samples",
]  # fmt: skip
