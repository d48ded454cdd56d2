"""A transition that fails after the in-memory scheduler changed leaves memory as the database
says, whatever failed: a write late in the transition, or the COMMIT itself. The database is a
real SQLite file; the COMMIT failures are real ones (a deferred foreign key that SQLite checks
at COMMIT, the way ``database is locked`` or a full disk fail there)."""

from __future__ import annotations

import math
import sqlite3
from typing import Any

import pytest
from service_helpers import A, PlayAgent, submit, trap_commit, untrap

from gpuwarden.errors import StoreError
from gpuwarden.scheduler import _service_logs
from gpuwarden.scheduler.service import NotFoundError, SchedulerService
from gpuwarden.scheduler.state import SchedulerDB


def memory(svc: SchedulerService) -> dict[str, Any]:
    """What the in-memory scheduler holds: placements, queue, free GPU shares and memory,
    health and what each tenant is charged."""
    s = svc.scheduler
    assert s is not None
    return {
        "placed": {j: p.tasks for j, p in s.placements.items()},
        "pending": [j.job_id for j in s.pending],
        "free_milli": s.cluster.free.tolist(),
        "free_gpu_mem": [
            [None if math.isnan(x) else x for x in row] for row in s.cluster.gpu_mem_free.tolist()
        ],  # fmt: skip
        "health": s.cluster.health.tolist(),
        "charged": {
            t: s.quotas.usage(t)
            for t in s.quotas.tenants()
            if s.quotas.usage(t).gpu_milli or s.quotas.usage(t).gpu_memory_mib
        },  # fmt: skip
    }


def rebuilt(tmp_path, clock) -> dict[str, Any]:
    """The memory of a service started afresh on the same file (a second connection)."""
    fresh = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    try:
        return memory(fresh)
    finally:
        fresh.db.close()


def fail_when(db: SchedulerDB, method: str, when: Any) -> None:
    """Make ``db.method`` raise a disk-full error for the calls ``when(*args)`` picks."""
    real = getattr(db, method)

    def failing(*args: Any, **kw: Any) -> Any:
        if when(*args, **kw):
            raise sqlite3.OperationalError("database or disk is full")
        return real(*args, **kw)

    setattr(db, method, failing)


def test_a_submit_whose_last_write_fails_leaves_no_phantom_placement(svc, clock, tmp_path):
    agent = PlayAgent(svc)
    first = submit(svc, gpus_per_task=1)
    before = memory(svc)
    fail_when(svc.db, "audit", lambda *a, **kw: a[2] == "place")  # after the job was placed
    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        submit(svc, gpus_per_task=1)
    assert [r.job_id for r in svc.db.jobs()] == [first]  # the database rolled back ...
    assert memory(svc) == before == rebuilt(tmp_path, clock)  # ... and so did memory
    del svc.db.audit  # the disk has room again: the next requests work
    second = submit(svc, gpus_per_task=1)
    assert set(memory(svc)["placed"]) == {first, second}
    assert {o["job_id"] for o in agent.sync()["start"]} == {first, second}


def test_a_sync_whose_last_write_fails_is_undone_in_memory_too(svc, clock, tmp_path):
    agent = PlayAgent(svc, gpus=1)
    running = submit(svc)
    agent.sync()
    waiting = submit(svc)
    assert memory(svc)["pending"] == [waiting]
    before = memory(svc)
    agent.exit((running, 1, 0), 0)
    # the sync frees the GPU and places the waiting job, then fails ordering it started
    fail_when(svc.db, "upsert_task", lambda task: task.state == "starting")
    with pytest.raises(sqlite3.OperationalError):
        agent.sync()
    assert svc.job(A, running)["state"] == "running" and svc.job(A, waiting)["state"] == "queued"
    assert memory(svc) == before == rebuilt(tmp_path, clock)
    del svc.db.upsert_task
    (start,) = agent.sync()["start"]
    assert start["job_id"] == waiting
    assert svc.job(A, running)["state"] == "succeeded"
    assert memory(svc) == rebuilt(tmp_path, clock)


def test_a_failing_commit_rolls_back_memory_and_leaves_no_open_transaction(svc, clock, tmp_path):
    PlayAgent(svc)
    before = memory(svc)
    trap_commit(svc.db, "place")
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        submit(svc)
    assert not svc.db.conn.in_transaction
    assert svc.db.jobs() == []
    assert memory(svc) == before == rebuilt(tmp_path, clock)
    untrap(svc.db)
    job_id = submit(svc)
    assert svc.job(A, job_id)["state"] == "running"
    assert memory(svc) == rebuilt(tmp_path, clock)  # committed: another connection sees it


def test_a_health_change_that_fails_keeps_the_work_where_it_was(svc, clock, tmp_path):
    from service_helpers import ADMIN

    agent = PlayAgent(svc)
    job_id = submit(svc, gpus_per_task=2)
    agent.sync()
    before = memory(svc)
    trap_commit(svc.db, "health")
    with pytest.raises(sqlite3.IntegrityError):
        svc.set_health(ADMIN, "n1", 0, "unhealthy", "xid 79")
    assert memory(svc) == before == rebuilt(tmp_path, clock)
    assert svc.job(A, job_id)["state"] == "running"


