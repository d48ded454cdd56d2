"""The scheduler service's state in one SQLite file: jobs, tasks, audit, usage, nodes, quotas, logs.

The in-memory ``Scheduler`` is a cache of this file: after a crash the service rebuilds it from
here (queued jobs resubmitted in queue order, running jobs adopted where they run). Every state
change the service makes is one ``transaction()``, so a ``kill -9`` leaves either all of a
change or none of it. WAL mode lets ``sqlite3`` on the command line read while the service
writes. The schema version lives in ``PRAGMA user_version``; a newer file is refused.

    jobs      one row per job; ``spec`` is the submitted job as JSON, ``placement`` where the
              current attempt runs; (tenant, idempotency_key) is UNIQUE
    tasks     one row per (job_id, attempt, task) the service asked an agent to start
    audit     who did what to which job or GPU, and why
    usage     GPU-time intervals for billing (open while a job runs)
    energy    measured GPU energy per job and hour, with the GPU-time it covers
    nodes     what each agent registered, its GPUs' health, its sync counter and, while its
              agent is silent past the node timeout, when it was found lost
    quotas    per-tenant GPU limits
    logs      stdout+stderr chunks shipped by agents, keyed by byte offset (resent chunks are kept once)
    sleep     idle-node sleep: each node not awake, when a waking one takes work, when its magic
              packet went, and whether its agent still has to be told to sleep
    reclaims  spot reclaim notices: the node stays closed until its replacement registers
"""

from __future__ import annotations

import json
import logging
import math
import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gpuwarden.errors import SchemaError, StoreError

logger = logging.getLogger("gpuwarden.scheduler.state")

