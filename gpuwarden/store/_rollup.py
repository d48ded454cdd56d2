"""Downsampling raw samples into rollup buckets, one hour of raw data at a time.

Every write marks the hours it touched in ``rollup_pending``; ``roll_up_hour`` recomputes every
bucket of one such hour from the raw rows, so late or repeated writes simply redo the hour.
Counters keep the last value read in the bucket, *not* a difference: a counter that reset inside
the bucket shows its post-reset value, and rates over rollups take increases like rates over raw
samples do.
"""

from __future__ import annotations

import sqlite3
from itertools import repeat

import numpy as np
import pandas as pd

from gpuwarden.store._schema import (
    ROLLUP_FIELDS,
    ROLLUP_MAX_FIELDS,
    ROLLUP_RESOLUTIONS,
    ROLLUP_WINDOW_S,
    SAMPLE_FIELDS,
    rollup_agg,
)
from gpuwarden.telemetry import FIELDS_BY_NAME

_MEAN = [n for n in SAMPLE_FIELDS if rollup_agg(FIELDS_BY_NAME[n]) == "mean"]
_LAST = [n for n in SAMPLE_FIELDS if rollup_agg(FIELDS_BY_NAME[n]) == "last"]
_OR = [n for n in SAMPLE_FIELDS if rollup_agg(FIELDS_BY_NAME[n]) == "or"]

_INSERT = (
    f"INSERT OR REPLACE INTO rollups (resolution_s, ts, gpu_id, n_samples, {', '.join(ROLLUP_FIELDS)}) "
    f"VALUES ({', '.join('?' * (4 + len(ROLLUP_FIELDS)))})"
)


def hour_of(ts: float) -> int:
    """Start (Unix s) of the rollup window that holds ``ts``."""
    return int(np.floor(ts / ROLLUP_WINDOW_S)) * ROLLUP_WINDOW_S


def _bitwise_or(frame: pd.DataFrame, keys: list[str], column: str) -> pd.Series:
    """OR of the bits set in ``column`` per group; NaN where the group read no value."""
    raw = frame[column].to_numpy()
    valid = np.isfinite(raw) & (raw >= 0)
    ints = np.where(valid, raw, 0).astype(np.int64)
    width = max(int(ints.max()).bit_length(), 1) if len(ints) else 1
    bits = pd.DataFrame({k: frame[k] for k in keys})
    for b in range(width):
        bits[b] = np.where(valid, (ints >> b) & 1, np.nan)
    per_bit = bits.groupby(keys, sort=True).max()
    weights = np.array([float(1 << b) for b in range(width)])
    out = per_bit.to_numpy() @ weights  # NaN propagates where no value was read
    return pd.Series(out, index=per_bit.index)


def _aggregate(frame: pd.DataFrame, resolution_s: int) -> pd.DataFrame:
    """One row per (gpu_id, bucket): n_samples, then the ``ROLLUP_FIELDS`` columns."""
    frame = frame.assign(bucket=np.floor(frame["ts"].to_numpy() / resolution_s) * resolution_s)
    keys = ["gpu_id", "bucket"]
    grouped = frame.groupby(keys, sort=True)
    parts: list[pd.DataFrame | pd.Series] = [
        grouped.size().rename("n_samples"),
        grouped[_MEAN].mean(),
        grouped[_LAST].last(),  # last non-missing reading; rows are in time order
        grouped[list(ROLLUP_MAX_FIELDS)].max().add_suffix("_max"),
    ]
    parts += [_bitwise_or(frame, keys, c).rename(c) for c in _OR]
    out = pd.concat(parts, axis=1)
    return out[["n_samples", *ROLLUP_FIELDS]].reset_index()


def roll_up_hour(conn: sqlite3.Connection, hour_ts: int) -> int:
    """Recompute every rollup bucket of ``[hour_ts, hour_ts + 1 h)`` and clear its pending mark.

    The caller holds a write transaction, so no sample can land in the hour between the read
    and the pending mark's removal. Returns the raw rows read.
    """
    columns = ", ".join(SAMPLE_FIELDS)
    rows = conn.execute(
        f"SELECT gpu_id, ts, {columns} FROM samples WHERE ts >= ? AND ts < ?",
        (hour_ts, hour_ts + ROLLUP_WINDOW_S),
    ).fetchall()
    conn.execute("DELETE FROM rollup_pending WHERE hour_ts = ?", (hour_ts,))
    if not rows:
        return 0
    frame = pd.DataFrame(np.array(rows, dtype=np.float64), columns=["gpu_id", "ts", *SAMPLE_FIELDS])
    frame["gpu_id"] = frame["gpu_id"].astype(np.int64)
    # Sorted here, not by SQL: an ORDER BY can lure the planner off the (ts, gpu) key onto
    # the per-GPU index, a lookup per row. groupby keeps this order, so last() is the latest.
    frame = frame.sort_values("ts", kind="stable")
    for resolution_s in ROLLUP_RESOLUTIONS:
        agg = _aggregate(frame, resolution_s)
        columns_out = [agg[c].to_numpy(np.float64).tolist() for c in ROLLUP_FIELDS]
        conn.executemany(
            _INSERT,
            zip(
                repeat(resolution_s),
                agg["bucket"].tolist(),
                agg["gpu_id"].tolist(),
                agg["n_samples"].tolist(),
                *columns_out,
                strict=False,
            ),
        )
    return len(rows)


def pending_hours(conn: sqlite3.Connection, *, before: float) -> list[int]:
    """Hours with raw samples not yet rolled up that start before ``before`` (Unix s)."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT hour_ts FROM rollup_pending WHERE hour_ts < ? ORDER BY hour_ts", (before,)
        )
    ]