def test_refused_input_costs_no_rebuild(svc):
    PlayAgent(svc)
    held = svc.scheduler
    with pytest.raises(NotFoundError):
        svc.cancel(A, "j-000000000000")
    assert svc.scheduler is held  # nothing reached the scheduler: nothing to rebuild
    fail_when(svc.db, "audit", lambda *a, **kw: a[2] == "place")
    with pytest.raises(sqlite3.OperationalError):
        submit(svc)
    assert svc.scheduler is not held  # this one had placed the job: rebuilt


def test_a_rebuild_that_fails_too_refuses_work_until_one_works(svc, clock, tmp_path):
    PlayAgent(svc)
    fail_when(svc.db, "audit", lambda *a, **kw: a[2] == "place")
    fail_when(svc.db, "nodes", lambda: True)  # the rebuild's first read
    with pytest.raises(sqlite3.OperationalError):
        submit(svc)
    ok, why = svc.health()
    assert not ok and "not rebuilt" in why and "disk is full" in why
    with pytest.raises(StoreError, match="not rebuilt yet"):
        submit(svc)
    del svc.db.nodes, svc.db.audit
    job_id = submit(svc)  # rebuilt first, then served
    assert svc.health()[0] and svc.job(A, job_id)["state"] == "running"
    assert memory(svc) == rebuilt(tmp_path, clock)


def test_transaction_ends_a_transaction_whose_commit_failed(tmp_path):
    """Before: the connection stayed inside the failed transaction and the next
    ``transaction()`` joined it, so its writes were never committed."""
    db = SchedulerDB(tmp_path / "s.db")
    trap_commit(db, "boom")
    with pytest.raises(sqlite3.IntegrityError), db.transaction():
        db.audit(1.0, "admin", "boom")
    assert not db.conn.in_transaction
    untrap(db)
    with db.transaction():
        db.audit(2.0, "admin", "fine")
    other = SchedulerDB(tmp_path / "s.db")
    assert [r.action for r in other.audit_rows()] == ["fine"]


def test_nested_transactions_join_and_roll_back_together(tmp_path):
    db = SchedulerDB(tmp_path / "s.db")
    with pytest.raises(RuntimeError), db.transaction():
        db.audit(1.0, "admin", "outer")
        with db.transaction():
            db.audit(2.0, "admin", "inner")
        raise RuntimeError("after the inner one")
    assert db.audit_rows() == [] and not db.conn.in_transaction


def _log_sync(agent: PlayAgent, chunks: list[dict[str, Any]]) -> None:
    body = {"tasks": [{"job_id": k[0], "attempt": k[1], "task": k[2], **v}
                      for k, v in agent.tasks.items()], "logs": chunks}  # fmt: skip
    agent.svc.agent_sync(agent.node, body)


def test_one_sync_stores_at_most_its_log_budget(svc):
    agent = PlayAgent(svc)
    jobs = [submit(svc, gpu_milli=100) for _ in range(3)]
    agent.sync()
    mib = "x" * ((1 << 20) - 1) + "\n"
    per_job = _service_logs.MAX_SYNC_LOG_BYTES // (1 << 20) // 2  # MiB: two jobs fill it
    chunks = [{"job_id": j, "attempt": 1, "task": 0, "offset": i << 20, "text": mib}
              for j in jobs for i in range(per_job)]  # fmt: skip
    _log_sync(agent, chunks)
    assert [len(svc.logs(A, j, attempt=None, task=None)) for j in jobs[:2]] == [per_job << 20] * 2
    third = svc.logs(A, jobs[2], attempt=None, task=None)
    assert third.count("bytes of output dropped here") == per_job and "xxxx" not in third
    assert "at most 16 MiB" in third
    # the next sync has a budget of its own
    _log_sync(agent, [{"job_id": jobs[2], "attempt": 1, "task": 0, "offset": per_job << 20,
                       "text": "later\n"}])  # fmt: skip
    assert svc.logs(A, jobs[2], attempt=None, task=None).endswith("later\n")


def test_a_tasks_log_is_kept_up_to_its_cap(svc):
    agent = PlayAgent(svc)
    job_id = submit(svc)
    agent.sync()
    cap = _service_logs.MAX_TASK_LOG_BYTES
    for offset, text in ((0, "first\n"), (cap - 6, "edge!\n"), (cap, "past\n"), (cap + 5, "x\n")):
        _log_sync(agent, [{"job_id": job_id, "attempt": 1, "task": 0, "offset": offset,
                           "text": text}])  # fmt: skip
    text = svc.logs(A, job_id, attempt=None, task=None)
    assert text.startswith("first\nedge!\n") and "\npast\n" not in text and "\nx\n" not in text
    assert text.count("is not kept by the scheduler") == 1 and "on n1 in" in text


def test_a_lone_surrogate_in_log_text_does_not_fail_the_sync(svc):
    agent = PlayAgent(svc)
    job_id = submit(svc)
    agent.sync()
    _log_sync(agent, [{"job_id": job_id, "attempt": 1, "task": 0, "offset": 0,
                       "text": "bad \ud800 byte\n"}])  # fmt: skip
    assert svc.logs(A, job_id, attempt=None, task=None) == "bad ? byte\n"
