"""The SQLite store's verdicts table: gpuwarden's stored decisions, rows in and out.

A verdict names its GPU by uuid, hostname and index rather than by the gpus table's id: the
verdicts may live in another file than the telemetry (``serve --verdicts``), and writing one
must not move a GPU's ``last_ts``, which says when it last *reported*.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Sequence

import numpy as np
import pandas as pd

from gpuwarden.health import VERDICT_COLUMNS, GpuState, Reason, Verdict

DDL = """
CREATE TABLE IF NOT EXISTS verdicts (
    ts REAL NOT NULL,
    uuid TEXT NOT NULL,
    hostname TEXT NOT NULL,
    idx INTEGER NOT NULL,
    state TEXT NOT NULL,
    risk REAL,
    cause TEXT NOT NULL,
    since REAL,
    changed_from TEXT,
    reasons TEXT NOT NULL,
    action TEXT NOT NULL,
    threshold REAL,
    PRIMARY KEY (uuid, ts)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS verdicts_ts ON verdicts (ts)
"""

INSERT = (
    "INSERT OR REPLACE INTO verdicts (ts, uuid, hostname, idx, state, risk, cause, since, "
    "changed_from, reasons, action, threshold) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SELECT = (
    "SELECT ts, hostname, idx, uuid, state, risk, cause, since, changed_from, reasons, action, "
    "threshold FROM verdicts"
)


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def rows(verdicts: Sequence[Verdict]) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for v in verdicts:
        reasons = [r.to_json() if isinstance(r, Reason) else str(r) for r in v.reasons]
        out.append(
            (
                float(v.ts), v.gpu.uuid, v.gpu.hostname, int(v.gpu.index), str(v.state),
                _num(v.risk), v.cause, _num(v.since),
                None if v.changed_from is None else str(v.changed_from),
                json.dumps(reasons), v.action, _num(v.threshold),
            )
        )  # fmt: skip
    return out


def create(conn: sqlite3.Connection) -> None:
    for statement in DDL.split(";\n"):
        conn.execute(statement)


def frame(
    conn: sqlite3.Connection,
    *,
    start: float | None,
    end: float | None,
    uuids: Sequence[str] | None,
    latest: bool,
    changes: bool = False,
) -> pd.DataFrame:
    """``VERDICT_COLUMNS`` by ts; ``reasons`` a tuple of ``Reason`` per row. ``changes``: only
    each GPU's first row in the window and the rows whose state differs from its row before
    (``health.state_changes``), found by a window function over the table."""
    where: list[str] = []
    params: list[object] = []
    if start is not None:
        where.append("ts >= ?")
        params.append(float(start))
    if end is not None:
        where.append("ts < ?")
        params.append(float(end))
    if uuids is not None:
        where.append("uuid IN (SELECT value FROM json_each(?))")
        params.append(json.dumps(list(uuids)))
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    if latest:  # each GPU's newest verdict in the window
        sql = (
            f"{_SELECT} WHERE (uuid, ts) IN "
            f"(SELECT uuid, max(ts) FROM verdicts{clause} GROUP BY uuid)"
        )
    elif changes:
        columns = _SELECT.removeprefix("SELECT ").removesuffix(" FROM verdicts")
        sql = (
            f"SELECT {columns} FROM (SELECT *, lag(state) OVER (PARTITION BY uuid ORDER BY ts) "
            f"AS previous FROM verdicts{clause}) WHERE previous IS NULL OR previous != state"
        )
    else:
        sql = _SELECT + clause
    got = conn.execute(sql + " ORDER BY ts, hostname, idx", params).fetchall()
    out = pd.DataFrame.from_records(got, columns=list(VERDICT_COLUMNS))
    for c in ("ts", "risk", "since", "threshold"):
        out[c] = out[c].astype(np.float64)
    out["gpu"] = out["gpu"].astype(np.int64)
    out["state"] = [GpuState(s) for s in out["state"]]
    out["changed_from"] = [GpuState(s) if isinstance(s, str) else None for s in out["changed_from"]]
    out["reasons"] = [tuple(Reason.from_json(r) for r in json.loads(s)) for s in out["reasons"]]
    return out
