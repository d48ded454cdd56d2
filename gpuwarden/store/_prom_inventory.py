"""Which GPUs a Prometheus-compatible server holds, and when each first and last reported.

The server has no table of GPUs: they are the label sets of the series that say a GPU reported
(``PRESENCE`` in ``prometheus.py``), and their first and last sample times.

    VictoriaMetrics   one query each: ``tfirst_over_time`` / ``tlast_over_time`` over the span.
    Prometheus        a day at a time first (``count_over_time``, one point per GPU and day,
                      cheap), then an hour at a time in the first and the last day each GPU
                      reported, then, in its first and last hour, a five-minute subquery over
                      ``timestamp()``: the last sample exactly, the first to five minutes. A
                      subquery over the whole span steps through every minute of it and takes
                      Prometheus tens of seconds; over a day, 24 times an hour's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.store import _prom_records, _series
from gpuwarden.store._promapi import MAX_STEPS, PromApi, time_spans
from gpuwarden.store._promql import GPU_BY, Dialect, quote, selector

GPU_COLUMNS = ["hostname", "gpu", "uuid", "pci_bus_id", "model", "rack", "first_ts", "last_ts"]
DAY_S = 86400.0
HOUR_S = 3600.0
#: Prometheus' fine pass steps this often; its lookback (5 minutes) sees every sample.
FINE_STEP_S = 300


def seen(api: PromApi, names: Sequence[str], since: float, now: float) -> pd.DataFrame:
    """The GPUs and MIG instances with a sample of ``names`` in ``(since, now]``: the
    ``gpus()`` columns plus ``parent_uuid`` and ``host_label``."""
    d = api.dialect
    at = math.ceil((now + 1) / FINE_STEP_S) * FINE_STEP_S  # a whole step after every sample
    if d.tfuncs:
        sel = selector(list(names))
        span = d.range(at - since)
        exprs = [f"max by ({GPU_BY}) (tlast_over_time({sel}[{span}]))",
                 f"min by ({GPU_BY}) (tfirst_over_time({sel}[{span}]))"]  # fmt: skip
        # both at once: each is a scan of the span's raw samples on the server
        last, first = api.map(lambda e: api.query(e, at), exprs)
        return rows(last, first)
    n = max(1, math.ceil((at - since) / DAY_S))
    days = _periods(api, names, [at], n * DAY_S, DAY_S)
    # a point per GPU and step: the hour passes take as many steps a query as the budget holds
    gpus = len(days)
    last_days = _periods(api, names, {max(ts) for ts in days.values()}, DAY_S, HOUR_S, gpus)
    first_days = _periods(api, names, {min(ts) for ts in days.values()}, DAY_S, HOUR_S, gpus)
    last = _fine(api, names, d, {max(ts) for ts in last_days.values()}, first=False)
    first = _fine(api, names, d, {min(ts) for ts in first_days.values()}, first=True)
    return rows(last, first)


def _tagged(names: Sequence[str], fn: str) -> str:
    """``fn`` applied to each metric, tagged so that one GPU's metrics do not collide once
    the functions drop their names."""
    tag = quote("gpuwarden_metric")
    return " or ".join(
        f"label_replace({fn.format(selector([n]))}, {tag}, {quote(n)}, {quote('')}, {quote('')})"
        for n in names
    )


def _periods(
    api: PromApi,
    names: Sequence[str],
    ends: Iterable[float],
    span_s: float,
    width_s: float,
    gpus: int = 0,
) -> dict[str, list[float]]:
    """GPU (its labels, as a key) -> the ends of the periods ``width_s`` long, in the
    ``span_s`` before each of ``ends``, with a sample in them; ``gpus``: how many series
    to expect (0: unknown), so that a query asks for at most ``api.max_points`` points (a
    step for all of them at least: the list of GPUs is not cut by host)."""
    d = api.dialect
    steps = max(1, min(MAX_STEPS, api.max_points // gpus)) if gpus else MAX_STEPS
    count = "count_over_time({}[" + d.range(width_s) + "])"
    expr = f"max by ({GPU_BY}) ({_tagged(names, count)})"
    out: dict[str, list[float]] = {}
    for end in sorted(set(ends)):
        for a, b in time_spans(end - span_s, end, steps * width_s):
            for r in api.query_range(expr, a + width_s, b, width_s):
                out.setdefault(_key(r.labels), []).extend(r.ts.tolist())
    return out


def _fine(
    api: PromApi, names: Sequence[str], d: Dialect, ends: set[float], *, first: bool
) -> list[_series.Raw]:
    """Per GPU, its first or last sample time in each hour ending at ``ends``."""
    agg, fn = ("min", "min_over_time") if first else ("max", "max_over_time")
    stamps = f"{agg} by ({GPU_BY}) ({_tagged(names, 'timestamp({})')})"
    expr = f"{agg} by ({GPU_BY}) ({fn}(({stamps})[{d.range(HOUR_S)}:{FINE_STEP_S}s]))"
    out: list[_series.Raw] = []
    for part in api.map(lambda t: api.query(expr, t), sorted(ends)):
        out += part
    return out


def _key(labels: dict[str, str]) -> str:
    return "\x00".join(f"{k}={v}" for k, v in sorted(labels.items()))


def rows(last: list[_series.Raw], first: list[_series.Raw]) -> pd.DataFrame:
    """One row per GPU or MIG instance from the label sets the queries returned: identity
    from its newest label set, the earliest first and the latest last time."""
    firsts: dict[str, float] = {}
    for r in first:
        for gpu in {_series.gpu_of(r.labels), _series.gpu_of(r.labels, whole=True)}:
            if gpu is not None and len(r.values):
                firsts[gpu.uuid] = min(firsts.get(gpu.uuid, math.inf), float(r.values.min()))
    out: dict[str, list[Any]] = {}
    for r in last:
        host_label = next((h for h in _series.HOST_LABELS if r.labels.get(h)), "")
        t = float(r.values.max()) if len(r.values) else math.nan
        for gpu in {_series.gpu_of(r.labels), _series.gpu_of(r.labels, whole=True)}:
            if gpu is None or not math.isfinite(t):
                continue
            parent = gpu.uuid[4:].rpartition("/")[0] if gpu.uuid.startswith("MIG-") else ""
            old = out.get(gpu.uuid)
            if old is None or t >= old[7]:
                row = [gpu.hostname, gpu.index, gpu.uuid, gpu.pci_bus_id, gpu.model, gpu.rack,
                       min(firsts.get(gpu.uuid, t), t), t, parent, host_label]  # fmt: skip
                if old is not None:
                    row[6] = min(row[6], old[6])
                out[gpu.uuid] = row
    columns = [*GPU_COLUMNS, "parent_uuid", "host_label"]
    return _prom_records.frame_of(
        [tuple(r) for r in out.values()], columns, gpu=np.int64, first_ts=np.float64,
        last_ts=np.float64,
    )  # fmt: skip


def merge(old: pd.DataFrame | None, new: pd.DataFrame) -> pd.DataFrame:
    """The inventory brought up to date: identity from the newest sighting, first_ts the
    earliest, last_ts the latest."""
    if old is None or old.empty:
        return new.reset_index(drop=True)
    both = pd.concat([old, new], ignore_index=True)
    first = both.groupby("uuid")["first_ts"].min()
    both = both.sort_values("last_ts", kind="stable").drop_duplicates("uuid", keep="last")
    both["first_ts"] = first.reindex(both["uuid"]).to_numpy()
    return both.reset_index(drop=True)


__all__ = ["GPU_COLUMNS", "merge", "rows", "seen"]
