"""The scheduler service without HTTP: a real SQLite file, a clock we move, an agent we play."""

from __future__ import annotations

import pytest
from service_helpers import ADMIN, HOOK, A, B, PlayAgent, submit, train

from gpuwarden.errors import InputError
from gpuwarden.scheduler.quota import Quota
from gpuwarden.scheduler.service import (
    ConflictError,
    NotFoundError,
    SchedulerService,
    quota_of,
)
from gpuwarden.scheduler.state import SchedulerDB


def test_job_runs_to_success_and_is_billed(svc, clock):
    agent = PlayAgent(svc)
    job_id = submit(svc, gpus_per_task=2)
    orders = agent.sync()
    (start,) = orders["start"]
    assert start["gpus"] == [0, 1] and start["command"] == ["sleep", "100"]
    assert start["env"]["GPUWARDEN_ATTEMPT"] == "1" and start["env"]["GPUWARDEN_RESUME"] == "0"
    assert svc.job(A, job_id)["state"] == "running"
    clock.t += 1
    assert agent.sync()["start"] == []  # reported running: never ordered twice
    clock.t += 3600
    agent.exit((job_id, 1, 0), 0)
    agent.sync()
    job = svc.job(A, job_id)
    assert job["state"] == "succeeded" and job["exit_code"] == 0
    (bill,) = svc.billing(A, 0, clock.t + 10)
    assert bill.job_id == job_id and bill.gpu_hours == pytest.approx(2.0)
    assert svc.quota_rows(A)[0]["used_gpus"] == 0


def test_a_job_that_starts_and_ends_between_two_syncs_is_billed_for_its_run(svc, clock):
    agent = PlayAgent(svc)
    job_id = submit(svc, gpus_per_task=2)
    queued = clock.t
    agent.sync()
    key = (job_id, 1, 0)
    # the agent launched it 5 s after that sync and saw it exit 30 min later; it syncs next
    # an hour later, when the job is long gone
    agent.tasks[key].update(state="exited", exit_code=0, started_at=clock.t + 5,
                            ended_at=clock.t + 1805)  # fmt: skip
    clock.t += 3600
    agent.sync()
    (bill,) = svc.billing(A, 0, clock.t + 10)
    assert bill.gpu_hours == pytest.approx(2 * 1800 / 3600)
    assert svc.job(A, job_id)["started_at"] == pytest.approx(queued + 5)


def test_agent_times_outside_what_the_service_saw_are_clamped(svc, clock):
    agent = PlayAgent(svc)
    job_id = submit(svc)
    queued = clock.t
    agent.sync()
    # a skewed agent clock: "started" a day before the job was queued, "ended" in the future
    agent.tasks[(job_id, 1, 0)].update(state="exited", exit_code=0, started_at=queued - 86400,
                                       ended_at=queued + 86400)  # fmt: skip
    clock.t += 600
    agent.sync()
    (bill,) = svc.billing(A, 0, clock.t + 10)
    assert bill.gpu_hours == pytest.approx(600 / 3600)


def test_preemption_checkpoints_waits_stops_and_requeues(svc, clock):
    agent = PlayAgent(svc)
    t = train(svc)
    agent.sync()
    infer = submit(svc, name="infer", priority="inference")
    svc.tick()  # the round with preemption
    assert svc.job(A, t)["state"] == "checkpointing"
    assert svc.job(A, infer)["state"] == "running"
    orders = agent.sync()
    assert agent.hooks == [(t, 1, 0)] and orders["checkpoint"][0]["hook"] == HOOK
    assert orders["start"] == [] and orders["stop"] == []  # inference waits for the GPUs
    clock.t += 10
    svc.report_checkpoint(A, t, clock.t)
    assert agent.sync()["stop"] == []  # still inside the grace period
    clock.t += 21
    orders = agent.sync()  # grace over: stop, the agent reports the exit next time
    assert [o["job_id"] for o in orders["stop"]] == [t]
    orders = agent.sync()
    job = svc.job(A, t)
    assert job["state"] == "queued" and job["attempt"] == 2 and job["preemptions"] == 1
    assert job["last_checkpoint_at"] == clock.t - 21
    assert [o["job_id"] for o in orders["start"]] == [infer]
    agent.exit((infer, 1, 0), 0)
    (start,) = agent.sync()["start"]
    assert start["job_id"] == t and start["env"]["GPUWARDEN_RESUME"] == "1"
    assert start["env"]["GPUWARDEN_ATTEMPT"] == "2"
    actions = [r["action"] for r in svc.audit(A, 100)][::-1]
    for want in ("submit", "place", "preempt", "checkpoint", "requeue", "finish"):
        assert want in actions
    agent.sync()
    assert "resume" in [r["action"] for r in svc.audit(A, 5)]


