"""The SQLite store's ``gpu_assignments`` and ``nodes`` tables (schema 4).

An assignment is one (namespace, pod, container) holding one GPU or MIG instance over
``[ts_from, ts_to)``; ``ts_to`` is NULL while it still holds it, and ``last_seen`` is the
newest reading that said so. A row is written when the assignment changes, not on every
reading: the same pod seen again only moves ``last_seen``. Empty labels mean unassigned and
close what was open. ``nodes`` keeps each host's newest driver and CUDA driver versions.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.telemetry import Assignment, NodeInfo

DDL = """
CREATE TABLE IF NOT EXISTS gpu_assignments (
    id INTEGER PRIMARY KEY,
    gpu_id INTEGER NOT NULL REFERENCES gpus (id),
    namespace TEXT NOT NULL,
    pod TEXT NOT NULL,
    container TEXT NOT NULL,
    ts_from REAL NOT NULL,
    last_seen REAL NOT NULL,
    ts_to REAL
);
CREATE INDEX IF NOT EXISTS gpu_assignments_gpu ON gpu_assignments (gpu_id, ts_from);
CREATE INDEX IF NOT EXISTS gpu_assignments_ts ON gpu_assignments (ts_from);
CREATE TABLE IF NOT EXISTS nodes (
    hostname TEXT PRIMARY KEY,
    driver_version TEXT NOT NULL DEFAULT '',
    cuda_driver_version TEXT NOT NULL DEFAULT '',
    first_ts REAL NOT NULL,
    last_ts REAL NOT NULL
)"""

ASSIGNMENT_COLUMNS = [
    "uuid", "hostname", "gpu", "namespace", "pod", "container", "ts_from", "ts_to", "last_seen",
]  # fmt: skip
NODE_COLUMNS = ["hostname", "driver_version", "cuda_driver_version", "first_ts", "last_ts"]


def create(conn: sqlite3.Connection) -> None:
    for statement in DDL.split(";\n"):
        conn.execute(statement)


def _newest(col: str) -> str:
    return (
        f"CASE WHEN excluded.{col} = '' THEN nodes.{col} "
        f"WHEN nodes.{col} = '' OR excluded.last_ts >= nodes.last_ts THEN excluded.{col} "
        f"ELSE nodes.{col} END"
    )


_UPSERT_NODE = f"""
INSERT INTO nodes (hostname, driver_version, cuda_driver_version, first_ts, last_ts)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (hostname) DO UPDATE SET
    driver_version = {_newest("driver_version")},
    cuda_driver_version = {_newest("cuda_driver_version")},
    first_ts = min(nodes.first_ts, excluded.first_ts),
    last_ts = max(nodes.last_ts, excluded.last_ts)
