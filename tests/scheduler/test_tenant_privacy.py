"""What a tenant reads (its jobs' reasons, its audit rows) never names another tenant's job;
the admin still sees which job did what."""

from __future__ import annotations

import json

from service_helpers import ADMIN, A, B, Clock, PlayAgent, submit, train

from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.state import SchedulerDB


def _seen_by(svc: SchedulerService, who, job_id: str) -> str:
    """Everything ``who`` can read about its job and its audit trail, as one text."""
    return json.dumps([svc.job(who, job_id), svc.audit(who, 1000)])


def _preempt_and_requeue(svc: SchedulerService, clock: Clock, victim_owner) -> tuple[str, str, str]:
    """(victim, preempting job, the victim's reason while it checkpoints)."""
    agent = PlayAgent(svc)
    victim = train(svc) if victim_owner is A else submit(
        svc, B, name="train", priority="training", interruptible=True, gpus_per_task=2)  # fmt: skip
    agent.sync()
    agent.sync()
    infer = submit(svc, B, name="infer", priority="inference")
    svc.tick()  # the round with preemption
    checkpointing = svc.job(ADMIN, victim)
    assert checkpointing["state"] == "checkpointing"
    clock.t += 31
    agent.sync()  # grace over: stop
    agent.sync()  # the exit reported: requeued
    assert svc.job(ADMIN, victim)["attempt"] == 2
    return victim, infer, checkpointing["reason"]


def test_a_job_preempted_for_another_tenant_does_not_learn_its_id(svc, clock):
    victim, infer, reason = _preempt_and_requeue(svc, clock, A)
    assert reason == "preempted by a higher-priority inference job of another tenant"
    seen = _seen_by(svc, A, victim)
    assert infer not in seen
    assert {"preempt", "requeue"} <= {r["action"] for r in svc.audit(A, 1000)}
    # the admin sees which job took the GPUs, in a row no tenant sees
    took = [r for r in svc.audit(ADMIN, 1000) if r["action"] == "preempt-for"]
    assert len(took) == 1 and took[0]["job_id"] == infer
    assert victim in took[0]["reason"] and "tenant a" in took[0]["reason"]
    # one preemption is one "preempt" row, also for the admin (the dashboard counts them)
    assert [r["job_id"] for r in svc.audit(ADMIN, 1000) if r["action"] == "preempt"] == [victim]
    assert victim not in json.dumps(svc.audit(B, 1000))  # nor does the preempting tenant


def test_a_job_preempted_for_its_own_tenant_names_the_job(svc, clock):
    victim, infer, reason = _preempt_and_requeue(svc, clock, B)
    assert reason == f"preempted by inference job {infer}"
    assert infer in json.dumps(svc.audit(B, 1000))


def test_a_placement_lost_at_restart_does_not_name_the_other_tenants_job(tmp_path, clock):
    """Two jobs on one GPU in the database (written by hand, as a damaged file would have it):
    the restart keeps the first and evicts the second, whose reason must not name the first."""
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    agent = PlayAgent(svc, gpus=1)
    first = submit(svc, B, name="first")
    agent.sync()
    second = submit(svc, A, name="second", interruptible=True)
    assert svc.job(A, second)["state"] == "queued"
    on_gpu0 = [{"node": "n1", "gpus": [0], "gpu_milli": 1000, "mig": None}]
    svc.db.update_job(second, state="running", placement=on_gpu0)
    svc.db.conn.commit()

    again = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    assert again.job(A, second)["state"] == "queued"  # no checkpoint hook: requeued at once
    (evicted,) = [r for r in again.audit(A, 1000) if r["action"] == "preempt"]
    assert "after a restart" in evicted["reason"] and "another tenant's job" in evicted["reason"]
    assert first not in _seen_by(again, A, second)
    assert again.job(B, first)["state"] == "running"
