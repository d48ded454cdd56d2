"""The audit log: every decision and every action taken on it, in SQLite.

One row per decision (``hook`` NULL, ``result`` "decided") and one per hook that acted on it
(``hook`` = "slurm", "kubernetes", "bundled", "slack"; ``result`` "ok: ...", "failed: ...",
"blocked: circuit breaker ...", "dry-run: ..."). Rows are only ever added. The file is its own
(default ``gpuwarden-audit.db``) or the store's SQLite file, through its own connection and its
own ``audit`` table, which the store's migrations never touch.

    sqlite3 gpuwarden-audit.db "SELECT datetime(ts,'unixepoch'), hostname, gpu, old_state,
                                new_state, source, actor, hook, result FROM audit ORDER BY id"
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gpuwarden.alerts.base import Transition
from gpuwarden.errors import InputError, StoreError
from gpuwarden.health import GpuState
from gpuwarden.telemetry import GpuId

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    id        INTEGER PRIMARY KEY,
    ts        REAL NOT NULL,     -- Unix seconds of the decision
    hostname  TEXT NOT NULL,
    gpu       INTEGER NOT NULL,
    uuid      TEXT NOT NULL,
    old_state TEXT NOT NULL,
    new_state TEXT NOT NULL,
    risk      REAL,              -- NULL: unknown
    reasons   TEXT NOT NULL,     -- JSON list of strings
    action    TEXT NOT NULL,     -- recommended action, for people
    source    TEXT NOT NULL,     -- model, alertmanager, hold, manual, replaced
    actor     TEXT NOT NULL,     -- gpuwarden, or the person who decided
    hook      TEXT,              -- NULL for the decision itself
    result    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_gpu ON audit (uuid, id);
CREATE INDEX IF NOT EXISTS audit_ts ON audit (ts);
"""

_COLUMNS = (
    "id, ts, hostname, gpu, uuid, old_state, new_state, risk, reasons, action, source, actor, "
    "hook, result"
)


@dataclass(frozen=True)
class AuditRow:
    id: int
    ts: float
    hostname: str
    gpu: int
    uuid: str
    old_state: str
    new_state: str
    risk: float | None
    reasons: list[str]
    action: str
    source: str
    actor: str
    hook: str | None
    result: str


class AuditLog:
    """Append-only decision log in the SQLite file ``path`` (WAL, safe across threads)."""

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, busy_timeout_s: float = 30):
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        try:
            conn = sqlite3.connect(
                self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode = WAL")
            conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the audit log {self.path}: {exc}") from exc
        self._conn: sqlite3.Connection | None = conn

    def record(self, t: Transition, *, hook: str | None = None, result: str = "decided") -> int:
        """Append one row; returns its id."""
        risk = None if math.isnan(t.risk) else float(t.risk)
        row = (
            t.ts,
            t.gpu.hostname,
            int(t.gpu.index),
            t.gpu.uuid,
            str(t.old),
            str(t.new),
            risk,
            json.dumps(list(t.reasons)),
            t.action,
            t.source,
            t.actor,
            hook,
            result,
        )
        with self._guard("record") as conn:
            cur = conn.execute(
                f"INSERT INTO audit ({_COLUMNS.removeprefix('id, ')}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            return int(cur.lastrowid or 0)

    def rows(
        self,
        *,
        limit: int = 100,
        since: float | None = None,
        uuid: str | None = None,
        hostname: str | None = None,
        hook: str | None = None,
    ) -> list[AuditRow]:
        """Newest first; ``limit`` 1..10000."""
        if not 1 <= limit <= 10_000:
            raise InputError(f"limit must be between 1 and 10000, not {limit!r}")
        where: list[str] = []
        params: list[object] = []
        for column, value in (("uuid", uuid), ("hostname", hostname), ("hook", hook)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if since is not None:
            where.append("ts >= ?")
            params.append(float(since))
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self._guard("read") as conn:
            found = conn.execute(
                f"SELECT {_COLUMNS} FROM audit{clause} ORDER BY id DESC LIMIT ?", [*params, limit]
            ).fetchall()
        return [
            AuditRow(
                id=r[0],
                ts=r[1],
                hostname=r[2],
                gpu=r[3],
                uuid=r[4],
                old_state=r[5],
                new_state=r[6],
                risk=r[7],
                reasons=json.loads(r[8]),
                action=r[9],
                source=r[10],
                actor=r[11],
                hook=r[12],
                result=r[13],
            )
            for r in found
        ]

    def last_states(self) -> list[tuple[GpuId, GpuState, float, str]]:
        """The latest decided state of every slot: (gpu, state, since, source), to restore the
        decision engine after a restart."""
        with self._guard("read") as conn:
            found = conn.execute(
                "SELECT hostname, gpu, uuid, new_state, ts, source FROM audit WHERE id IN "
                "(SELECT max(id) FROM audit WHERE hook IS NULL GROUP BY hostname, gpu)"
            ).fetchall()
        return [(GpuId(h, int(i), u), GpuState(s), float(ts), src) for h, i, u, s, ts, src in found]

    def count(self) -> int:
        with self._guard("read") as conn:
            return int(conn.execute("SELECT count(*) FROM audit").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @contextmanager
    def _guard(self, what: str) -> Iterator[sqlite3.Connection]:
        """The connection under the lock, with SQLite errors turned into ``StoreError``."""
        with self._lock:
            if self._conn is None:
                raise StoreError(f"audit {what}: the audit log {self.path} is closed")
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise StoreError(f"audit {what} on {self.path} failed: {exc}") from exc


__all__ = ["AuditLog", "AuditRow"]
