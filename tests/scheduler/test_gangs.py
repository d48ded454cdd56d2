"""Gangs: all tasks of a job start together or none do, and a failed gang holds nothing."""

from __future__ import annotations

import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import Job, NodeSpec, PriorityClass, Scheduler


def nodes(n: int = 2, gpus: int = 8) -> list[NodeSpec]:
    return [NodeSpec.uniform(f"n{i}", 64000, 512 * 1024, gpus, "H100-80GB") for i in range(n)]


@pytest.mark.parametrize("policy", ["warden", "fgd", "bestfit", "gpupacking", "random"])
def test_gang_spanning_nodes_is_placed_whole(policy: str) -> None:
    s = Scheduler(nodes(), policy)
    d = s.place(Job("train", tasks=3, gpus_per_task=4, cpu_milli=16000))
    assert d.placed, d.reason
    tasks = d.placement.tasks  # type: ignore[union-attr]
    assert len(tasks) == 3 and all(len(t.gpus) == 4 for t in tasks)
    used = {(t.node, g) for t in tasks for g in t.gpus}
    assert len(used) == 12  # no GPU given twice
    assert s.cluster.allocated_milli == 12000


@pytest.mark.parametrize("policy", ["warden", "fgd", "bestfit", "gpupacking", "random"])
def test_gang_that_does_not_fit_holds_nothing(policy: str) -> None:
    s = Scheduler(nodes(), policy)
    s.place(Job("small", gpu_milli=500))
    before = (s.cluster.free.copy(), s.cluster.cpu_free.copy(), s.cluster.allocated_milli)
    d = s.place(Job("big", tasks=2, gpus_per_task=8))
    assert not d.placed
    assert "only 1 of 2 tasks fit at once" in d.reason
    assert (s.cluster.free == before[0]).all() and (s.cluster.cpu_free == before[1]).all()
    assert s.cluster.allocated_milli == before[2]
    assert "big" not in s.placements


def test_cpu_limit_can_stop_a_gang_half_way() -> None:
    s = Scheduler(nodes(2), "bestfit")
    d = s.place(Job("g", tasks=3, gpus_per_task=2, cpu_milli=40000))  # one task per node by CPU
    assert not d.placed and s.cluster.allocated_milli == 0
    assert s.cluster.cpu_free.tolist() == [64000, 64000]


def test_two_gangs_never_share_or_deadlock() -> None:
    s = Scheduler(nodes(3), "warden")
    for job_id in ("a", "b"):
        s.submit(Job(job_id, tasks=2, gpus_per_task=8, priority=PriorityClass.TRAINING))
    decisions = s.schedule()
    assert [d.placed for d in decisions] == [True, False]
    assert s.cluster.allocated_milli == 16000  # b holds nothing while it waits
    assert [j.job_id for j in s.pending] == ["b"]
    s.release("a")
    assert [d.placed for d in s.schedule()] == [True]
    assert s.pending == [] and set(s.placements) == {"b"}


def test_round_serves_priority_classes_in_order_and_backfills() -> None:
    s = Scheduler(nodes(1), "warden")
    s.submit(Job("dev", gpus_per_task=4, priority=PriorityClass.DEV))
    s.submit(Job("batch", gpus_per_task=8, priority=PriorityClass.BATCH))
    s.submit(Job("infer", gpus_per_task=4, priority=PriorityClass.INFERENCE))
    s.submit(Job("small", gpus_per_task=2, priority=PriorityClass.BATCH))
    placed = [d.job_id for d in s.schedule() if d.placed]
    # inference first; the 8-GPU batch job cannot fit, the smaller batch job behind it can
    assert placed == ["infer", "small"]
    assert [j.job_id for j in s.pending] == ["batch", "dev"]


def test_duplicates_and_unknown_jobs_are_input_errors() -> None:
    s = Scheduler(nodes(1), "warden")
    s.place(Job("a"))
    with pytest.raises(InputError, match="already placed"):
        s.place(Job("a"))
    with pytest.raises(InputError, match="already known"):
        s.submit(Job("a"))
    with pytest.raises(InputError, match="no job zz"):
        s.release("zz")
