"""The scheduler service's SQLite file: round trips, uniqueness, atomicity, schema version."""

from __future__ import annotations

import sqlite3

import pytest

from gpuwarden.errors import SchemaError
from gpuwarden.scheduler.state import SCHEMA_VERSION, JobRow, NodeRow, SchedulerDB, TaskRow


def _job(db: SchedulerDB, job_id: str, tenant: str = "a", key: str | None = None) -> JobRow:
    spec = {"name": job_id, "command": ["true"], "tasks": 1}
    return JobRow(job_id, db.next_seq(), tenant, job_id, spec, "queued", 1, key, 10.0, 10.0)


def test_job_round_trip_and_update(tmp_path):
    db = SchedulerDB(tmp_path / "s.db")
    with db.transaction():
        db.insert_job(_job(db, "j1"))
        db.insert_job(_job(db, "j2", tenant="b"))
        db.update_job("j1", state="running", placement=[{"node": "n1", "gpus": [0]}])
    db.close()
    db = SchedulerDB(tmp_path / "s.db")  # reopened: everything committed is there
    j1 = db.job("j1")
    assert (
        j1 is not None and j1.state == "running" and j1.placement == [{"node": "n1", "gpus": [0]}]
    )
    assert j1.spec["command"] == ["true"]
    assert [r.job_id for r in db.jobs()] == ["j1", "j2"]
    assert [r.job_id for r in db.jobs(tenant="b")] == ["j2"]
    assert [r.job_id for r in db.jobs(states=("queued",))] == ["j2"]
    assert db.job("nope") is None
    with pytest.raises(ValueError, match="no job columns"):
        db.update_job("j1", colour="red")


def test_idempotency_key_is_unique_per_tenant(tmp_path):
    db = SchedulerDB(tmp_path / "s.db")
    with db.transaction():
        db.insert_job(_job(db, "j1", key="k"))
        db.insert_job(_job(db, "j2", tenant="b", key="k"))  # another tenant may reuse a key
    with pytest.raises(sqlite3.IntegrityError), db.transaction():
        db.insert_job(_job(db, "j3", key="k"))
    assert db.job_by_key("a", "k").job_id == "j1"
    assert db.job_by_key("b", "k").job_id == "j2"
    assert db.job("j3") is None


def test_a_failed_transaction_leaves_nothing(tmp_path):
    db = SchedulerDB(tmp_path / "s.db")
    with pytest.raises(RuntimeError), db.transaction():
        db.insert_job(_job(db, "j1"))
        db.audit(1.0, "admin", "submit", job_id="j1", tenant="a")
        raise RuntimeError("crash halfway")
    assert db.jobs() == [] and db.audit_rows() == []


def test_tasks_logs_usage_nodes(tmp_path):
    db = SchedulerDB(tmp_path / "s.db")
    with db.transaction():
        db.upsert_task(TaskRow("j1", 1, 0, "n1", [0, 1], "starting", None, None, 3))
        db.upsert_task(TaskRow("j1", 1, 1, "n2", [0], "exited", 7, 0, 3))
        db.append_log("j1", 1, 0, 0, "hello\n")
        db.append_log("j1", 1, 0, 0, "hello\n")  # a resent chunk is kept once
        db.append_log("j1", 1, 0, 6, "world\n")
        db.append_log("j1", 2, 0, 0, "again\n")
        db.open_usage("j1", "a", "train", 2000, 100.0)
        db.open_usage("j1", "a", "train", 2000, 101.0)  # second task of the gang: still one
        db.close_usage("j1", 50.0)  # a clock step back never makes a negative interval
        db.upsert_node(NodeRow("n1", 8000, 1024, [{"index": 0, "model": "H100"}], 5.0, 0))
    assert [t.task for t in db.tasks(job_id="j1", live=True)] == [0]
    assert db.tasks(node="n2")[0].gpus == [0]
    assert db.log_text("j1") == "hello\nworld\nagain\n"
    assert db.log_text("j1", attempt=2) == "again\n"
    assert [tuple(r) for r in db.usage_rows()] == [("j1", "a", "train", 2000, 100.0, 100.0)]
    assert db.bump_sync("n1", 6.0) == 1 and db.bump_sync("n1", 7.0) == 2
    assert db.node("n1").agent_seen_at == 7.0


def test_wal_and_newer_schema_refused(tmp_path):
    path = tmp_path / "s.db"
    db = SchedulerDB(path)
    assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(SchemaError, match="newer"):
        SchedulerDB(path)


def test_a_version_1_file_gains_the_lost_mark(tmp_path):
    path = tmp_path / "s.db"
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE nodes (node TEXT PRIMARY KEY, cpu_milli INTEGER NOT NULL, memory_mib"
        " INTEGER NOT NULL, gpus TEXT NOT NULL, agent_seen_at REAL, sync_seq INTEGER NOT NULL"
        " DEFAULT 0)"
    )
    old.execute("INSERT INTO nodes VALUES ('n1', 8000, 1024, '[]', 5.0, 3)")
    old.execute("PRAGMA user_version = 1")
    old.commit()
    old.close()
    db = SchedulerDB(path)
    assert db.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    assert db.sleep_rows() == [] and db.reclaims() == []  # the tables a version 3 file adds
    assert db.sleep_hold() is None  # and version 4's
    assert db.node("n1") == NodeRow("n1", 8000, 1024, [], 5.0, 3, None)
    assert db.silent_nodes(6.0) == [("n1", 5.0)] and db.silent_nodes(5.0) == []
    db.set_node_lost("n1", 9.0)
    assert db.node("n1").lost_at == 9.0 and db.silent_nodes(6.0) == []
    db.upsert_node(NodeRow("n1", 8000, 2048, [], 10.0, 0))  # a new inventory keeps the mark
    assert db.node("n1").lost_at == 9.0 and db.node("n1").sync_seq == 3
