"""Health: at-risk GPUs take only interruptible work, unhealthy GPUs take nothing."""

from __future__ import annotations

import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import CheckpointHook, GpuSpec, Health, Job, NodeSpec, Scheduler


def one_node(health: list[Health], policy: str = "warden") -> Scheduler:
    gpus = tuple(GpuSpec(i, health=h, memory_mib=81920) for i, h in enumerate(health))
    return Scheduler([NodeSpec("n", 64000, 262144, "H100-80GB", gpus)], policy)


def test_at_risk_gpu_takes_interruptible_work_only() -> None:
    s = one_node([Health.AT_RISK, Health.OK])
    a = s.place(Job("serve", gpus_per_task=1))
    assert a.placed and a.placement.tasks[0].gpus == (1,)  # type: ignore[union-attr]
    d = s.place(Job("serve2", gpus_per_task=1))
    assert not d.placed and "no node has 1 fitting ok GPU free" in d.reason
    b = s.place(Job("batch", gpus_per_task=1, interruptible=True))
    assert b.placed and b.placement.tasks[0].gpus == (0,)  # type: ignore[union-attr]


@pytest.mark.parametrize("policy", ["warden", "bestfit", "fgd"])
def test_interruptible_work_goes_to_at_risk_gpus_last(policy: str) -> None:
    # best fit alone would pack the share onto the busy at-risk GPU 0
    s = one_node([Health.AT_RISK, Health.OK, Health.OK], policy)
    first = s.place(Job("train", gpus_per_task=2, interruptible=True))
    assert first.placed and first.placement.tasks[0].gpus == (1, 2)  # type: ignore[union-attr]
    # with no healthy GPU left, the at-risk one still takes interruptible work
    second = s.place(Job("batch", gpus_per_task=1, interruptible=True))
    assert second.placed and second.placement.tasks[0].gpus == (0,)  # type: ignore[union-attr]


def test_a_gang_is_not_split_onto_at_risk_gpus_while_it_fits_on_healthy_ones() -> None:
    nodes = [
        NodeSpec("a", 64000, 262144, "H100-80GB", (GpuSpec(0, health=Health.AT_RISK),)),
        NodeSpec("b", 64000, 262144, "H100-80GB", (GpuSpec(0), GpuSpec(1))),
    ]
    s = Scheduler(nodes, "bestfit")
    d = s.place(Job("gang", tasks=2, gpus_per_task=1, interruptible=True))
    assert d.placed and {t.node for t in d.placement.tasks} == {"b"}  # type: ignore[union-attr]


def test_unhealthy_gpu_takes_nothing() -> None:
    s = one_node([Health.UNHEALTHY, Health.UNHEALTHY])
    assert not s.place(Job("a", gpu_milli=100, interruptible=True)).placed
    assert s.place(Job("cpu", gpus_per_task=0, cpu_milli=1000)).placed


def test_marking_at_risk_evicts_non_interruptible_work_only() -> None:
    s = one_node([Health.OK, Health.OK], "bestfit")
    hook = CheckpointHook("signal", "SIGUSR1")
    s.place(Job("serve", gpu_milli=500, checkpoint=hook, grace_period_s=60))
    s.place(Job("batch", gpu_milli=400, interruptible=True))
    gpu = s.placements["serve"].tasks[0].gpus[0]
    assert s.placements["batch"].tasks[0].gpus[0] == gpu  # best fit shares the GPU
    evictions = s.set_health("n", gpu, "at-risk")
    assert [e.job.job_id for e in evictions] == ["serve"]
    assert evictions[0].job.checkpoint == hook and "at-risk" in evictions[0].reason
    assert set(s.placements) == {"batch"} and [j.job_id for j in s.pending] == ["serve"]
    # the evicted job is placed again, on the other GPU
    (d,) = s.schedule()
    assert d.placed and d.placement.tasks[0].gpus[0] != gpu  # type: ignore[union-attr]


def test_marking_unhealthy_evicts_everything_on_the_gpu() -> None:
    s = one_node([Health.OK])
    s.place(Job("batch", gpus_per_task=1, interruptible=True))
    assert [e.job.job_id for e in s.set_health("n", 0, Health.UNHEALTHY)] == ["batch"]
    assert s.cluster.allocated_milli == 0
    assert not s.schedule()[0].placed
    s.set_health("n", 0, Health.OK)
    assert s.schedule()[0].placed


def test_gang_member_eviction_releases_the_whole_gang() -> None:
    s = Scheduler(
        [NodeSpec.uniform(f"n{i}", 64000, 262144, 2, "H100") for i in range(2)], "bestfit"
    )
    s.place(Job("gang", tasks=2, gpus_per_task=2))
    s.set_health("n1", 0, Health.AT_RISK)
    assert s.cluster.allocated_milli == 0 and [j.job_id for j in s.pending] == ["gang"]
    assert not s.schedule()[0].placed  # only 3 ok GPUs are left


def test_bad_health_calls() -> None:
    s = one_node([Health.OK])
    with pytest.raises(InputError, match="health must be"):
        s.set_health("n", 0, "sick")
    with pytest.raises(InputError, match="no node 'x'"):
        s.set_health("x", 0, "ok")
    with pytest.raises(InputError, match="has no GPU 3"):
        s.set_health("n", 3, "ok")
    assert s.gpu_health("n", 0) is Health.OK


def test_a_job_asking_more_memory_than_any_gpu_has_says_so() -> None:
    s = one_node([Health.OK, Health.OK])
    d = s.place(Job("big", gpus_per_task=1, gpu_memory_mib=200 * 1024))
    assert not d.placed and d.reason.endswith(
        "no node has a GPU with 200 GiB of memory (the largest has 80 GiB)"
    ), d.reason