SCHEMA_VERSION = 4  # 2: nodes.lost_at; 3: the sleep and reclaims tables; 4: sleep_hold

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, tenant TEXT NOT NULL, name TEXT NOT NULL,
    spec TEXT NOT NULL, state TEXT NOT NULL, attempt INTEGER NOT NULL,
    idempotency_key TEXT, submitted_at REAL NOT NULL, queued_at REAL NOT NULL,
    started_at REAL, ended_at REAL, exit_code INTEGER, reason TEXT NOT NULL DEFAULT '',
    last_checkpoint_at REAL, preemptions INTEGER NOT NULL DEFAULT 0, placement TEXT,
    stop_reason TEXT, stop_after REAL,
    UNIQUE (tenant, idempotency_key)
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL, attempt INTEGER NOT NULL, task INTEGER NOT NULL, node TEXT NOT NULL,
    gpus TEXT NOT NULL, state TEXT NOT NULL, pid INTEGER, exit_code INTEGER,
    ordered_seq INTEGER NOT NULL, hook_sent INTEGER NOT NULL DEFAULT 0,
    started_at REAL, ended_at REAL,
    PRIMARY KEY (job_id, attempt, task)
);
CREATE INDEX IF NOT EXISTS tasks_node ON tasks (node, state);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL,
    job_id TEXT, tenant TEXT, node TEXT, gpu INTEGER, reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS audit_action ON audit (action, id);
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, tenant TEXT NOT NULL, name TEXT NOT NULL,
    gpu_milli REAL NOT NULL, start_s REAL NOT NULL, end_s REAL
);
CREATE TABLE IF NOT EXISTS energy (
    job_id TEXT NOT NULL, tenant TEXT NOT NULL, hour REAL NOT NULL, lo REAL NOT NULL,
    hi REAL NOT NULL, mj REAL NOT NULL, milli_s REAL NOT NULL, PRIMARY KEY (job_id, hour)
);
CREATE TABLE IF NOT EXISTS nodes (
    node TEXT PRIMARY KEY, cpu_milli INTEGER NOT NULL, memory_mib INTEGER NOT NULL,
    gpus TEXT NOT NULL, agent_seen_at REAL, sync_seq INTEGER NOT NULL DEFAULT 0, lost_at REAL
);
CREATE TABLE IF NOT EXISTS quotas (
    tenant TEXT PRIMARY KEY, gpus REAL, gpu_memory_mib INTEGER, guaranteed_gpus REAL
);
CREATE TABLE IF NOT EXISTS logs (
    job_id TEXT NOT NULL, attempt INTEGER NOT NULL, task INTEGER NOT NULL,
    offset INTEGER NOT NULL, text TEXT NOT NULL,
    PRIMARY KEY (job_id, attempt, task, offset)
);
CREATE TABLE IF NOT EXISTS sleep (
    node TEXT PRIMARY KEY, state TEXT NOT NULL, ready_at REAL, woken_at REAL,
    order_pending INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS reclaims (
    node TEXT PRIMARY KEY, deadline REAL NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sleep_hold (
    id INTEGER PRIMARY KEY CHECK (id = 1), until REAL NOT NULL
);
"""


@dataclass(frozen=True)
class JobRow:
    """One job as stored. ``spec``: the submitted fields; ``placement``: per task
    ``{"node", "gpus", "gpu_milli", "mig", "mig_start", "mig_slices"}`` for the current attempt.
    ``stop_reason`` ("preempt", "cancel", "failed") is set while the agent stops its tasks;
    ``stop_after`` is when the stop order goes out (the end of the checkpoint grace period)."""

    job_id: str
    seq: int
    tenant: str
    name: str
    spec: dict[str, Any]
    state: str
    attempt: int
    idempotency_key: str | None
    submitted_at: float
    queued_at: float
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    reason: str = ""
    last_checkpoint_at: float | None = None
    preemptions: int = 0
    placement: list[dict[str, Any]] | None = None
    stop_reason: str | None = None
    stop_after: float | None = None


@dataclass(frozen=True)
class TaskRow:
    """One task attempt an agent was told to start; ``state``: starting, running or exited."""

    job_id: str
    attempt: int
    task: int
    node: str
    gpus: list[int]
    state: str
    pid: int | None
    exit_code: int | None
    ordered_seq: int
    hook_sent: bool = False
    started_at: float | None = None
    ended_at: float | None = None


def checkpoint_reason(attempt: int, at: float) -> str:
    """The ``reason`` of a ``checkpoint`` audit row: which attempt saved its work, and when."""
    return f"attempt {attempt} checkpointed at {at:.3f}"


_CHECKPOINT_REASON = re.compile(r"attempt (\d+) checkpointed at ([0-9.]+)")


def checkpoint_of(reason: str) -> tuple[int, float] | None:
    """(attempt, time) from a ``checkpoint_reason``; None for any other text."""
    m = _CHECKPOINT_REASON.search(reason)
    return None if m is None else (int(m.group(1)), float(m.group(2)))


@dataclass(frozen=True)
class AuditRow:
    """One audit row; ``id`` grows with every row written (a cursor for ``before_id``)."""

    id: int
    at: float
    actor: str
    action: str
    job_id: str | None
    node: str | None
    gpu: int | None
    reason: str


@dataclass(frozen=True)
class SleepRow:
    """A node idle-node sleep holds: ``state`` draining, asleep or waking; ``ready_at`` when a
    waking node takes work; ``woken_at`` when its magic packet went (until its agent syncs);
    ``order_pending``: its agent has not been told to sleep yet."""

    node: str
    state: str
    ready_at: float | None = None
    woken_at: float | None = None
    order_pending: bool = False


@dataclass(frozen=True)
class ReclaimRow:
    """A spot reclaim notice the service took at ``at``: the provider takes ``node`` back at
    ``deadline`` (unix s)."""

    node: str
    deadline: float
    reason: str
    at: float


@dataclass(frozen=True)
class NodeRow:
    """A registered node; ``gpus``: ``{"index", "uuid", "model", "memory_mib", "health", "mode"}``;
    ``lost_at``: when the service found its agent silent (None while the node is live)."""

    node: str
    cpu_milli: int
    memory_mib: int
    gpus: list[dict[str, Any]]
    agent_seen_at: float | None
    sync_seq: int
    lost_at: float | None = None


_JSON_COLUMNS = {"spec", "placement", "gpus"}
_JOB_COLUMNS = [f.name for f in fields(JobRow)]
_TASK_COLUMNS = [f.name for f in fields(TaskRow)]


def _encode(name: str, value: Any) -> Any:
    return json.dumps(value) if name in _JSON_COLUMNS and value is not None else value


def _decode(cls: type, row: sqlite3.Row) -> Any:
    values = {k: json.loads(row[k]) if k in _JSON_COLUMNS and row[k] is not None else row[k]
              for k in row.keys()}  # fmt: skip
    if cls is TaskRow:
        values["hook_sent"] = bool(values["hook_sent"])
    return cls(**values)


class SchedulerDB:
    """The service's SQLite file. Not thread-safe: the service calls it under its one lock."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL survives kill -9
            self.conn.execute("PRAGMA busy_timeout=30000")
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise SchemaError(
                    f"{self.path}: scheduler schema {version} is newer than this gpuwarden "
                    f"({SCHEMA_VERSION}); upgrade gpuwarden"
                )
            # executescript commits on its own; every statement is IF NOT EXISTS, so a crash
            # between two of them is finished by the next start
            self.conn.executescript(_SCHEMA)
            columns = {r[1] for r in self.conn.execute("PRAGMA table_info(nodes)")}
            if "lost_at" not in columns:  # a version 1 file
                self.conn.execute("ALTER TABLE nodes ADD COLUMN lost_at REAL")
            self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the scheduler database {self.path}: {exc}") from exc
        self._depth = 0  # transaction() nesting

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All writes inside commit together or not at all; nested calls join the outer one.

        A COMMIT can fail too (``database is locked``, disk full, a deferred constraint): the
        transaction is rolled back then as well and the error raised, so the connection never
        stays inside a transaction that a later call would silently join. Nesting is counted
        here, not read from ``in_transaction``, for the same reason."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        if self.conn.in_transaction:  # left open by a ROLLBACK that failed: end it first
            self._rollback()
        self.conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        finally:
            self._depth = 0

    def _rollback(self) -> None:
        # SQLite ends the transaction itself after some failures (SQLITE_FULL, SQLITE_IOERR)
        # and keeps it open after others (SQLITE_BUSY, a deferred foreign key at COMMIT)
        if not self.conn.in_transaction:
            return
        try:
            self.conn.execute("ROLLBACK")
        except sqlite3.Error as exc:  # the error that got us here is the one to raise
            logger.error("%s: ROLLBACK failed (%s); retried before the next transaction",
                         self.path, exc)  # fmt: skip

    # ---- jobs ------------------------------------------------------------------------------

    def next_seq(self) -> int:
        return int(self.conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()[0])

    def insert_job(self, job: JobRow) -> None:
        cols = ", ".join(_JOB_COLUMNS)
        marks = ", ".join("?" * len(_JOB_COLUMNS))
        values = [_encode(c, getattr(job, c)) for c in _JOB_COLUMNS]
        self.conn.execute(f"INSERT INTO jobs ({cols}) VALUES ({marks})", values)

    def update_job(self, job_id: str, **changes: Any) -> None:
        if unknown := set(changes) - set(_JOB_COLUMNS):
            raise ValueError(f"no job columns {sorted(unknown)}")
        sets = ", ".join(f"{c} = ?" for c in changes)
        values = [_encode(c, v) for c, v in changes.items()]
        self.conn.execute(f"UPDATE jobs SET {sets} WHERE job_id = ?", [*values, job_id])

    def set_reason(self, job_id: str, reason: str) -> None:
        """Why a job waits; no write at all when the reason is the one stored."""
        self.conn.execute(
            "UPDATE jobs SET reason = ? WHERE job_id = ? AND reason IS NOT ?",
            (reason, job_id, reason),
        )

    def job(self, job_id: str) -> JobRow | None:
        row = self.conn.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None else _decode(JobRow, row)

    def queued_tasks(self, tenant: str) -> int:
        """Tasks of ``tenant``'s queued jobs, all together."""
        row = self.conn.execute(
            "SELECT COALESCE(SUM(json_extract(spec, '$.tasks')), 0) FROM jobs "
            "WHERE state = 'queued' AND tenant = ?",
            (tenant,),
        ).fetchone()
        return int(row[0])

    def job_by_key(self, tenant: str, key: str) -> JobRow | None:
        row = self.conn.execute(
            "SELECT * FROM jobs WHERE tenant = ? AND idempotency_key = ?", (tenant, key)
        ).fetchone()
        return None if row is None else _decode(JobRow, row)

    def jobs(self, *, tenant: str | None = None, states: Sequence[str] = ()) -> list[JobRow]:
        """Jobs in submission order, optionally of one tenant and in some states."""
        sql, args = "SELECT * FROM jobs WHERE 1", []
        if tenant is not None:
            sql, args = sql + " AND tenant = ?", [tenant]
        if states:
            sql += f" AND state IN ({', '.join('?' * len(states))})"
            args += list(states)
        return [_decode(JobRow, r) for r in self.conn.execute(sql + " ORDER BY seq", args)]

    # ---- tasks -----------------------------------------------------------------------------

    def upsert_task(self, task: TaskRow) -> None:
        cols = ", ".join(_TASK_COLUMNS)
        marks = ", ".join("?" * len(_TASK_COLUMNS))
        values = [_encode(c, getattr(task, c)) for c in _TASK_COLUMNS]
        self.conn.execute(f"INSERT OR REPLACE INTO tasks ({cols}) VALUES ({marks})", values)

    def tasks(
        self, *, node: str | None = None, job_id: str | None = None, live: bool = False
    ) -> list[TaskRow]:
        """Task rows of a node or a job; ``live``: only those not known to have exited."""
        sql, args = "SELECT * FROM tasks WHERE 1", list[Any]()
        if node is not None:
            sql, args = sql + " AND node = ?", [*args, node]
        if job_id is not None:
            sql, args = sql + " AND job_id = ?", [*args, job_id]
        if live:
            sql += " AND state != 'exited'"
        rows = self.conn.execute(sql + " ORDER BY job_id, attempt, task", args)
        return [_decode(TaskRow, r) for r in rows]

    # ---- audit -----------------------------------------------------------------------------

    def audit(
        self,
        at: float,
        actor: str,
        action: str,
        *,
        job_id: str | None = None,
        tenant: str | None = None,
        node: str | None = None,
        gpu: int | None = None,
        reason: str = "",
    ) -> None:
        self.conn.execute(
            "INSERT INTO audit (at, actor, action, job_id, tenant, node, gpu, reason)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (at, actor, action, job_id, tenant, node, gpu, reason),
        )

    def audit_rows(
        self,
        *,
        limit: int = 100,
        tenant: str | None = None,
        before_id: int | None = None,
        since: float | None = None,
        action: str | None = None,
        job_ids: Sequence[str] | None = None,
    ) -> list[AuditRow]:
        """The newest ``limit`` rows, newest first; a tenant sees only rows of its own jobs.
        ``before_id``: only rows older than that row (the next page is ``before_id`` = the last
        id of this one); ``since``: only rows at or after that time (unix s); ``action``: only
        that action (``preempt``); ``job_ids``: only rows of those jobs."""
        sql = "SELECT id, at, actor, action, job_id, node, gpu, reason FROM audit WHERE 1"
        args: list[Any] = []
        for clause, value in (("tenant = ?", tenant), ("id < ?", before_id),
                              ("at >= ?", since), ("action = ?", action)):  # fmt: skip
            if value is not None:
                sql, args = f"{sql} AND {clause}", [*args, value]
        if job_ids is not None:
            ids = sorted(set(job_ids))
            sql = f"{sql} AND job_id IN (SELECT value FROM json_each(?))"
            args = [*args, json.dumps(ids)]
        rows = self.conn.execute(sql + " ORDER BY id DESC LIMIT ?", [*args, limit])
        return [AuditRow(*r) for r in rows]

    # ---- usage -----------------------------------------------------------------------------

    def open_usage(self, job_id: str, tenant: str, name: str, gpu_milli: float, at: float) -> None:
        if self.conn.execute(
            "SELECT 1 FROM usage WHERE job_id = ? AND end_s IS NULL", (job_id,)
        ).fetchone():
            return  # already open: a second task of the same gang reporting
        self.conn.execute(
            "INSERT INTO usage (job_id, tenant, name, gpu_milli, start_s) VALUES (?, ?, ?, ?, ?)",
            (job_id, tenant, name, gpu_milli, at),
        )

    def close_usage(self, job_id: str, at: float) -> None:
        self.conn.execute(
            "UPDATE usage SET end_s = MAX(start_s, ?) WHERE job_id = ? AND end_s IS NULL",
            (at, job_id),
        )

    def usage_rows(self, tenant: str | None = None) -> list[sqlite3.Row]:
        sql, args = "SELECT job_id, tenant, name, gpu_milli, start_s, end_s FROM usage", []
        if tenant is not None:
            sql, args = sql + " WHERE tenant = ?", [tenant]
        return list(self.conn.execute(sql + " ORDER BY id", args))

    def add_energy(
        self, job_id: str, tenant: str, at: float, span_s: float, mj: float, milli_s: float
    ) -> None:
        """Measured energy (mJ) over the ``span_s`` seconds up to ``at``, and the GPU
        thousandth-seconds it covers, added to ``job_id``'s row for the hour ``at`` falls in;
        the row keeps the first and last second it covers."""
        hour = math.floor(at / 3600.0) * 3600.0
        self.conn.execute(
            "INSERT INTO energy (job_id, tenant, hour, lo, hi, mj, milli_s)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, hour) DO UPDATE SET"
            " lo = MIN(lo, excluded.lo), hi = MAX(hi, excluded.hi), mj = mj + excluded.mj,"
            " milli_s = milli_s + excluded.milli_s",
            (job_id, tenant, hour, at - span_s, at, mj, milli_s),
        )

    def energy_rows(self, job_ids: list[str]) -> list[sqlite3.Row]:
        """(job_id, first second, last second, mJ, GPU thousandth-seconds) of ``job_ids``, one
        row per job and hour."""
        marks = ",".join("?" * len(job_ids))
        return list(self.conn.execute(
            f"SELECT job_id, lo, hi, mj, milli_s FROM energy WHERE job_id IN ({marks})", job_ids
        ))  # fmt: skip

    # ---- nodes and quotas ------------------------------------------------------------------

    def upsert_node(self, node: NodeRow) -> None:
        """Insert or update a node's inventory; its sync counter and lost mark stay as stored."""
        self.conn.execute(
            "INSERT INTO nodes (node, cpu_milli, memory_mib, gpus, agent_seen_at, sync_seq, lost_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (node) DO UPDATE SET cpu_milli ="
            " excluded.cpu_milli, memory_mib = excluded.memory_mib, gpus = excluded.gpus,"
            " agent_seen_at = excluded.agent_seen_at",
            (node.node, node.cpu_milli, node.memory_mib, json.dumps(node.gpus),
             node.agent_seen_at, node.sync_seq, node.lost_at),
        )  # fmt: skip

    def nodes(self) -> list[NodeRow]:
        return [_decode(NodeRow, r) for r in self.conn.execute("SELECT * FROM nodes ORDER BY node")]

    def node(self, name: str) -> NodeRow | None:
        row = self.conn.execute("SELECT * FROM nodes WHERE node = ?", (name,)).fetchone()
        return None if row is None else _decode(NodeRow, row)

    def bump_sync(self, name: str, at: float) -> int:
        """Count one sync of ``name``'s agent; returns the new count."""
        self.conn.execute(
            "UPDATE nodes SET sync_seq = sync_seq + 1, agent_seen_at = ? WHERE node = ?",
            (at, name),
        )
        return int(
            self.conn.execute("SELECT sync_seq FROM nodes WHERE node = ?", (name,)).fetchone()[0]
        )

    def silent_nodes(self, before: float) -> list[tuple[str, float | None]]:
        """(node, agent_seen_at) of the live nodes whose agent last synced before ``before``."""
        rows = self.conn.execute(
            "SELECT node, agent_seen_at FROM nodes WHERE lost_at IS NULL"
            " AND (agent_seen_at IS NULL OR agent_seen_at < ?) ORDER BY node",
            (before,),
        )
        return [(r[0], r[1]) for r in rows]

    def set_node_lost(self, name: str, at: float | None) -> None:
        """Mark ``name`` lost at ``at``, or live again with None."""
        self.conn.execute("UPDATE nodes SET lost_at = ? WHERE node = ?", (at, name))

    def set_quota(
        self, tenant: str, gpus: float | None, gpu_memory_mib: int | None, guaranteed: float | None
    ) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO quotas (tenant, gpus, gpu_memory_mib, guaranteed_gpus)"
            " VALUES (?, ?, ?, ?)",
            (tenant, gpus, gpu_memory_mib, guaranteed),
        )

    def quotas(self) -> list[sqlite3.Row]:
        return list(self.conn.execute("SELECT * FROM quotas ORDER BY tenant"))

    # ---- sleep and reclaims -----------------------------------------------------------------

    def put_sleep(self, row: SleepRow) -> None:
        """Store ``row``; a node back awake is ``drop_sleep``'d instead."""
        self.conn.execute(
            "INSERT OR REPLACE INTO sleep (node, state, ready_at, woken_at, order_pending)"
            " VALUES (?, ?, ?, ?, ?)",
            (row.node, row.state, row.ready_at, row.woken_at, int(row.order_pending)),
        )

    def drop_sleep(self, node: str) -> None:
        self.conn.execute("DELETE FROM sleep WHERE node = ?", (node,))

    def sleep_rows(self) -> list[SleepRow]:
        rows = self.conn.execute(
            "SELECT node, state, ready_at, woken_at, order_pending FROM sleep ORDER BY node"
        )
        return [SleepRow(r[0], r[1], r[2], r[3], bool(r[4])) for r in rows]

    def put_sleep_hold(self, until: float) -> None:
        """No node is drained for sleep before ``until``: the queue woke nodes (one row)."""
        self.conn.execute("INSERT OR REPLACE INTO sleep_hold (id, until) VALUES (1, ?)", (until,))

    def sleep_hold(self) -> float | None:
        row = self.conn.execute("SELECT until FROM sleep_hold WHERE id = 1").fetchone()
        return None if row is None else float(row[0])

    def put_reclaim(self, row: ReclaimRow) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO reclaims (node, deadline, reason, at) VALUES (?, ?, ?, ?)",
            (row.node, row.deadline, row.reason, row.at),
        )

    def drop_reclaim(self, node: str) -> None:
        self.conn.execute("DELETE FROM reclaims WHERE node = ?", (node,))

    def reclaims(self) -> list[ReclaimRow]:
        rows = self.conn.execute("SELECT node, deadline, reason, at FROM reclaims ORDER BY node")
        return [ReclaimRow(*r) for r in rows]

    # ---- logs ------------------------------------------------------------------------------

    def append_log(self, job_id: str, attempt: int, task: int, offset: int, text: str) -> None:
        self.conn.execute(
            "INSERT OR IGNORE INTO logs (job_id, attempt, task, offset, text) VALUES (?, ?, ?, ?, ?)",
            (job_id, attempt, task, offset, text),
        )

    def log_text(self, job_id: str, *, attempt: int | None = None, task: int | None = None) -> str:
        """The captured output of a job, attempt by attempt, task by task."""
        sql, args = "SELECT text FROM logs WHERE job_id = ?", list[Any]([job_id])
        if attempt is not None:
            sql, args = sql + " AND attempt = ?", [*args, attempt]
        if task is not None:
            sql, args = sql + " AND task = ?", [*args, task]
        rows = self.conn.execute(sql + " ORDER BY attempt, task, offset", args)
        return "".join(r[0] for r in rows)


__all__ = [
    "SCHEMA_VERSION", "AuditRow", "checkpoint_of", "checkpoint_reason", "JobRow", "NodeRow", "ReclaimRow", "SchedulerDB", "SleepRow",
    "TaskRow",
]  # fmt: skip
