"""The workload: the same for every arm of a seed, sized to the shares asked for."""

from __future__ import annotations

import pytest

from gpuwarden.closedloop.workload import WorkloadSpec, make_workload
from gpuwarden.errors import InputError
from gpuwarden.scheduler import PriorityClass

DAY = 86400.0


def test_services_hold_the_inference_share_and_training_fills_towards_the_target():
    spec = WorkloadSpec(inference_share=0.35, target_busy=0.78)
    wl = make_workload(512, 0.0, 60 * DAY, seed=5, spec=spec)
    held = sum(j.tasks * j.gpus_per_task for j in wl.services)
    assert 0.30 * 512 <= held <= 0.35 * 512
    assert all(j.priority is PriorityClass.INFERENCE and not j.interruptible for j in wl.services)
    assert all(a.job.interruptible and a.job.checkpoint is not None for a in wl.training)
    # offered training load (GPU-seconds of work over the period) near the rest of the target
    offered = sum(a.job.tasks * a.job.gpus_per_task * a.work_s for a in wl.training) / (60 * DAY)
    assert 0.75 * (0.78 * 512 - held) <= offered <= 1.25 * (0.78 * 512 - held)


def test_same_seed_same_workload_other_seed_another():
    a = make_workload(64, 0.0, 5 * DAY, seed=1)
    assert a == make_workload(64, 0.0, 5 * DAY, seed=1)
    assert a != make_workload(64, 0.0, 5 * DAY, seed=2)


@pytest.mark.parametrize(
    "kw", [{"inference_share": 0.9, "target_busy": 0.8}, {"checkpoint_s": 0.0}]
)
def test_bad_workload_settings_are_refused(kw):
    with pytest.raises(InputError):
        WorkloadSpec(**kw)
