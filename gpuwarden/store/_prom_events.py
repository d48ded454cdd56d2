"""Xids from the series dcgm-exporter and gpuwarden's exporter keep, as events.

    DCGM_FI_DEV_XID_ERRORS            dcgm-exporter: the last Xid seen (a gauge). A change to a
                                      non-zero code is an Xid of that code.
    DCGM_EXP_XID_ERRORS_COUNT{xid}    dcgm-exporter 4.x: Xids of each code within a sliding
                                      window. A rise (or the series appearing) is a new Xid.
    gpuwarden_xid_errors_total{xid}   gpuwarden's exporter: Xids since it started. A rise of n
                                      is n Xids; after a restart (a reset) the new count is new.

Reading every raw sample of these would be a week of one series per GPU. Instead the server
finds the hours in which a series changed or appeared (``changes()``, ``count_over_time``),
and only those hours are read raw, with the hour before for the value it changed from. A
series that appears with a non-zero last-Xid gauge (an exporter started after the Xid) is kept
as of unknown time (``telemetry.TIME_UNKNOWN``), as ``dcgm+http://`` does.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from gpuwarden.store._promapi import MAX_STEPS, PromApi, time_spans
from gpuwarden.store._promql import matcher, selector
from gpuwarden.store._series import Raw, gpu_of
from gpuwarden.telemetry import DCGM_XID_COUNT_METRIC, DCGM_XID_METRIC, TIME_UNKNOWN, GpuId

#: metric -> how its values count Xids
XID_SERIES = {
    DCGM_XID_METRIC: "last",
    DCGM_XID_COUNT_METRIC: "window",
    "DCGM_FI_DEV_XID_ERRORS_ACTIVE": "window",  # its name in dcgm-exporter PR 239's build
    "gpuwarden_xid_errors_total": "total",
}
HOUR_S = 3600.0
#: one Xid counter rising by more than this between two samples is read as this many
MAX_PER_SAMPLE = 100

XidEvent = tuple[float, GpuId, int, str]  # ts, gpu, code, detail


def xid_events(api: PromApi, start: float, end: float) -> list[XidEvent]:
    """Xids in ``[start, end)`` from the series above, all GPUs."""
    first = float(np.floor(start / HOUR_S) * HOUR_S)
    last = float(np.ceil(end / HOUR_S) * HOUR_S)
    out: list[XidEvent] = []
    for metric, how in XID_SERIES.items():
        hours = _changed_hours(api, metric, first, last)
        for e, uuids in sorted(hours.items()):
            sel = selector([metric], [matcher("UUID", sorted(uuids))])
            raws = api.query(api.dialect.window(sel, 2 * HOUR_S), e)
            for r in raws:
                out += _events(r, metric, how, max(start, e - HOUR_S), min(end, e))
    return out


def _changed_hours(api: PromApi, metric: str, first: float, last: float) -> dict[float, set[str]]:
    """Hour ends -> the GPUs (``UUID``) whose ``metric`` changed or appeared in that hour."""
    d = api.dialect
    sel = selector([metric])
    born = (
        f"count_over_time({d.window(sel, HOUR_S)}) unless "
        f"count_over_time({sel}[{d.range(HOUR_S)}] offset {int(HOUR_S * 1000) + 1}ms)"
    )
    expr = f"(changes({d.window(sel, 2 * HOUR_S)}) > 0) or ({born})"
    hours: dict[float, set[str]] = defaultdict(set)
    for a, b in time_spans(first, last, MAX_STEPS * HOUR_S):
        for r in api.query_range(expr, a + HOUR_S, b, HOUR_S):
            uuid = r.labels.get("UUID", "")
            for e in r.ts.tolist():
                if uuid:
                    hours[float(e)].add(uuid)
    return hours


def _events(r: Raw, metric: str, how: str, lo: float, hi: float) -> list[XidEvent]:
    """The Xids one series' raw samples show in ``[lo, hi)``; samples before ``lo`` give the
    value each change is from."""
    gpu = gpu_of(r.labels, whole=True)
    if gpu is None or not len(r.ts):
        return []
    out: list[XidEvent] = []
    code_label = r.labels.get("xid", "")
    prev: float | None = None
    for t, v in zip(r.ts.tolist(), r.values.tolist(), strict=True):
        seen, prev = prev, v
        if not lo <= t < hi or not np.isfinite(v):
            continue
        if how == "last":
            code = int(v)
            if code == 0 or (seen is not None and v == seen):
                continue
            if seen is None:
                detail = f"{TIME_UNKNOWN} ({metric} = {code})"
            else:
                detail = f"{metric} changed from {int(seen)} to {code}"
            out.append((t, gpu, code, detail))
            continue
        if not code_label.isdigit():
            continue
        code = int(code_label)
        before = 0.0 if seen is None or (how == "total" and v < seen) else seen
        if v <= before:
            continue  # unchanged, or Xids leaving the window
        detail = f"{v - before:g} new ({metric} {before:g} -> {v:g})"
        times = min(MAX_PER_SAMPLE, int(v - before)) if how == "total" else 1
        out += [(t, gpu, code, detail)] * max(1, times)
    return out


__all__ = ["XID_SERIES", "xid_events"]
