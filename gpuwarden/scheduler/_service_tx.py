"""A service transition is all or nothing, in the database and in memory.

Each request that changes state runs under the service's lock in one SQLite transaction
(``Transactions.transition``). When anything raises inside it (a write, or the COMMIT itself:
disk full, ``database is locked``), the database rolls back (``SchedulerDB.transaction``), but
the in-memory ``Scheduler`` would keep its change: a job placed that the database does not know
would hold GPUs, or a job evicted in memory would still run in the database. So the scheduler is
rebuilt from the database (``JobLifecycle.rebuild``, as at start) before the error goes on to
the caller, which answers 503 (or the error's 4xx).

A rebuild costs about 0.3 s for 1,024 GPUs and 4,500 jobs, under the lock, so it runs only when
it can matter. Every change to the scheduler goes through ``JobLifecycle.scheduler``, a property
that marks the transition as having reached it, and no code keeps the scheduler across requests:
a transition that never read the attribute cannot have changed it, so input refused before
that (404, 409, most 400s) costs no rebuild. A rebuild that fails too (the disk is still full)
leaves the reason in ``stale``: ``/healthz`` reports it and every transition retries the
rebuild first and refuses (``StoreError``, 503) until one works.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gpuwarden.errors import StoreError
from gpuwarden.scheduler._service_lifecycle import JobLifecycle

logger = logging.getLogger("gpuwarden.scheduler.service")


class Transactions:
    """The service's one lock and its transitions over ``lifecycle``'s database and memory."""

    def __init__(self, lifecycle: JobLifecycle, clock: Callable[[], float]) -> None:
        self.lifecycle = lifecycle
        self.clock = clock
        self.lock = threading.RLock()
        self.stale = ""  # why memory could not be rebuilt after a failed transition

    def load(self) -> None:
        """Build memory from the database at start, in one transaction: the evictions a
        rebuild records (work that may no longer run where it ran) land whole or not at all."""
        with self.lock, self.lifecycle.db.transaction():
            self.lifecycle.rebuild(self.clock())

    @contextmanager
    def transition(self) -> Iterator[None]:
        """Run the body under the lock in one transaction; on any error after the scheduler
        was reached, rebuild it from the rolled-back database, then re-raise."""
        with self.lock:
            self.fresh()
            self.lifecycle.touched = False
            try:
                with self.lifecycle.db.transaction():
                    yield
            except BaseException:
                if self.lifecycle.touched:
                    self.rebuild_after_failure()
                raise

    def fresh(self) -> None:
        """Retry a rebuild that failed; raise ``StoreError`` while memory cannot be trusted."""
        if self.stale:
            self.rebuild_after_failure()
            if self.stale:
                raise StoreError(f"scheduler state is not rebuilt yet: {self.stale}")

    def rebuild_after_failure(self) -> None:
        """Rebuild the scheduler from the database in a transaction of its own."""
        try:
            with self.lifecycle.db.transaction():
                self.lifecycle.rebuild(self.clock())
        except Exception as exc:
            logger.exception("cannot rebuild the scheduler from its database")
            self.stale = str(exc) or type(exc).__name__
        else:
            if self.stale:
                logger.warning("scheduler rebuilt from its database after: %s", self.stale)
            self.stale = ""


__all__ = ["Transactions"]