def test_restart_adopts_running_jobs_and_keeps_the_queue(tmp_path, clock):
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    agent = PlayAgent(svc)
    running = submit(svc, gpus_per_task=2)
    agent.sync()
    agent.sync()
    waiting = submit(svc, name="later", gpus_per_task=1)
    assert svc.job(A, waiting)["state"] == "queued"
    # a new service on the same file, as after kill -9 (nothing was closed)
    svc2 = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    assert svc2.scheduler is not None and running in svc2.scheduler.placements
    assert [j.job_id for j in svc2.scheduler.pending] == [waiting]
    agent.svc = svc2
    assert agent.sync()["start"] == []
    assert agent.started == [(running, 1, 0)]
    assert sorted(j["job_id"] for j in svc2.jobs(ADMIN)) == sorted([running, waiting])
    agent.exit((running, 1, 0), 0)
    agent.sync()
    assert [k[0] for k in agent.started] == [running, waiting]


def test_idempotency_key_returns_the_first_job(svc):
    first, created = svc.submit(A, {"name": "x", "command": "true", "idempotency_key": "k1"})
    again, created_again = svc.submit(A, {"name": "x", "command": "true", "idempotency_key": "k1"})
    other, _ = svc.submit(B, {"name": "x", "command": "true", "idempotency_key": "k1"})
    assert created and not created_again and again["job_id"] == first["job_id"]
    assert other["job_id"] != first["job_id"]
    assert len(svc.jobs(ADMIN)) == 2


def test_cancel_queued_running_and_finished(svc):
    agent = PlayAgent(svc, gpus=1)
    run = submit(svc)
    agent.sync()
    queued = submit(svc)
    assert svc.cancel(A, queued)["state"] == "cancelled"
    assert svc.cancel(A, run)["state"] == "running"  # until the agent stopped it
    assert [o["job_id"] for o in agent.sync()["stop"]] == [run]
    agent.sync()
    assert svc.job(A, run)["state"] == "cancelled"
    with pytest.raises(ConflictError, match="already cancelled"):
        svc.cancel(A, run)
    with pytest.raises(NotFoundError):
        svc.cancel(B, queued)


def test_a_failing_task_stops_its_gang(svc):
    agent = PlayAgent(svc, gpus=2)
    job_id = submit(svc, tasks=2)
    agent.sync()
    agent.exit((job_id, 1, 1), 3)
    orders = agent.sync()
    assert [(o["job_id"], o["task"]) for o in orders["stop"]] == [(job_id, 0)]
    agent.sync()
    job = svc.job(A, job_id)
    assert job["state"] == "failed" and job["exit_code"] == 3 and "exited with 3" in job["reason"]


