"""A service transition is all or nothing, in the database and in memory.

Each request that changes state runs under the service's lock in one SQLite transaction
(``transition``). When anything raises inside it (a write, or the COMMIT itself: disk full,
``database is locked``), the database rolls back (``SchedulerDB.transaction``), but the
in-memory ``Scheduler`` would keep its change: a job placed that the database does not know
would hold GPUs, or a job evicted in memory would still run in the database. So the scheduler is
rebuilt from the database (``_service_sync.rebuild``, as at start) before the error goes on to
the caller, which answers 503 (or the error's 4xx).

A rebuild costs about 0.3 s for 1,024 GPUs and 4,500 jobs, under the lock, so it runs only when
it can matter. Every change to the scheduler goes through ``svc.scheduler``, a property that
marks the transition as having reached it, and no code keeps the scheduler across requests:
a transition that never read the attribute cannot have changed it, so input refused before
that (404, 409, most 400s) costs no rebuild. A rebuild that fails too (the disk is still full)
leaves the reason in ``svc.stale``: ``/healthz`` reports it and every transition retries the
rebuild first and refuses (``StoreError``, 503) until one works.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from gpuwarden.errors import StoreError
from gpuwarden.scheduler._service_sync import rebuild

if TYPE_CHECKING:
    from gpuwarden.scheduler.service import SchedulerService

logger = logging.getLogger("gpuwarden.scheduler.service")


@contextmanager
def transition(svc: SchedulerService) -> Iterator[None]:
    """Run the body under ``svc.lock`` in one transaction; on any error after the scheduler
    was reached, rebuild it from the rolled-back database, then re-raise."""
    with svc.lock:
        fresh(svc)
        svc.touched = False
        try:
            with svc.db.transaction():
                yield
        except BaseException:
            if svc.touched:
                rebuild_after_failure(svc)
            raise


def fresh(svc: SchedulerService) -> None:
    """Retry a rebuild that failed; raise ``StoreError`` while memory cannot be trusted."""
    if svc.stale:
        rebuild_after_failure(svc)
        if svc.stale:
            raise StoreError(f"scheduler state is not rebuilt yet: {svc.stale}")


def rebuild_after_failure(svc: SchedulerService) -> None:
    """Rebuild the scheduler from the database in a transaction of its own."""
    try:
        with svc.db.transaction():
            rebuild(svc, svc.clock())
    except Exception as exc:
        logger.exception("cannot rebuild the scheduler from its database")
        svc.stale = str(exc) or type(exc).__name__
    else:
        if svc.stale:
            logger.warning("scheduler rebuilt from its database after: %s", svc.stale)
        svc.stale = ""


__all__ = ["fresh", "rebuild_after_failure", "transition"]
