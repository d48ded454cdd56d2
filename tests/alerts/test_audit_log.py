"""The audit table: every decision and action, read back newest first, restorable."""

import math
import sqlite3

import pytest

from gpuwarden.alerts.audit import AuditLog
from gpuwarden.alerts.base import Transition
from gpuwarden.errors import InputError, StoreError
from gpuwarden.health import GpuState
from gpuwarden.telemetry import GpuId

A = GpuId("node1", 0, "GPU-a")
B = GpuId("node2", 5, "GPU-b")


def tr(gpu, ts, old, new, risk=0.8, source="model", actor="gpuwarden"):
    return Transition(ts, gpu, old, new, risk, ("SBE rate up", "hot HBM"), "drain", source, actor)


def test_records_decisions_and_hooks(tmp_path):
    log = AuditLog(tmp_path / "audit.db")
    t = tr(A, 100.0, GpuState.OK, GpuState.AT_RISK)
    log.record(t)
    log.record(t, hook="slurm", result="ok: ran scontrol update NodeName=node1 ...")
    log.record(tr(B, 200.0, GpuState.OK, GpuState.UNHEALTHY, risk=math.nan))
    rows = log.rows()
    assert [(r.uuid, r.hook) for r in rows] == [
        ("GPU-b", None),
        ("GPU-a", "slurm"),
        ("GPU-a", None),
    ]
    first = rows[-1]
    assert (first.ts, first.hostname, first.gpu, first.old_state, first.new_state) == (
        100.0,
        "node1",
        0,
        "ok",
        "at-risk",
    )
    assert first.reasons == ["SBE rate up", "hot HBM"] and first.result == "decided"
    assert rows[0].risk is None  # unknown stays unknown, not 0
    assert [r.id for r in log.rows(uuid="GPU-a", hook="slurm")] == [rows[1].id]
    assert [r.uuid for r in log.rows(since=150)] == ["GPU-b"]
    assert len(log.rows(limit=1)) == 1
    log.close()
    # the file is plain SQLite, readable by anyone
    with sqlite3.connect(tmp_path / "audit.db") as conn:
        assert conn.execute("SELECT count(*) FROM audit").fetchone()[0] == 3


def test_last_states_restore_after_restart(tmp_path):
    path = tmp_path / "audit.db"
    log = AuditLog(path)
    log.record(tr(A, 1, GpuState.OK, GpuState.AT_RISK))
    log.record(tr(A, 2, GpuState.AT_RISK, GpuState.UNHEALTHY, source="alertmanager"))
    log.record(tr(A, 2, GpuState.AT_RISK, GpuState.UNHEALTHY), hook="k8s", result="ok")
    log.record(tr(B, 3, GpuState.OK, GpuState.AT_RISK, source="manual", actor="carol"))
    log.close()
    again = AuditLog(path)
    assert sorted(again.last_states()) == [
        (A, GpuState.UNHEALTHY, 2.0, "alertmanager"),
        (B, GpuState.AT_RISK, 3.0, "manual"),
    ]
    assert again.count() == 4


def test_bad_use_is_a_clear_error(tmp_path):
    log = AuditLog()
    with pytest.raises(InputError, match="limit"):
        log.rows(limit=0)
    log.close()
    with pytest.raises(StoreError, match="closed"):
        log.rows()
    with pytest.raises(StoreError, match="cannot open"):
        AuditLog(tmp_path / "no" / "such" / "dir.db")