def test_health_change_evicts_through_the_checkpoint_path(svc):
    agent = PlayAgent(svc)
    t = train(svc)
    agent.sync()
    out = svc.set_health(ADMIN, "n1", 1, "unhealthy", "Xid 79")
    assert out == {"node": "n1", "gpu": 1, "health": "unhealthy", "evicted": [t]}
    assert svc.job(A, t)["state"] == "checkpointing"
    assert agent.sync()["checkpoint"]
    assert svc.nodes()[0]["gpus"][1]["health"] == "unhealthy"
    with pytest.raises(NotFoundError, match="no node 'n9'"):
        svc.set_health(ADMIN, "n9", 0, "ok", "")
    with pytest.raises(InputError, match="health must be"):
        svc.set_health(ADMIN, "n1", 0, "poorly", "")


def test_quota_holds_jobs_back(svc):
    PlayAgent(svc)
    svc.set_quota(ADMIN, "a", gpus=1, gpu_memory_mib=None, guaranteed_gpus=None)
    job_id = submit(svc, gpus_per_task=2)
    job = svc.job(A, job_id)
    assert job["state"] == "queued" and "quota" in job["reason"]
    (row,) = svc.quota_rows(A)
    assert row["tenant"] == "a" and row["gpus"] == 1


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"priority": "urgent"}, "priority must be one of"),
        ({"gpus_per_task": -1}, "gpus_per_task must be a whole number in 0..64, got -1"),
        ({"mig_profile": "9g.99gb"}, "unknown MIG profile"),
        ({"command": []}, "command"),
        ({"checkpoint": {"kind": "carrier-pigeon", "target": "x"}}, "checkpoint hook kind"),
        ({"colour": "red"}, "unknown job fields: colour"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(svc, spec, problem):
    with pytest.raises(InputError, match=problem):
        submit(svc, **spec)
    assert svc.jobs(ADMIN) == []


def test_quota_limits_map_to_guarantee_and_borrowing():
    assert quota_of("a", 8, None, 4) == Quota("a", 4000, None, 4000)
    assert quota_of("a", 2, 1024, None) == Quota("a", 2000, 1024, 0)
    assert quota_of("a", None, None, None) == Quota("a")
    with pytest.raises(InputError, match="guaranteed_gpus 5 > gpus 2"):
        quota_of("a", 2, None, 5)


def test_a_node_registers_once_and_refuses_mixed_models(svc):
    agent = PlayAgent(svc)
    again = svc.register("n1", {"cpu_milli": 64000, "memory_mib": 262144, "gpus": [
        {"index": i, "uuid": f"GPU-n1-{i}", "model": "H100-80GB", "memory_mib": 81920}
        for i in range(2)]})  # fmt: skip
    assert again["rebuilt"] is False  # the same inventory: nothing rebuilt
    mixed = [{"index": 0, "model": "H100-80GB"}, {"index": 1, "model": "A100-80GB"}]
    with pytest.raises(InputError, match="one model only"):
        svc.register("n2", {"cpu_milli": 1000, "memory_mib": 1024, "gpus": mixed})
    assert [n["node"] for n in svc.nodes()] == ["n1"]
    assert agent.sync() == {"start": [], "checkpoint": [], "stop": []}


def test_a_grace_period_that_would_hold_gpus_forever_is_refused(svc):
    for grace in (1e12, float("inf"), float("nan"), -1, 3601):
        with pytest.raises(InputError, match="grace_period_s"):
            submit(svc, interruptible=True, checkpoint=HOOK, grace_period_s=grace)
    assert submit(svc, interruptible=True, checkpoint=HOOK, grace_period_s=3600)


def test_a_checkpoint_time_outside_the_attempt_is_kept_within_it(svc, clock):
    agent = PlayAgent(svc)
    job_id = train(svc)
    agent.sync()
    agent.sync()
    started = svc.job(A, job_id)["started_at"]
    clock.t += 600
    svc.report_checkpoint(A, job_id, 0.0)  # "checkpointed in 1970": would shield it from preemption
    assert svc.job(A, job_id)["last_checkpoint_at"] == pytest.approx(started)
    svc.report_checkpoint(A, job_id, clock.t + 86400)  # in the future: would hide real ones
    assert svc.job(A, job_id)["last_checkpoint_at"] == pytest.approx(clock.t)
