"""Downsampling raw samples into rollup buckets, one hour of raw data at a time.

Every write marks the hours it touched in ``rollup_pending``; ``roll_up_hour`` recomputes every
bucket of one such hour from the raw rows, so late or repeated writes simply redo the hour.
How a bucket is aggregated is ``window.aggregate``, which ``read_window`` also applies to the
raw samples not rolled up yet. Counters keep the last value read in the bucket, *not* a
difference: a counter that reset inside the bucket shows its post-reset value, and rates over
rollups take increases like rates over raw samples do.
"""

from __future__ import annotations

import sqlite3
from itertools import repeat

import numpy as np
import pandas as pd

from gpuwarden.store._schema import (
    ROLLUP_FIELDS,
    ROLLUP_RESOLUTIONS,
    ROLLUP_WINDOW_S,
    SAMPLE_FIELDS,
)
from gpuwarden.store.window import aggregate

_INSERT = (
    f"INSERT OR REPLACE INTO rollups (resolution_s, ts, gpu_id, n_samples, {', '.join(ROLLUP_FIELDS)}) "
    f"VALUES ({', '.join('?' * (4 + len(ROLLUP_FIELDS)))})"
)


def hour_of(ts: float) -> int:
    """Start (Unix s) of the rollup window that holds ``ts``."""
    return int(np.floor(ts / ROLLUP_WINDOW_S)) * ROLLUP_WINDOW_S


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
        agg = aggregate(frame, resolution_s, ROLLUP_FIELDS, key="gpu_id")
        columns_out = [agg[c].to_numpy(np.float64).tolist() for c in ROLLUP_FIELDS]
        conn.executemany(
            _INSERT,
            zip(
                repeat(resolution_s),
                agg["ts"].tolist(),
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
