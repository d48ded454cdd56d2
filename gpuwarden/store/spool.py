"""A durable spool in front of any writable store: nothing acknowledged is lost while it is down.

    store = Spool(open_store("influxdb://influx:8086?org=ops&bucket=gpu"), "/var/spool/gpuwarden")
    store.write_batch(batch)      # returns once the batch is in the store, or safe on disk

A write goes straight to the store when nothing is waiting. When the store fails (a server down,
a timeout, a disk full), the write is appended to a queue on disk, fsynced, and the call returns:
the batch is *acknowledged*. Later writes queue behind it, so order is kept, and every write
(after a backoff that doubles up to ``max_retry_s``) first replays the queue, oldest first, for
at most ``replay_budget_s``. A queued batch leaves the queue only after the store took it, so a
``kill -9`` during a replay loses nothing acknowledged: the batch in flight is sent again on the
next start, and the stores' writes are idempotent (a sample, event, failure or verdict written
twice is stored once). A write the store refuses as malformed (``InputError``) is raised to the
caller at once; one refused during a replay is dropped and counted, so it cannot block the queue.

The queue is bounded. Beyond ``max_bytes`` (compressed) the oldest batches are dropped, and
batches older than ``max_age_s`` are dropped too; each drop is counted (``SpoolStats``, serve's
``gpuwarden_spool_dropped_batches_total``) and logged. The queue is one SQLite file
(``spool.db``, WAL, ``synchronous=FULL``: a committed append survives a crash and a power cut),
records are zlib-compressed JSON (``_codec``; never pickle), one process at a time holds the
directory (``flock``), and the directory remembers which store it spools for: a queue left for
another store is refused, not replayed into the wrong one.

Reads, ``write_frame`` (bulk loads: ingest, simulate) and ``compact`` go straight to the store.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from gpuwarden.errors import ConfigError, InputError, StoreError
from gpuwarden.health import Verdict
from gpuwarden.store import _codec
from gpuwarden.store.base import WritableStore
from gpuwarden.telemetry import Batch, Event, Failure, Rejection

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 512_000_000  # 512 MB
DEFAULT_MAX_AGE_S = 7 * 86400.0

#: kind -> (encode, the store's method, decode)
_KINDS: dict[str, tuple[Callable[[Any], dict[str, Any]], str, Callable[[dict[str, Any]], Any]]] = {
    "batch": (_codec.batch_to_dict, "write_batch", _codec.batch_from_dict),
    "events": (_codec.records_to_dict, "write_events", partial(_codec.records_from_dict, Event)),
    "failures": (
        _codec.records_to_dict,
        "write_failures",
        partial(_codec.records_from_dict, Failure),
    ),
    "rejections": (
        _codec.records_to_dict,
        "write_rejections",
        partial(_codec.records_from_dict, Rejection),
    ),
    "verdicts": (_codec.verdicts_to_dict, "write_verdicts", _codec.verdicts_from_dict),
}

_DDL = """
CREATE TABLE IF NOT EXISTS spool (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    size INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)
"""


@dataclass
class SpoolStats:
    """What the spool did since it was opened; ``pending`` and ``bytes`` are on disk now."""

    pending: int = 0
    bytes: int = 0
    spooled: int = 0
    replayed: int = 0
    dropped_size: int = 0
    dropped_age: int = 0
    rejected: int = 0
    last_error: str = ""


class Spool:
    """``store`` behind a bounded on-disk queue in ``directory`` (see the module docstring).

    ``clock`` (Unix seconds: a batch's age) and ``monotonic`` (the backoff) are test seams.
    """

    def __init__(
        self,
        store: Any,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        retry_s: float = 1.0,
        max_retry_s: float = 60.0,
        replay_budget_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(store, WritableStore):
            raise ConfigError(f"{store.url}: a spool needs a store that takes writes")
        for name, value in (
            ("max_bytes", max_bytes),
            ("max_age_s", max_age_s),
            ("retry_s", retry_s),
            ("max_retry_s", max_retry_s),
            ("replay_budget_s", replay_budget_s),
        ):
            if not value > 0:
                raise ConfigError(f"spool {name} must be positive, not {value!r}")
        self.store = store
        self.url = store.url
        self.directory = Path(directory)
        self.max_bytes = int(max_bytes)
        self.max_age_s = float(max_age_s)
        self.retry_s = float(retry_s)
        self.max_retry_s = float(max_retry_s)
        self.replay_budget_s = float(replay_budget_s)
        self.clock = clock
        self.monotonic = monotonic
        self.stats = SpoolStats()
        self._lock = threading.RLock()
        self._next_try = 0.0
        self._delay = 0.0
        self._lockfile = self._hold(self.directory)
        try:
            self._db = self._open(self.directory / "spool.db")
        except BaseException:
            os.close(self._lockfile)
            raise
        self._count()
        if self.stats.pending:
            logger.warning(
                "spool %s: %d batch(es) (%.1f MB) wait for %s",
                self.directory, self.stats.pending, self.stats.bytes / 1e6, self.url,
            )  # fmt: skip

    # -- the directory -----------------------------------------------------------------------

    @staticmethod
    def _hold(directory: Path) -> int:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(directory / "spool.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigError(f"cannot use {directory} as a spool: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise ConfigError(f"spool {directory} is in use by another gpuwarden process") from exc
        return fd

    def _open(self, path: Path) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = FULL")  # an acknowledged batch is on disk
            for statement in _DDL.split(";\n"):
                db.execute(statement)
            row = db.execute("SELECT value FROM meta WHERE key = 'store'").fetchone()
            waiting = db.execute("SELECT count(*) FROM spool").fetchone()[0]
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the spool {path}: {exc}") from exc
        if row is not None and row[0] != self.url and waiting:
            db.close()
            raise ConfigError(
                f"spool {self.directory} holds {waiting} batch(es) for {row[0]}, not {self.url}: "
                "give that store, or another spool directory"
            )
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('store', ?)", (self.url,))
        return db

    def _count(self) -> None:
        n, size = self._db.execute("SELECT count(*), coalesce(sum(size), 0) FROM spool").fetchone()
        self.stats.pending, self.stats.bytes = int(n), int(size)

    # -- writes ----------------------------------------------------------------------------

    def write_batch(self, batch: Batch) -> None:
        self._write("batch", batch)

    def write_events(self, events: Iterable[Event]) -> int:
        return self._write("events", list(events))

    def write_failures(self, failures: Iterable[Failure]) -> int:
        return self._write("failures", list(failures))

    def write_rejections(self, rejections: Iterable[Rejection]) -> int:
        return self._write("rejections", list(rejections))

    def write_verdicts(self, verdicts: Iterable[Verdict]) -> int:
        return self._write("verdicts", list(verdicts))

    def _write(self, kind: str, payload: Any) -> Any:
        """Straight to the store when nothing waits and it is not backing off; else (or when
        it fails) onto the queue. Returns the store's answer, or the records queued."""
        with self._lock:
            if not self.stats.pending and self.monotonic() >= self._next_try:
                try:
                    out = getattr(self.store, _KINDS[kind][1])(payload)
                except InputError:
                    raise  # a malformed write never enters the queue
                except Exception as exc:  # any failure of the store: keep the write
                    self._failed(exc)
                else:
                    self._delay = 0.0
                    return out
            self._append(kind, payload)
            self.flush()
            return 1 if kind == "batch" else len(payload)

    def _append(self, kind: str, payload: Any) -> None:
        body = zlib.compress(json.dumps(_KINDS[kind][0](payload)).encode(), 1)
        try:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "INSERT INTO spool (ts, kind, size, body) VALUES (?, ?, ?, ?)",
                (self.clock(), kind, len(body), body),
            )
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise StoreError(
                f"cannot spool a write for {self.url} in {self.directory}: {exc}"
            ) from exc
        self.stats.spooled += 1
        self.stats.pending += 1
        self.stats.bytes += len(body)
        self._trim()

    def _trim(self) -> None:
        """Drop batches past ``max_age_s``, then the oldest until the queue fits ``max_bytes``."""
        cut = self.clock() - self.max_age_s
        old = self._db.execute("DELETE FROM spool WHERE ts < ?", (cut,)).rowcount
        if old > 0:
            self.stats.dropped_age += old
            logger.warning(
                "spool %s: dropped %d batch(es) older than %g h (%d dropped by age so far)",
                self.directory, old, self.max_age_s / 3600, self.stats.dropped_age,
            )  # fmt: skip
            self._count()
        if self.stats.bytes <= self.max_bytes:
            return
        over = self.stats.bytes - self.max_bytes
        dropped = freed = 0
        for row_id, size in self._db.execute("SELECT id, size FROM spool ORDER BY id").fetchall():
            if freed >= over:
                break
            self._db.execute("DELETE FROM spool WHERE id = ?", (row_id,))
            dropped += 1
            freed += size
        self.stats.dropped_size += dropped
        self._count()
        logger.warning(
            "spool %s is full (%.1f MB): dropped the %d oldest batch(es) (%d dropped by size so far)",
            self.directory, self.max_bytes / 1e6, dropped, self.stats.dropped_size,
        )  # fmt: skip

    def _failed(self, exc: Exception) -> None:
        first = self._delay == 0.0
        self._delay = self.retry_s if first else min(self.max_retry_s, self._delay * 2)
        self._next_try = self.monotonic() + self._delay
        self.stats.last_error = f"{type(exc).__name__}: {exc}"
        log = logger.warning if first else logger.info
        log("store %s failed (%s): spooling writes in %s, next try in %g s",
            self.url, exc, self.directory, self._delay)  # fmt: skip

    def flush(self, *, budget_s: float | None = None) -> int:
        """Replay queued writes, oldest first, until the queue is empty, the store fails, or
        ``budget_s`` (default ``replay_budget_s``) has passed. Returns how many were replayed."""
        budget = self.replay_budget_s if budget_s is None else budget_s
        with self._lock:
            if not self.stats.pending or self.monotonic() < self._next_try:
                return 0
            self._trim()
            started = self.monotonic()
            done = 0
            while self.stats.pending and self.monotonic() - started < budget:
                row = self._db.execute(
                    "SELECT id, kind, size, body FROM spool ORDER BY id LIMIT 1"
                ).fetchone()
                if row is None:
                    break
                row_id, kind, size, body = row
                _, method, decode = _KINDS[kind]
                try:
                    getattr(self.store, method)(decode(json.loads(zlib.decompress(body))))
                except InputError as exc:  # the store will never take it: do not block the rest
                    self.stats.rejected += 1
                    logger.error("spool %s: %s refused a queued %s, dropped: %s",
                                 self.directory, self.url, kind, exc)  # fmt: skip
                except Exception as exc:
                    self._failed(exc)
                    break
                else:
                    done += 1
                    self.stats.replayed += 1
                    self._delay = 0.0
                # only now: a crash before this line sends the batch again, never loses it
                self._db.execute("DELETE FROM spool WHERE id = ?", (row_id,))
                self.stats.pending -= 1
                self.stats.bytes -= size
            if done and not self.stats.pending:
                logger.warning(
                    "spool %s: replayed every queued write into %s", self.directory, self.url
                )
            return done

    # -- the rest goes to the store --------------------------------------------------------

    def write_frame(self, frame: Any, *, progress: bool = False) -> int:
        return int(self.store.write_frame(frame, progress=progress))

    def compact(self, now: float) -> None:
        self.store.compact(now)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("read_") or name in ("gpus", "mig_instances"):
            return getattr(self.store, name)
        raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}")

    def close(self) -> None:
        """Close the queue (what waits stays on disk for the next start) and the store."""
        with self._lock:
            if self._lockfile >= 0:
                self._db.close()
                os.close(self._lockfile)
                self._lockfile = -1
                self.store.close()

    def __repr__(self) -> str:
        return f"Spool({self.store!r}, {str(self.directory)!r})"


__all__ = ["Spool", "SpoolStats", "DEFAULT_MAX_BYTES", "DEFAULT_MAX_AGE_S"]
