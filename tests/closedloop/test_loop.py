"""The event loop on hand-made fleets: every count worked out by hand."""

from __future__ import annotations

import pytest
from loopkit import T0, H, failure, first_gpu_of, make_fleet, service, workload

from gpuwarden.closedloop.loop import run_arm
from gpuwarden.closedloop.workload import TrainingArrival, Workload, WorkloadSpec
from gpuwarden.scheduler import Job, PriorityClass


def _run(fleet, wl, arm):
    return run_arm(fleet, wl, arm, start_ts=T0)


def test_failure_under_a_replica_interrupts_it_without_prediction():
    svc = service()
    slot = first_gpu_of(svc, 2)
    fleet = make_fleet(gpus=2, failures=(failure(slot, 10.5),))
    r = _run(fleet, workload(svc, restart_s=900.0), "none")
    assert (r.failures, r.failures_with_precursor) == (1, 1)
    assert (r.interruptions, r.interruptions_with_precursor, r.interruptions_sudden) == (1, 1, 0)
    # placed again at once on the other GPU, serving again after the 15-minute restart
    assert r.inference_downtime_gpu_h == pytest.approx(0.25)
    assert r.preemptions_inference == 0 and r.withheld_gpu_h == 0


def test_a_flag_before_the_failure_moves_the_replica_in_the_model_arm():
    svc = service()
    slot = first_gpu_of(svc, 2)
    risky = {slot: {t: 0.9 for t in range(3, 24)}}  # from the 4th scoring hour on
    fleet = make_fleet(gpus=2, risk=risky, failures=(failure(slot, 10.5),))
    wl = workload(svc)
    model, rules = _run(fleet, wl, "model"), _run(fleet, wl, "rules")
    assert model.interruptions == 0 and model.preemptions_inference == 1
    assert model.inference_downtime_gpu_h == 0.0  # the other GPU was free: a graceful move
    # flagged at the scoring times 4 h .. 10 h, failed at 10.5 h: 7 GPU-hours withheld
    assert model.withheld_gpu_h == 7
    assert rules.interruptions == 1 and rules.withheld_gpu_h == 0  # no rule fired


def test_a_link_rule_moves_the_replica_in_the_model_arm_whatever_the_risk():
    svc = service()
    slot = first_gpu_of(svc, 2)
    fleet = make_fleet(gpus=2, link={slot: set(range(3, 24))}, failures=(failure(slot, 10.5),))
    model, none = _run(fleet, workload(svc), "model"), _run(fleet, workload(svc), "none")
    # the risk stays 0.01: the link rule alone marks the GPU at-risk, as in ``serve``
    assert model.interruptions == 0 and model.preemptions_inference == 1
    assert model.withheld_gpu_h == 7
    assert none.interruptions == 1 and none.withheld_gpu_h == 0


def test_sudden_failures_count_in_every_arm():
    svc = service()
    slot = first_gpu_of(svc, 2)
    fleet = make_fleet(gpus=2, failures=(failure(slot, 5.2, precursor=False),))
    for arm in ("none", "rules", "model"):
        r = _run(fleet, workload(svc), arm)
        assert (r.failures, r.failures_with_precursor) == (1, 0), arm
        assert (r.interruptions, r.interruptions_sudden) == (1, 1), arm


def test_capacity_withheld_is_flagged_gpu_hours_on_gpus_that_did_not_fail():
    # GPU 1 scores 0.9 for six hours and never fails: at-risk from the first scoring time until
    # its risk has stayed under 0.5 for the engine's 24 h hold (scores low from 7 h: ok at 31 h)
    fleet = make_fleet(gpus=2, hours=48, risk={1: {t: 0.9 for t in range(6)}})
    model = _run(fleet, workload(), "model")
    assert model.withheld_gpu_h == 30
    assert model.fleet_gpu_h == 2 * 48
    assert model.withheld_share == pytest.approx(30 / 96)
    assert list(model.withheld_per_hour[:31]) == [1] * 30 + [0]
    for arm in ("none", "rules"):
        assert _run(fleet, workload(), arm).withheld_gpu_h == 0


def test_rule_arm_flags_on_a_rule_and_withholds_the_gpu():
    fleet = make_fleet(gpus=2, hours=10, rule={0: {2, 3}})
    r = _run(fleet, workload(), "rules")
    assert (
        r.withheld_gpu_h == 8
    )  # at-risk from the 3rd scoring time; the 24 h hold outlasts the run


def test_training_loses_work_since_its_last_checkpoint_and_a_flag_saves_it_early():
    job = Job("train-0", priority=PriorityClass.TRAINING, interruptible=True)
    wl = Workload((), (TrainingArrival(T0, job, 100 * H),), WorkloadSpec(checkpoint_s=1.5 * H))
    # one GPU; fails at 2.75 h. Periodic checkpoint at 1.5 h; the model flags it at 2 h
    fleet = make_fleet(gpus=1, risk={0: {1: 0.9, 2: 0.9}}, failures=(failure(0, 2.75),))
    none, model = _run(fleet, wl, "none"), _run(fleet, wl, "model")
    assert none.training_lost_gpu_h == pytest.approx(1.25)
    assert model.training_lost_gpu_h == pytest.approx(0.75)  # checkpointed when flagged at-risk
    assert model.preemptions_training == 0  # interruptible work stays on an at-risk GPU
