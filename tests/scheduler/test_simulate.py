"""Event-driven replay: departures free capacity, queued jobs start when they can."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import Arrival, Job, NodeSpec, Scheduler, replay


def sched() -> Scheduler:
    return Scheduler([NodeSpec.uniform("n", 32000, 131072, 2, "T4")], "warden")


def test_departures_free_gpus_for_later_arrivals() -> None:
    arrivals = [
        Arrival(0.0, Job("a", gpus_per_task=2), duration_s=10.0),
        Arrival(5.0, Job("b", gpus_per_task=1)),
        Arrival(10.0, Job("c", gpus_per_task=1), duration_s=1.0),  # a leaves first at t=10
        Arrival(11.0, Job("d", gpus_per_task=1)),  # c left at t=11
    ]
    r = replay(sched(), arrivals)
    assert r.placed.tolist() == [True, False, True, True]
    assert r.arrived_milli.tolist() == [2000, 3000, 4000, 5000]
    assert r.allocated_milli.tolist() == [2000, 2000, 1000, 1000]
    assert r.decisions == 4 and r.decision_s > 0


def test_retry_pending_starts_queued_jobs_on_departure() -> None:
    s = sched()
    arrivals = [
        Arrival(0.0, Job("a", gpus_per_task=2), duration_s=10.0),
        Arrival(1.0, Job("b", gpus_per_task=2)),
    ]
    r = replay(s, arrivals, retry_pending=True)
    assert r.placed.tolist() == [True, True]  # b started when a left
    assert set(s.placements) == {"b"} and s.pending == []
    assert r.started_s.tolist() == [0.0, 10.0]  # b waited 9 s in the queue


def test_a_job_that_never_starts_has_no_start_time() -> None:
    r = replay(sched(), [Arrival(0.0, Job("a", gpus_per_task=2)), Arrival(1.0, Job("b"))],
               retry_pending=True)  # fmt: skip
    assert r.started_s[0] == 0.0 and np.isnan(r.started_s[1])


def test_ratio_at_reads_the_arrival_that_reached_the_demand() -> None:
    arrivals = [Arrival(float(i), Job(f"j{i}", gpus_per_task=1)) for i in range(3)]
    r = replay(sched(), arrivals)
    assert r.ratio_at(0.5) == pytest.approx(0.5)
    assert r.ratio_at(1.0) == pytest.approx(1.0)
    assert r.ratio_at(1.3) == pytest.approx(1.0)  # never reached: the last arrival
    assert np.array_equal(r.placed, [True, True, False])


def test_time_order_and_bad_durations() -> None:
    r = replay(
        sched(),
        [Arrival(2.0, Job("late", gpus_per_task=2)), Arrival(1.0, Job("early", gpus_per_task=2))],
    )
    assert r.placed.tolist() == [
        True,
        False,
    ]  # in time order: "early" took both GPUs, "late" found none
    with pytest.raises(InputError, match="negative duration"):
        replay(sched(), [Arrival(0.0, Job("x"), duration_s=-1.0)])
