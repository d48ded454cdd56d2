"""Reads for charts, on top of the store's one window read (``store.read_window``).

A day of 1,000 GPUs sampled every 15 s is almost 6 million raw rows: far too many to read for a
chart. ``resolution_for`` picks the rollup resolution that keeps a read small, and the store's
``read_window`` stitches its rollups to the raw samples after them. What is chart-specific stays
here: reading that raw tail only in a few short windows (``tail_every_s``, fleet-wide gauges),
and reading it in full only for the GPUs whose counters moved (``read_changes``, hard signals).
Both use the store's own pieces (``gpuwarden.store.window``): its rollup read, its aggregation,
its stitching.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from gpuwarden.store import window
from gpuwarden.store.base import ReadableStore

_ID = ["hostname", "gpu", "uuid", "model"]


def read_window(
    store: ReadableStore,
    start: float,
    end: float,
    fields: Sequence[str],
    *,
    uuids: Sequence[str] | None = None,
    resolution_s: int | None = None,
    tail_every_s: float | None = None,
    tail_width_s: float = 60.0,
) -> pd.DataFrame:
    """``store.read_window`` in ``[start, end)`` (Unix s): ts, hostname, gpu, uuid, model, then
    ``fields``, sorted by uuid, then ts.

    ``tail_every_s`` (with a ``resolution_s``) reads the raw samples not rolled up yet only in
    windows of ``tail_width_s`` every ``tail_every_s`` (and the newest one), bucketed as the
    store does: for gauges on a fleet-wide chart, an hour of 1,000 GPUs sampled every 15 s is
    240,000 rows, four readings of it 4,000.
    """
    fields = list(fields)
    if not (resolution_s and tail_every_s):
        frame = store.read_window(
            start=start, end=end, fields=fields, resolution_s=resolution_s, uuids=uuids
        )
        return _tidy(frame, fields)
    rolled, raw_from = window.read_rolled(
        store, start=start, end=end, fields=fields, resolution_s=resolution_s, uuids=uuids
    )
    starts = list(np.arange(raw_from, end, tail_every_s)) or [raw_from]
    newest = max(end - tail_width_s, starts[-1] + tail_width_s)
    if newest < end:  # the newest readings, without reading a window twice
        starts.append(newest)
    reads = [
        store.read_samples(start=t, end=min(t + tail_width_s, end), uuids=uuids, fields=fields)
        for t in starts
    ]
    raw = pd.concat([r for r in reads if len(r)] or reads[:1], ignore_index=True)
    tail = window.bucketed(raw, fields, resolution_s)
    return _tidy(window.stitch(rolled, tail, resolution_s), fields)


def read_changes(
    store: ReadableStore,
    start: float,
    end: float,
    fields: Sequence[str],
    *,
    resolution_s: int,
    probe_s: float,
    uuids: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Rollups, then raw samples as read (exact times), for counters and sticky flags: the raw
    tail is read in full only for the GPUs whose readings changed in it.

    One read of the newest ``probe_s`` of raw samples gives each GPU's latest reading; a GPU
    whose latest reading equals its last rolled-up one (counters that only grow, flags that
    stay set) changed nowhere in between, and its latest reading stands for the tail. The
    others (a change, no recent reading, a new board) get every raw sample, so the first time
    of a change stays exact.
    """
    fields = list(fields)
    rolled, raw_from = window.read_rolled(
        store, start=start, end=end, fields=fields, resolution_s=resolution_s, uuids=uuids
    )
    if not rolled.empty:  # the last rolled bucket is read again, raw
        rolled = rolled[rolled["ts"] < raw_from]
    if rolled.empty or end - raw_from <= 2 * probe_s:
        raw = store.read_samples(start=raw_from, end=end, uuids=uuids, fields=fields)
        return _tidy(window.stitch(rolled, raw, resolution_s), fields)
    probe = _tidy(
        store.read_samples(start=end - probe_s, end=end, uuids=uuids, fields=fields), fields
    )
    latest = probe.groupby("uuid", sort=False).tail(1).set_index("uuid")
    base = _tidy(rolled, fields).groupby("uuid", sort=False).tail(1).set_index("uuid")
    both = latest.index.intersection(base.index)
    now, then = latest.loc[both, fields].to_numpy(), base.loc[both, fields].to_numpy()
    same = ((now == then) | (np.isnan(now) & np.isnan(then))).all(axis=1)
    steady = set(both[same])
    changed = sorted((set(latest.index) | set(base.index)) - steady)
    parts = [latest.loc[sorted(steady)].reset_index()[probe.columns]]
    if changed:
        raw = store.read_samples(start=raw_from, end=end, uuids=changed, fields=fields)
        parts.append(_tidy(raw, fields))
    tail = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    return _tidy(window.stitch(rolled, tail, resolution_s), fields)


def _tidy(frame: pd.DataFrame, fields: list[str]) -> pd.DataFrame:
    """The columns this package uses, in (uuid, ts) order; an empty frame keeps them."""
    columns = ["ts", *_ID, *fields]
    if frame.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in _ID else float) for c in columns})
    for c in columns:
        if c not in frame:
            frame[c] = "" if c in _ID else np.nan
    out = frame[columns].copy()
    for c in _ID:
        if isinstance(out[c].dtype, pd.CategoricalDtype):
            out[c] = out[c].astype(str)
    return out.sort_values(["uuid", "ts"], kind="stable").reset_index(drop=True)


def resolution_for(
    span_s: float, *, gpus: int, step_s: float = 60.0, budget_rows: int = 100_000
) -> int | None:
    """The finest resolution (raw None, 300 s, 3600 s) that keeps a read under ``budget_rows``
    rows: 1,000 GPUs over a day read hourly rollups, one GPU over a week 5-minute ones."""
    gpus = max(gpus, 1)
    if gpus * span_s / max(step_s, 1.0) <= budget_rows:
        return None
    if gpus * span_s / 300 <= budget_rows:
        return 300
    return 3600
