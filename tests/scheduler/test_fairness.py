"""One tenant's queue must not make placement rounds long for everyone (issue 15, finding 3).

A gang that cannot fit is refused from per-node counts without placing a task; a refused job is
passed over until room is made; a round spends at most its budget of task tries; and within a
class tenants take turns. Work is counted by the policy's choices (a real policy, wrapped) and by
``Scheduler.task_tries``, never by the clock.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuwarden.scheduler import Job, NodeSpec, Quota, Scheduler
from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.policies import make_policy
from gpuwarden.scheduler.policies.base import Choice
from gpuwarden.scheduler.resources import GpuSpec, SharingMode


class CountingPolicy:
    """A real policy that counts the task placements it is asked to choose."""

    def __init__(self, name: str = "warden") -> None:
        self.inner = make_policy(name)
        self.choices = 0

    def choose(self, cluster: ClusterState, job: Job, feasible: np.ndarray) -> Choice:
        self.choices += 1
        return self.inner.choose(cluster, job, feasible)


def cpu_nodes(n: int, cpu_milli: int) -> list[NodeSpec]:
    return [NodeSpec.uniform(f"n{i}", cpu_milli, 262144, 8, "H100-80GB") for i in range(n)]


def test_the_reported_spec_is_refused_without_placing_a_single_task() -> None:
    # the finding: {"tasks": 4096, "gpus_per_task": 0, "cpu_milli": 1} where it cannot fit was
    # placed task by task and undone, in every round, for about a second each time
    policy = CountingPolicy()
    s = Scheduler(cpu_nodes(4, 1000), policy)
    d = s.place(Job("big", tasks=4096, gpus_per_task=0, cpu_milli=1))
    assert not d.placed
    assert d.reason == "job big: only 4000 of 4096 tasks fit at once; no node has the CPU free"
    assert policy.choices == 0 and s.task_tries == 1
    assert s.cluster.cpu_free.tolist() == [1000] * 4


@pytest.mark.parametrize(
    "job",
    [
        Job("whole", tasks=5, gpus_per_task=3),
        Job("share", tasks=40, gpu_milli=300),
        Job("mem", tasks=9, gpus_per_task=1, memory_mib=100_000),  # two per node by memory
        Job("mig", tasks=9, mig_profile="3g.40gb"),
        Job("cpu", tasks=9, gpus_per_task=0, cpu_milli=30_000),
    ],
    ids=lambda j: j.job_id,
)
def test_the_counts_say_what_placing_task_after_task_finds(job: Job) -> None:
    def cluster() -> Scheduler:
        mig = tuple(GpuSpec(i, mode=SharingMode.MIG, memory_mib=81920) for i in range(2))
        nodes = [
            NodeSpec.uniform("a", 64000, 262144, 8, "H100-80GB"),
            NodeSpec.uniform("b", 64000, 262144, 8, "H100-80GB"),
            NodeSpec("m", 64000, 262144, "H100-80GB", mig),
        ]
        s = Scheduler(nodes, "bestfit")
        for i in range(11):  # 11 of the 16 whole GPUs busy
            assert s.place(Job(f"fill{i}")).placed
        return s

    # the same tasks as one-task jobs, one after another, on the same cluster
    s, placed = cluster(), 0
    while s.place(replace(job, job_id=f"t{placed}", tasks=1)).placed:
        placed += 1
    assert 0 < placed < job.tasks
    policy = CountingPolicy("bestfit")
    s = cluster()
    s.policy = policy
    d = s.place(job)
    assert not d.placed and f"only {placed} of {job.tasks} tasks fit at once; " in d.reason
    assert policy.choices == 0


def two_memory_sizes() -> Scheduler:
    """Two one-GPU nodes of 60 and 45 GiB and a tenant with 100 GiB of GPU-memory quota: the
    counts allow two whole-GPU tasks (100 // 45), but 60 + 45 passes the quota, so only a try
    finds out; the policy is counted."""
    nodes = [
        NodeSpec("big", 64000, 262144, "H100-80GB", (GpuSpec(0, memory_mib=61440),)),
        NodeSpec("small", 64000, 262144, "H100-80GB", (GpuSpec(0, memory_mib=46080),)),
    ]
    return Scheduler(nodes, CountingPolicy(), [Quota("t", gpu_memory_mib=102400)])


def test_a_refused_job_is_not_tried_again_until_room_is_made() -> None:
    s = two_memory_sizes()
    policy = s.policy
    assert isinstance(policy, CountingPolicy)
    s.submit(Job("gang", tenant="t", tasks=2))
    (d,) = s.schedule()
    assert not d.placed and "GPU-memory quota" in d.reason
    tried = policy.choices
    assert tried >= 1
    for _ in range(10):  # nothing changed: passed over, no decision, no work
        assert s.schedule() == []
    assert policy.choices == tried
    # a placement takes room: still nothing to try
    assert s.place(Job("other", tenant="u", cpu_milli=1000, gpus_per_task=0)).placed
    tried = policy.choices
    assert s.schedule() == [] and policy.choices == tried
    # room is made: tried again
    s.release("other")
    (d,) = s.schedule()
    assert not d.placed and policy.choices > tried
    # a quota change counts as room made too
    s.quotas.set(Quota("t", gpu_memory_mib=200_000))
    (d,) = s.schedule()
    assert d.placed


def test_a_new_job_of_a_refused_shape_is_refused_without_a_try() -> None:
    s = two_memory_sizes()
    policy = s.policy
    assert isinstance(policy, CountingPolicy)
    s.submit(Job("g0", tenant="t", tasks=2))
    s.schedule()
    tried = policy.choices
    s.submit(Job("g1", tenant="t", tasks=2))
    (d,) = s.schedule()
    assert d.job_id == "g1" and not d.placed and d.reason.startswith("job g1: ")
    assert policy.choices == tried


def test_a_round_spends_at_most_its_budget_and_the_rest_waits() -> None:
    s = Scheduler(cpu_nodes(1, 64000), "bestfit", round_budget=20)
    for i in range(10):
        s.submit(Job(f"j{i}", tasks=4, gpus_per_task=0, cpu_milli=100))  # 5 tries each
    before = s.task_tries
    first = s.schedule()
    assert [d.job_id for d in first] == ["j0", "j1", "j2", "j3"]
    assert s.task_tries - before == 20
    assert [d.job_id for d in s.schedule()] == ["j4", "j5", "j6", "j7"]
    assert [d.job_id for d in s.schedule()] == ["j8", "j9"] and s.pending == []


def test_the_first_try_of_a_round_may_pass_the_budget() -> None:
    s = Scheduler(cpu_nodes(1, 64000), "bestfit", round_budget=3)
    s.submit(Job("gang", tasks=10, gpus_per_task=0, cpu_milli=100))
    (d,) = s.schedule()
    assert d.placed


def test_a_tenant_whose_next_job_passes_the_budget_keeps_its_turn() -> None:
    s = Scheduler(cpu_nodes(1, 64000), "bestfit", round_budget=12)
    s.submit(Job("small", tenant="a", gpus_per_task=0, cpu_milli=1))  # 2 tries
    s.submit(Job("wide", tenant="b", tasks=20, gpus_per_task=0, cpu_milli=1))  # 21 tries
    s.submit(Job("small2", tenant="c", gpus_per_task=0, cpu_milli=1))
    assert [d.job_id for d in s.schedule()] == ["small", "small2"]
    # b did not get its turn, so it goes first next round, where a first try may pass the budget
    assert [d.job_id for d in s.schedule()] == ["wide"]


def test_a_second_tenant_is_placed_ahead_of_the_first_tenants_101st_job() -> None:
    s = Scheduler([NodeSpec.uniform("n", 64000, 262144, 4, "H100-80GB")], "warden")
    for i in range(100):
        s.submit(Job(f"a{i}", tenant="a", gpus_per_task=1, memory_mib=i))  # no two alike
    s.submit(Job("b0", tenant="b", gpus_per_task=1))
    placed = [d.job_id for d in s.schedule() if d.placed]
    assert placed == ["a0", "b0", "a1", "a2"]


def test_room_made_goes_to_the_tenants_in_turn() -> None:
    s = Scheduler([NodeSpec.uniform("n", 64000, 262144, 1, "H100-80GB")], "bestfit")
    for i in range(3):
        s.submit(Job(f"a{i}", tenant="a"))
    for i in range(3):
        s.submit(Job(f"b{i}", tenant="b"))
    order = []
    for _ in range(6):
        (placed,) = [d.job_id for d in s.schedule() if d.placed]
        order.append(placed)
        s.release(placed)
    assert order == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_classes_still_come_first_and_evicted_work_first_in_its_class() -> None:
    s = Scheduler([NodeSpec.uniform("n", 64000, 262144, 2, "H100-80GB")], "bestfit")
    assert s.place(Job("run", tenant="z", interruptible=True)).placed
    s.submit(Job("a-batch", tenant="a"))
    s.submit(Job("b-infer", tenant="b", priority="inference"))
    (gpu,) = s.placements["run"].tasks[0].gpus
    assert [e.job.job_id for e in s.set_health("n", gpu, "unhealthy")] == ["run"]
    s.set_health("n", gpu, "ok")
    assert [j.job_id for j in s.pending] == ["b-infer", "run", "a-batch"]
    assert [d.job_id for d in s.schedule() if d.placed] == ["b-infer", "run"]


def test_a_bad_budget_is_refused() -> None:
    with pytest.raises(Exception, match="round_budget"):
        Scheduler(cpu_nodes(1, 1000), round_budget=0)
