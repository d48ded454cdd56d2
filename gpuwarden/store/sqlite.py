"""The SQLite store: one file, no server.

    open_store("sqlite:///gpuwarden.db")                      relative to the working directory
    open_store("sqlite:////var/lib/gpuwarden/gpuwarden.db")   absolute (four slashes, as SQLAlchemy)
    open_store("sqlite:///gpuwarden.db?retention=7d&rollup_retention=400d&busy_timeout=60")
    open_store("sqlite:///:memory:")                          for tests

The file is in WAL mode, so the dashboard and the scorer read (from other processes) while the
collector writes; writers wait up to ``busy_timeout`` seconds for each other. Raw samples live in
a wide table (one REAL column per catalogue field, NULL = not read) keyed by (ts, gpu): writing
the same (ts, GPU) again *replaces* the row, so re-ingesting a corrected export fixes it and a
replayed batch changes nothing. Identical events are kept once. Counters are stored as read.

When the file cannot be written (its permissions, its directory's, a read-only mount) it opens
read-only: reads work and every write raises ``StoreError`` saying so, having touched nothing. A
write that fails (another writer holding the lock past ``busy_timeout``, a full disk) rolls back
whole and raises ``StoreError`` naming the cause; what was written before stays intact.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from gpuwarden.errors import ConfigError, GpuwardenError, InputError, StoreError
from gpuwarden.health import Verdict
from gpuwarden.store import _assignments, _records, _verdicts, window
from gpuwarden.store._frames import check_fields, frame_rows, wide_frame
from gpuwarden.store._rollup import hour_of, pending_hours, roll_up_hour
from gpuwarden.store._schema import (
    ROLLUP_FIELDS,
    ROLLUP_RESOLUTIONS,
    ROLLUP_WINDOW_S,
    SAMPLE_FIELDS,
    migrate,
)
from gpuwarden.store._url import parse_url
from gpuwarden.telemetry import Batch, Event, Failure, Rejection

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_RETENTION_S = 14 * 86400.0
DEFAULT_ROLLUP_RETENTION_S = 400 * 86400.0
DEFAULT_BUSY_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)


def _insert_samples_sql(fields: Sequence[str]) -> str:
    names = ", ".join(["ts", "gpu_id", *fields])
    return f"INSERT OR REPLACE INTO samples ({names}) VALUES ({', '.join('?' * (2 + len(fields)))})"


_INSERT_ALL = _insert_samples_sql(SAMPLE_FIELDS)
_MARK_HOUR = "INSERT OR IGNORE INTO rollup_pending (hour_ts) VALUES (?)"


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    # IMMEDIATE takes the write lock up front, so a writer waits (busy_timeout) at BEGIN
    # instead of failing halfway through when another process holds it.
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SqliteStore:
    """Time-series store in one SQLite file (the ``Store`` protocol).

    ``retention_s``: raw samples older than this are dropped by ``compact`` once rolled up
    (default 14 days). ``rollup_retention_s``: how long 5-minute and 1-hour rollups are kept
    (default 400 days). Events and failures are kept. ``chunk_rows``: ``write_frame`` commits
    every this many rows, so a long bulk load does not hold the write lock for minutes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        retention_s: float = DEFAULT_RETENTION_S,
        rollup_retention_s: float = DEFAULT_ROLLUP_RETENTION_S,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        chunk_rows: int = 50_000,
        url: str | None = None,
    ) -> None:
        for name, value in (
            ("retention_s", retention_s),
            ("rollup_retention_s", rollup_retention_s),
            ("busy_timeout_s", busy_timeout_s),
            ("chunk_rows", chunk_rows),
        ):
            if not value > 0:
                raise ConfigError(f"{name} must be positive, not {value!r}")
        self.path = os.fspath(path)
        self.url = url or f"sqlite:///{self.path}"
        self.retention_s = float(retention_s)
        self.rollup_retention_s = float(rollup_retention_s)
        self.busy_timeout_s = float(busy_timeout_s)
        self.chunk_rows = int(chunk_rows)
        self._lock = threading.RLock()
        self._gpu_ids: dict[str, int] = {}  # uuid -> gpus.id; ids never change once given
        #: why writes are refused ("" while the file takes them): it opened read-only
        self.read_only = ""
        conn = None
        try:
            try:
                conn = self._connect(self.path)
                conn.execute("PRAGMA journal_mode = WAL")
            except sqlite3.OperationalError as exc:
                if conn is not None:
                    conn.close()
                if not _read_only(exc) or self.path == ":memory:":
                    raise
                conn = self._open_read_only()
            # NORMAL is durable across process crashes in WAL mode; only a power cut can lose
            # the last commits, which the next collection cycle rewrites anyway.
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA cache_size = -65536")  # 64 MiB: keeps the index pages hot
            migrate(conn)
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            if _read_only(exc):
                raise StoreError(
                    f"cannot open {self.path}: it is read-only ({self.read_only or exc}) and "
                    "needs writing first (a schema upgrade, or its WAL journal to recover)"
                ) from exc
            raise StoreError(f"cannot open {self.path}: {exc}") from exc
        except GpuwardenError as exc:
            assert conn is not None
            conn.close()
            raise type(exc)(f"{self.path}: {exc}") from exc
        self._conn: sqlite3.Connection | None = conn

    @classmethod
    def from_url(cls, url: str) -> SqliteStore:
        """Open ``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``sqlite:///:memory:``;
        query parameters ``retention``, ``rollup_retention`` (durations: 14d, 36h, 90m, 600)
        and ``busy_timeout`` (seconds)."""
        path, kwargs = parse_url(url)
        return cls(path, url=url, **kwargs)

    # -- plumbing ------------------------------------------------------------------------

    def _connect(self, target: str, *, uri: bool = False) -> sqlite3.Connection:
        return sqlite3.connect(
            target,
            timeout=self.busy_timeout_s,
            isolation_level=None,
            check_same_thread=False,
            uri=uri,
        )

    def _open_read_only(self) -> sqlite3.Connection:
        """Open a file this process may not write. A WAL file needs its ``-shm`` index, which a
        read-only directory cannot get: with no journal left to read (the last writer closed
        cleanly) the file is opened as immutable, else as read-only over the existing index."""
        quoted = urllib.parse.quote(os.path.abspath(self.path))
        conn = self._connect(f"file:{quoted}?mode=ro", uri=True)
        try:
            conn.execute("PRAGMA user_version").fetchone()  # the first read opens the journal
            self.read_only = "opened read-only: the file or its directory is not writable"
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            wal = self.path + "-wal"
            if not _read_only(exc) or (os.path.exists(wal) and os.path.getsize(wal) > 0):
                raise
        self.read_only = "opened read-only: the file and its directory are not writable"
        return self._connect(f"file:{quoted}?immutable=1", uri=True)

    @contextmanager
    def _guard(self, what: str, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, with SQLite errors turned into ``StoreError``."""
        with self._lock:
            if self._conn is None:
                raise StoreError(f"{what}: the store {self.url} is closed")
            try:
                yield self._conn
            except BaseException as exc:
                # A rolled-back insert frees its gpus.id for the next GPU: forget what we cached.
                self._gpu_ids.clear()
                if isinstance(exc, sqlite3.Error):
                    raise self._store_error(what, exc, _NOTHING if write else "") from exc
                raise

    @contextmanager
    def _writer(self, what: str) -> Iterator[sqlite3.Connection]:
        """``_guard`` for a write: refused at once, touching nothing, on a read-only file."""
        if self.read_only:
            raise StoreError(f"{what}: {self.path} is read-only ({self.read_only}): {_NOTHING}")
        with self._guard(what, write=True) as conn:
            yield conn

    def _store_error(self, what: str, exc: sqlite3.Error, stored: str = "") -> StoreError:
        """One line naming the cause; for a write, ``stored`` says what of it was kept (every
        write is one transaction, so nothing, but for ``write_frame``'s chunks)."""
        tail = f": {stored}" if stored else ""
        name = getattr(exc, "sqlite_errorname", "") or ""
        if isinstance(exc, sqlite3.OperationalError) and (
            "locked" in str(exc) or "busy" in str(exc)
        ):
            return StoreError(
                f"{what}: {self.path} stayed locked by another writer for more than "
                f"{self.busy_timeout_s:g} s (raise busy_timeout){tail}"
            )
        if _read_only(exc):
            return StoreError(
                f"{what}: {self.path} is read-only (its file, its directory or the mount no "
                f"longer takes writes; {exc}){tail}"
            )
        if name.startswith(("SQLITE_FULL", "SQLITE_IOERR")):
            kept = f"; {stored}, and what was written before is intact" if stored else ""
            return StoreError(
                f"{what} on {self.path} failed: {exc}: the disk is full or failing{kept}"
            )
        return StoreError(f"{what} on {self.path} failed: {exc}")

    def _ids_for(self, conn: sqlite3.Connection, rows: list[_records.GpuRow]) -> dict[str, int]:
        """Upsert GPUs (newest slot wins, first/last seen widen) and return uuid -> id."""
        conn.executemany(_records.UPSERT, rows)
        new = [r[0] for r in rows if r[0] not in self._gpu_ids]
        for lo in range(0, len(new), 500):
            part = new[lo : lo + 500]
            marks = ", ".join("?" * len(part))
            for gid, uuid in conn.execute(
                f"SELECT id, uuid FROM gpus WHERE uuid IN ({marks})", part
            ):
                self._gpu_ids[uuid] = gid
        return self._gpu_ids

    @staticmethod
    def _mark_hours(conn: sqlite3.Connection, ts: np.ndarray) -> None:
        hours = np.unique(np.floor(ts / ROLLUP_WINDOW_S)).astype(np.int64) * ROLLUP_WINDOW_S
        conn.executemany(_MARK_HOUR, ((h,) for h in hours.tolist()))

    # -- writes --------------------------------------------------------------------------

    def write_batch(self, batch: Batch) -> None:
        """Store one collector batch (samples and events) in one transaction."""
        samples = batch.samples
        ts, gpu_rows = _records.batch_rows(batch)
        with self._writer("write_batch") as conn, _transaction(conn):
            ids = self._ids_for(conn, gpu_rows)
            conn.executemany(
                _INSERT_ALL,
                [
                    (s.ts, ids[s.gpu.uuid], *(s.values.get(n) for n in SAMPLE_FIELDS))
                    for s in samples
                ],
            )
            self._mark_hours(conn, ts)
            conn.executemany(_records.INSERT_EVENT, _records.event_rows(batch.events, ids))
            _assignments.write(conn, batch.assignments, ids)
            _assignments.write_nodes(conn, batch.nodes)
            conn.executemany(
                _records.INSERT_REJECTION, _records.rejection_rows(batch.rejected, ids)
            )

    def write_frame(self, frame: pd.DataFrame, *, progress: bool = False) -> int:
        """Bulk-write a wide frame (simulator output, ingest); returns the rows written.

        Needs ``ts``, ``hostname``, ``gpu``, ``uuid``; ``model``, ``pci_bus_id``, ``rack`` and
        any subset of the catalogue fields are optional (an absent field is stored NULL).
        Commits every ``chunk_rows`` rows; ``progress`` shows a tqdm bar.
        """
        from tqdm import tqdm

        plan = frame_rows(frame)
        n = len(plan.ts)
        if n == 0:
            return 0
        sql = _insert_samples_sql(plan.fields)
        done = 0
        try:
            with self._writer("write_frame") as conn:
                with _transaction(conn):
                    ids = self._ids_for(conn, plan.gpus)
                gpu_ids = np.array([ids[g[0]] for g in plan.gpus], dtype=np.int64)[plan.codes]
                with tqdm(total=n, unit="rows", disable=not progress, desc="write") as bar:
                    for lo in range(0, n, self.chunk_rows):
                        hi = min(lo + self.chunk_rows, n)
                        ts = plan.ts[lo:hi]
                        columns = [ts.tolist(), gpu_ids[lo:hi].tolist()]
                        columns += [v[lo:hi].tolist() for v in plan.values]
                        with _transaction(conn):
                            # NaN binds as NULL, so missing values need no conversion.
                            conn.executemany(sql, zip(*columns, strict=True))
                            self._mark_hours(conn, ts)
                        done = hi
                        bar.update(hi - lo)
        except StoreError as exc:
            if not done or not isinstance(exc.__cause__, sqlite3.Error):
                raise
            # each chunk is a commit of its own: say which rows are in, so a retry can resume
            kept = (
                f"the first {done:,} of its {n:,} rows were stored before it (one commit per "
                f"{self.chunk_rows:,} rows), the rest were not"
            )
            raise self._store_error("write_frame", exc.__cause__, kept) from exc.__cause__
        return n

    def write_events(self, events: Iterable[Event]) -> int:
        """Store events; returns how many were new (an identical event is kept once)."""
        events = list(events)
        gpu_rows = _records.rows_from([(e.ts, e.gpu) for e in events])
        with self._writer("write_events") as conn, _transaction(conn):
            ids = self._ids_for(conn, gpu_rows)
            before = conn.total_changes
            conn.executemany(_records.INSERT_EVENT, _records.event_rows(events, ids))
            return conn.total_changes - before

    def write_rejections(self, rejections: Iterable[Rejection]) -> int:
        """Store readings rejected as impossible (``gpuwarden.readings``); one per GPU, time and
        field, so writing the same one again changes nothing. Returns how many were given."""
        rejections = list(rejections)
        gpu_rows = _records.rows_from([(r.ts, r.gpu) for r in rejections])
        with self._writer("write_rejections") as conn, _transaction(conn):
            ids = self._ids_for(conn, gpu_rows)
            conn.executemany(_records.INSERT_REJECTION, _records.rejection_rows(rejections, ids))
        return len(rejections)

    def write_failures(self, failures: Iterable[Failure], *, source: str | None = None) -> int:
        """Store failures; a failure of the same GPU, time and kind replaces the earlier record.
        ``source`` says where they came from (``"sim"``, a file name); returns rows written."""
        failures = list(failures)
        gpu_rows = _records.rows_from([(f.ts, f.gpu) for f in failures])
        with self._writer("write_failures") as conn, _transaction(conn):
            ids = self._ids_for(conn, gpu_rows)
            conn.executemany(_records.INSERT_FAILURE, _records.failure_rows(failures, ids, source))
        return len(failures)

    def write_verdicts(self, verdicts: Iterable[Verdict]) -> int:
        """Store gpuwarden's verdicts; a second verdict for the same GPU and time replaces the
        first. Returns rows written."""
        out = _verdicts.rows(list(verdicts))
        with self._writer("write_verdicts") as conn, _transaction(conn):
            conn.executemany(_verdicts.INSERT, out)
        return len(out)

    # -- reads ---------------------------------------------------------------------------

    @contextmanager
    def _snapshot(self, what: str) -> Iterator[sqlite3.Connection]:
        # One read transaction, so the gpus table and the rows agree even while a writer runs.
        with self._guard(what) as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def read_samples(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
        hostnames: Sequence[str] | None = None,
        fields: Sequence[str] | None = None,
        resolution_s: int | None = None,
    ) -> pd.DataFrame:
        """Samples in ``[start, end)`` (Unix s) as a wide frame sorted by ts, hostname, gpu.

        ``resolution_s`` (300 or 3600) reads the rollups instead: ``ts`` is the bucket start,
        gauges are means, counters the last value read, and ``<field>_max`` columns (peaks of
        temperatures, power, utilisation, pending flags) may be named in ``fields``.
        """
        if resolution_s:
            if resolution_s not in ROLLUP_RESOLUTIONS:
                raise InputError(
                    f"resolution_s={resolution_s!r}: rollups exist for "
                    f"{', '.join(map(str, ROLLUP_RESOLUTIONS))} s (None reads raw samples)"
                )
            table, allowed = "rollups", ROLLUP_FIELDS
        else:
            table, allowed = "samples", SAMPLE_FIELDS
        wanted = check_fields(fields, allowed)
        where, params = _time_filter(start, end)
        if resolution_s:
            where.append("resolution_s = ?")
            params.append(resolution_s)
        with self._snapshot("read_samples") as conn:
            gpus = _records.table(conn)
            ids = _records.select(gpus, uuids=uuids, hostnames=hostnames)
            if ids is not None:
                where.append("gpu_id IN (SELECT value FROM json_each(?))")
                params.append(json.dumps(ids))
            columns = "".join(f", {c}" for c in wanted)
            clause = f" WHERE {' AND '.join(where)}" if where else ""
            rows = conn.execute(
                f"SELECT gpu_id, ts{columns} FROM {table}{clause}", params
            ).fetchall()
        return wide_frame(rows, wanted, gpus)

    def read_window(
        self,
        *,
        start: float,
        end: float,
        fields: Sequence[str] | None = None,
        resolution_s: int | None = None,
        uuids: Sequence[str] | None = None,
        hostnames: Sequence[str] | None = None,
        progress: bool = False,
    ) -> pd.DataFrame:
        """A window at a resolution (``base.ReadableStore.read_window``): the 5-minute or
        hourly rollups ``compact`` made, stitched to the raw samples after them by
        ``window.read_window``."""
        if resolution_s and resolution_s not in ROLLUP_RESOLUTIONS:
            raise InputError(
                f"resolution_s={resolution_s!r}: rollups exist for "
                f"{', '.join(map(str, ROLLUP_RESOLUTIONS))} s (None reads raw samples)"
            )
        return window.read_window(
            self,
            start=start,
            end=end,
            fields=fields,
            resolution_s=resolution_s,
            uuids=uuids,
            hostnames=hostnames,
            progress=progress,
        )

    def read_events(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Events in ``[start, end)``: ts, hostname, gpu, uuid, kind, code (Int64), detail."""
        where, params = _time_filter(start, end, column="e.ts")
        if uuids is not None:
            where.append("g.uuid IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(uuids)))
        if kinds is not None:
            where.append("e.kind IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(kinds)))
        with self._guard("read_events") as conn:
            return _records.events_frame(conn, where, params)

    def read_failures(
        self, *, start: float | None = None, end: float | None = None
    ) -> pd.DataFrame:
        """Failures in ``[start, end)``: ts, hostname, gpu, uuid, kind, precursor_start_ts,
        repair_s, xid (Int64)."""
        where, params = _time_filter(start, end, column="f.ts")
        with self._guard("read_failures") as conn:
            return _records.failures_frame(conn, where, params)

    def read_rejections(
        self, *, start: float | None = None, end: float | None = None
    ) -> pd.DataFrame:
        """Readings rejected in ``[start, end)``, counted per GPU, field and reason: hostname,
        gpu, uuid, field, reason, count, first_ts, last_ts; most first."""
        where, params = _time_filter(start, end, column="r.ts")
        with self._guard("read_rejections") as conn:
            return _records.rejections_frame(conn, where, params)

    def read_verdicts(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
        latest: bool = False,
        changes: bool = False,
    ) -> pd.DataFrame:
        """Stored verdicts in ``[start, end)`` (``health.VERDICT_COLUMNS``), by ts; with
        ``latest`` each GPU's newest one in the window; ``changes``: only the state changes
        (filtered in SQL, so the heartbeats are never decoded)."""
        with self._guard("read_verdicts") as conn:
            return _verdicts.frame(
                conn, start=start, end=end, uuids=uuids, latest=latest, changes=changes
            )

    def gpus(self) -> pd.DataFrame:
        """Every GPU seen: hostname, gpu, uuid, pci_bus_id, model, rack, first_ts, last_ts.
        MIG instances are not GPUs of their own: ``mig_instances()`` lists them."""
        with self._guard("gpus") as conn:
            return _records.public(_records.table(conn))

    def mig_instances(self) -> pd.DataFrame:
        """MIG instances seen, each with its parent GPU's uuid: hostname, gpu, uuid,
        parent_uuid, model (with the MIG profile), first_ts, last_ts."""
        with self._guard("mig_instances") as conn:
            return _records.mig_instances(_records.table(conn))

    def read_assignments(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Assignments overlapping ``[start, end)``: uuid, hostname, gpu, namespace, pod,
        container, ts_from, ts_to (NaN while it holds the GPU), last_seen; by ts_from."""
        with self._guard("read_assignments") as conn:
            return _assignments.frame(conn, start=start, end=end, uuids=uuids)

    def read_nodes(self, *, hostnames: Sequence[str] | None = None) -> pd.DataFrame:
        """Each node's newest driver_version and cuda_driver_version ("" unknown), with
        first_ts and last_ts; by hostname."""
        with self._guard("read_nodes") as conn:
            return _assignments.nodes_frame(conn, hostnames)

    # -- maintenance ---------------------------------------------------------------------

    def compact(self, now: float) -> None:
        """Roll written hours up into 5-minute and 1-hour buckets, then drop raw samples older
        than ``retention_s`` (and rejected readings with them) and rollups older than
        ``rollup_retention_s`` (whole hours)."""
        with self._writer("compact") as conn:
            for hour in pending_hours(conn, before=now):
                with _transaction(conn):  # one hour per transaction: writers get turns
                    roll_up_hour(conn, hour)
            raw_cutoff = hour_of(now - self.retention_s)
            with _transaction(conn):
                for hour in pending_hours(conn, before=raw_cutoff):  # written meanwhile
                    roll_up_hour(conn, hour)
                conn.execute("DELETE FROM samples WHERE ts < ?", (raw_cutoff,))
                conn.execute("DELETE FROM rejections WHERE ts < ?", (raw_cutoff,))
                conn.execute(
                    "DELETE FROM rollups WHERE ts < ?", (hour_of(now - self.rollup_retention_s),)
                )

    def schema_version(self) -> int:
        """The file's schema version (``PRAGMA user_version``)."""
        with self._guard("schema_version") as conn:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        """Close the connection; a second close does nothing."""
        with self._lock:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                try:
                    if not self.read_only:
                        conn.execute("PRAGMA optimize")
                except sqlite3.Error as exc:  # statistics only: closing must not fail for them
                    log.debug("PRAGMA optimize on %s failed: %s", self.path, exc)
                finally:
                    conn.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteStore({self.url!r})"


_NOTHING = "nothing of this write was stored"


def _read_only(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused because the file, its directory or the mount is read-only."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith("SQLITE_READONLY") or "readonly database" in str(exc)


def _time_filter(
    start: float | None, end: float | None, *, column: str = "ts"
) -> tuple[list[str], list[object]]:
    where: list[str] = []
    params: list[object] = []
    if start is not None:
        where.append(f"{column} >= ?")
        params.append(float(start))
    if end is not None:
        where.append(f"{column} < ?")
        params.append(float(end))
    return where, params
