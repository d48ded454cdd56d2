"""Hourly rollups kept as series, so that a week of a fleet is read as 168 points per GPU and
field instead of every scrape.

``VictoriaMetricsStore.compact(now)`` has the server roll up every whole hour not rolled up yet
(the same PromQL a live read runs, ``_prom_reads.rollups``) and writes the result back:

    gpuwarden_rollup{<GPU labels>, field="mem_temp_c_max", resolution="3600"}   at the hour
    gpuwarden_rollup_until{resolution="3600"}            the end of the hours rolled up, at it

An hourly read (any ``PrometheusStore``: also ``prometheus+http://`` pointed at such a
VictoriaMetrics) then takes the rolled-up hours from these series and rolls up only the hours
after them on the server, as SQLite stitches its rollups to the raw tail. A plain Prometheus
has no such series and rolls up every hour when it is read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuwarden.store._promapi import PromApi
from gpuwarden.store._promql import matcher, selector
from gpuwarden.store._series import Series, gpu_labels
from gpuwarden.telemetry import GpuId

ROLLUP = "gpuwarden_rollup"
UNTIL = "gpuwarden_rollup_until"
#: The resolution kept as series (5-minute windows are short: they are rolled up when read).
RESOLUTION = 3600


def until(api: PromApi, at: float, lookback_s: float) -> float | None:
    """The end of the hours rolled up, as of ``at``; None when nothing was."""
    sel = selector([UNTIL], [matcher("resolution", [str(RESOLUTION)])])
    got = api.query(f"max(last_over_time({sel}[{api.dialect.range(lookback_s)}]))", at)
    return float(got[0].values[-1]) if got and len(got[0].values) else None


def series(frame: pd.DataFrame, inventory: pd.DataFrame, fields: list[str]) -> list[Series]:
    """A rolled-up window (``_prom_reads.rollups``: ts the hour, identity, ``fields``) as
    series, one per GPU and field; ``inventory`` (uuid index) gives each GPU's labels."""
    out: list[Series] = []
    if frame.empty:
        return out
    ts_ms = np.rint(frame["ts"].to_numpy(np.float64) * 1000).astype(np.int64)
    codes, uuids = pd.factorize(frame["uuid"])
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    values = {f: frame[f].to_numpy(np.float64)[order] for f in fields}
    ts_sorted = ts_ms[order]
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(order)], strict=True):
        uuid = str(uuids[codes[order[lo]]])
        row = inventory.loc[uuid]
        gpu = GpuId(
            row["hostname"], int(row["gpu"]), uuid, row["pci_bus_id"], row["model"], row["rack"]
        )
        labels = {"__name__": ROLLUP, **gpu_labels(gpu), "resolution": str(RESOLUTION)}
        t = ts_sorted[lo:hi]
        for f in fields:
            v = values[f][lo:hi]
            keep = np.isfinite(v)
            if keep.any():
                out.append(Series({**labels, "field": f}, t[keep], v[keep]))
    return out


def marker(end: float) -> Series:
    """``gpuwarden_rollup_until`` saying the hours before ``end`` are rolled up."""
    labels = {"__name__": UNTIL, "resolution": str(RESOLUTION)}
    return Series(labels, np.array([int(round(end * 1000))]), np.array([float(end)]))


__all__ = ["RESOLUTION", "ROLLUP", "UNTIL", "marker", "series", "until"]
