"""Read a window of telemetry from a store at the resolution a chart needs.

A day of 1,000 GPUs sampled every 15 s is almost 6 million raw rows: far too many to read for a
chart. Whole buckets therefore come from the store's rollups (``resolution_s`` 300 or 3600), and
only the stretch the last ``compact`` has not rolled up yet comes from raw samples, bucketed
here the same way (counters: last value in the bucket; gauges: mean). The last rolled-up bucket
is read again from raw samples, because ``compact`` may have rolled it up while it was still
filling.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError, StoreError
from gpuwarden.store.base import Store
from gpuwarden.telemetry import FIELDS_BY_NAME

_ID = ["hostname", "gpu", "uuid", "model"]


def bucket_raw(frame: pd.DataFrame, fields: Sequence[str], resolution_s: int) -> pd.DataFrame:
    """Raw samples -> one row per (GPU, bucket), as the store's rollups: ``ts`` is the bucket
    start, counters keep the last value read, gauges the mean. NaN stays NaN (not read)."""
    if frame.empty:
        return frame
    frame = frame.assign(ts=np.floor(frame["ts"].to_numpy() / resolution_s) * resolution_s)
    counters = [f for f in fields if FIELDS_BY_NAME[f].kind == "counter"]
    gauges = [f for f in fields if f not in counters]
    grouped = frame.groupby(["uuid", "ts"], sort=True)
    parts = [grouped[["hostname", "gpu", "model"]].first()]
    if counters:
        parts.append(grouped[counters].last())  # last non-missing reading; rows are in ts order
    if gauges:
        parts.append(grouped[gauges].mean())
    return pd.concat(parts, axis=1).reset_index()[["ts", *_ID, *fields]]


def read_window(
    store: Store,
    start: float,
    end: float,
    fields: Sequence[str],
    *,
    uuids: Sequence[str] | None = None,
    resolution_s: int | None = None,
    bucket_tail: bool = True,
    tail_every_s: float | None = None,
    tail_width_s: float = 60.0,
) -> pd.DataFrame:
    """Samples in ``[start, end)`` (Unix s): ts, hostname, gpu, uuid, model, then ``fields``.

    ``resolution_s`` None reads raw samples; 300 or 3600 reads rollups where ``compact`` made
    them and the raw samples after them, bucketed the same way unless ``bucket_tail`` is
    False (then each raw sample is a row: exact times for the newest data). ``tail_every_s``
    reads that raw tail only in windows of ``tail_width_s`` every ``tail_every_s`` (and the
    newest one): for gauges on a fleet-wide chart, an hour of 1,000 GPUs sampled every 15 s
    is 240,000 rows, four readings of it 4,000. Sorted by uuid, then ts.
    """
    fields = list(fields)
    if not resolution_s:
        raw = store.read_samples(start=start, end=end, uuids=uuids, fields=fields)
        return _tidy(raw, fields)
    rolled, raw_from = _rolled(store, start, end, fields, uuids, resolution_s)
    if tail_every_s:
        starts = list(np.arange(raw_from, end, tail_every_s)) or [raw_from]
        newest = max(end - tail_width_s, starts[-1] + tail_width_s)
        if newest < end:  # the newest readings, without reading a window twice
            starts.append(newest)
        reads = [
            store.read_samples(start=t, end=min(t + tail_width_s, end), uuids=uuids, fields=fields)
            for t in starts
        ]
        raw = pd.concat([r for r in reads if len(r)] or reads[:1], ignore_index=True)
    else:
        raw = store.read_samples(start=raw_from, end=end, uuids=uuids, fields=fields)
    tail = bucket_raw(raw, fields, resolution_s) if bucket_tail else _tidy(raw, fields)
    return _join(rolled, tail, fields)


def read_changes(
    store: Store,
    start: float,
    end: float,
    fields: Sequence[str],
    *,
    resolution_s: int,
    probe_s: float,
    uuids: Sequence[str] | None = None,
) -> pd.DataFrame:
    """``read_window(..., bucket_tail=False)`` for counters and sticky flags, reading the raw
    tail in full only for the GPUs whose readings changed in it.

    One read of the newest ``probe_s`` of raw samples gives each GPU's latest reading; a GPU
    whose latest reading equals its last rolled-up one (counters that only grow, flags that
    stay set) changed nowhere in between, and its latest reading stands for the tail. The
    others (a change, no recent reading, a new board) get every raw sample, so the first time
    of a change stays exact.
    """
    fields = list(fields)
    rolled, raw_from = _rolled(store, start, end, fields, uuids, resolution_s)
    if rolled.empty or end - raw_from <= 2 * probe_s:
        raw = store.read_samples(start=raw_from, end=end, uuids=uuids, fields=fields)
        return _join(rolled, _tidy(raw, fields), fields)
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
    return _join(rolled, tail, fields)


def _rolled(
    store: Store,
    start: float,
    end: float,
    fields: list[str],
    uuids: Sequence[str] | None,
    resolution_s: int,
) -> tuple[pd.DataFrame, float]:
    """The rollups from ``start``'s bucket, and where the raw tail starts."""
    first = float(np.floor(start / resolution_s) * resolution_s)
    try:
        rolled = store.read_samples(
            start=first, end=end, uuids=uuids, fields=fields, resolution_s=resolution_s
        )
    except (InputError, StoreError, NotImplementedError):
        rolled = pd.DataFrame()  # a backend without rollups: raw samples only
    raw_from = first
    if not rolled.empty:
        # re-read the last rolled bucket from raw: it may have been rolled up half full
        raw_from = float(rolled["ts"].max())
        rolled = rolled[rolled["ts"] < raw_from]
    return rolled, raw_from


def _join(rolled: pd.DataFrame, tail: pd.DataFrame, fields: list[str]) -> pd.DataFrame:
    parts = [p for p in (_tidy(rolled, fields), tail) if len(p)]
    if not parts:
        return _tidy(tail, fields)
    out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return out.sort_values(["uuid", "ts"], kind="stable").reset_index(drop=True)


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
