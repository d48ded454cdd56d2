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
) -> pd.DataFrame:
    """Samples in ``[start, end)`` (Unix s): ts, hostname, gpu, uuid, model, then ``fields``.

    ``resolution_s`` None reads raw samples; 300 or 3600 reads rollups where ``compact`` made
    them and the raw samples after them, bucketed the same way unless ``bucket_tail`` is
    False (then each raw sample is a row: exact times for the newest data). Sorted by uuid,
    then ts.
    """
    fields = list(fields)
    if not resolution_s:
        raw = store.read_samples(start=start, end=end, uuids=uuids, fields=fields)
        return _tidy(raw, fields)
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
    raw = store.read_samples(start=raw_from, end=end, uuids=uuids, fields=fields)
    tail = bucket_raw(raw, fields, resolution_s) if bucket_tail else _tidy(raw, fields)
    parts = [p for p in (_tidy(rolled, fields), tail) if len(p)]
    if not parts:
        return _tidy(raw, fields)
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