"""


def write_nodes(conn: sqlite3.Connection, nodes: Sequence[NodeInfo]) -> None:
    conn.executemany(
        _UPSERT_NODE,
        [(n.hostname, n.driver_version, n.cuda_driver_version, n.ts, n.ts) for n in nodes],
    )


def write(conn: sqlite3.Connection, assignments: Sequence[Assignment], ids: dict[str, int]) -> None:
    """Apply readings in time order: open new holders, close gone ones, move ``last_seen``."""
    readings: dict[tuple[int, float], set[tuple[str, str, str]]] = {}
    for a in assignments:
        held = readings.setdefault((ids[a.gpu.uuid], float(a.ts)), set())
        if a.namespace or a.pod or a.container:
            held.add((a.namespace, a.pod, a.container))
    for (gpu_id, ts), held in sorted(readings.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        open_rows = conn.execute(
            "SELECT id, namespace, pod, container, last_seen FROM gpu_assignments "
            "WHERE gpu_id = ? AND ts_to IS NULL",
            (gpu_id,),
        ).fetchall()
        if any(row[4] > ts for row in open_rows):
            continue  # an older reading, replayed late: what is open already says more
        still = set()
        for row_id, namespace, pod, container, _ in open_rows:
            if (namespace, pod, container) in held:
                still.add((namespace, pod, container))
                conn.execute("UPDATE gpu_assignments SET last_seen = ? WHERE id = ?", (ts, row_id))
            else:
                conn.execute("UPDATE gpu_assignments SET ts_to = ? WHERE id = ?", (ts, row_id))
        conn.executemany(
            "INSERT INTO gpu_assignments (gpu_id, namespace, pod, container, ts_from, last_seen) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(gpu_id, *who, ts, ts) for who in sorted(held - still)],
        )


def frame(
    conn: sqlite3.Connection,
    *,
    start: float | None,
    end: float | None,
    uuids: Sequence[str] | None,
) -> pd.DataFrame:
    where: list[str] = []
    params: list[object] = []
    if end is not None:
        where.append("a.ts_from < ?")
        params.append(float(end))
    if start is not None:
        where.append("coalesce(a.ts_to, a.last_seen) >= ?")
        params.append(float(start))
    if uuids is not None:
        where.append("g.uuid IN (SELECT value FROM json_each(?))")
        params.append(pd.Series(list(uuids), dtype=object).to_json(orient="values"))
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    rows = conn.execute(
        "SELECT g.uuid, g.hostname, g.idx, a.namespace, a.pod, a.container, a.ts_from, a.ts_to, "
        f"a.last_seen FROM gpu_assignments a JOIN gpus g ON g.id = a.gpu_id{clause} "
        "ORDER BY a.ts_from, g.hostname, g.idx, g.uuid, a.id",
        params,
    ).fetchall()
    out = pd.DataFrame.from_records(rows, columns=ASSIGNMENT_COLUMNS)
    for c in ASSIGNMENT_COLUMNS:
        if c == "gpu":
            out[c] = out[c].astype(np.int64)
        elif c in ("ts_from", "ts_to", "last_seen"):
            out[c] = out[c].astype(np.float64)  # ts_to NaN: still assigned
        else:
            out[c] = out[c].astype(str)
    return out


def nodes_frame(conn: sqlite3.Connection, hostnames: Sequence[str] | None) -> pd.DataFrame:
    sql = f"SELECT {', '.join(NODE_COLUMNS)} FROM nodes"
    params: list[object] = []
    if hostnames is not None:
        sql += " WHERE hostname IN (SELECT value FROM json_each(?))"
        params.append(pd.Series(list(hostnames), dtype=object).to_json(orient="values"))
    rows = conn.execute(sql + " ORDER BY hostname", params).fetchall()
    out = pd.DataFrame.from_records(rows, columns=NODE_COLUMNS)
    for c in NODE_COLUMNS:
        out[c] = out[c].astype(np.float64 if c.endswith("_ts") else str)
    return out


def intervals(got: pd.DataFrame) -> list[tuple[Any, ...]]:
    """Every reading of who held each GPU (uuid, ts, namespace, pod, container, held) ->
    (uuid, namespace, pod, container, ts_from, ts_to, last_seen) rows, applied in time order by
    ``write``'s rule: for a store that keeps the readings, not the intervals (InfluxDB)."""
    got = got.assign(
        namespace=got["namespace"].fillna("").astype(str),
        pod=got["pod"].fillna("").astype(str),
        container=got["container"].fillna("").astype(str),
    ).sort_values(["uuid", "ts"], kind="stable")
    out: list[list[Any]] = []
    for uuid, rows in got.groupby("uuid", sort=True):
        open_rows: dict[tuple[str, str, str], list[Any]] = {}
        for ts, readings in rows.groupby("ts", sort=True):
            held = {
                (r.namespace, r.pod, r.container)
                for r in readings.itertuples()
                if r.held == 1 and (r.namespace or r.pod or r.container)
            }
            for who in list(open_rows):
                if who in held:
                    open_rows[who][6] = ts
                else:
                    open_rows.pop(who)[5] = ts
            for who in sorted(held - set(open_rows)):
                row = [uuid, *who, ts, math.nan, ts]
                open_rows[who] = row
                out.append(row)
    return [tuple(r) for r in out]
