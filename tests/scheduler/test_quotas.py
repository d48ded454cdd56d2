"""Quotas: checked at placement, never exceeded; borrowing only for interruptible jobs."""

from __future__ import annotations

import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import Job, NodeSpec, Quota, Scheduler
from gpuwarden.scheduler.resources import GPU_MEMORY_MIB

A100 = GPU_MEMORY_MIB["A100-80GB"]


def sched(*quotas: Quota, model: str = "A100-80GB") -> Scheduler:
    node = [NodeSpec.uniform(f"n{i}", 64000, 262144, 4, model) for i in range(2)]
    return Scheduler(node, "warden", quotas)


def test_gpu_quota_refuses_then_admits_after_release() -> None:
    s = sched(Quota("team", gpu_milli=2000))
    assert s.place(Job("a", tenant="team", gpus_per_task=2)).placed
    d = s.place(Job("b", tenant="team", gpu_milli=100))
    assert not d.placed and "GPU quota 2 GPUs, 2 GPUs in use, the job needs 0.1 GPUs" in d.reason
    # more than the whole quota: no release lets it start, and the reason says so
    big = s.place(Job("c", tenant="team", gpus_per_task=3))
    assert not big.placed and big.reason == (
        "tenant team: the job needs 3 GPUs, more than the whole GPU quota of 2 GPUs; "
        "it starts only if the quota is raised"
    )
    assert s.place(Job("other", tenant="free", gpus_per_task=4)).placed  # no quota: unlimited
    s.release("a")
    assert s.place(Job("b", tenant="team", gpus_per_task=1, tasks=2)).placed
    assert s.quotas.usage("team").gpu_milli == 2000


def test_borrowing_needs_an_interruptible_job() -> None:
    s = sched(Quota("team", gpu_milli=1000, borrow_gpu_milli=2000))
    assert s.place(Job("g", tenant="team", gpus_per_task=1)).placed
    d = s.place(Job("x", tenant="team", gpus_per_task=1))
    assert not d.placed and "only interruptible jobs may borrow" in d.reason
    b = s.place(Job("y", tenant="team", gpus_per_task=2, interruptible=True))
    assert b.placed and b.placement.borrowed  # type: ignore[union-attr]
    assert not s.place(Job("z", tenant="team", gpus_per_task=1, interruptible=True)).placed


def test_gpu_memory_quota_counts_what_the_placement_grants() -> None:
    s = sched(Quota("team", gpu_memory_mib=A100 + A100 // 2))
    assert s.place(Job("whole", tenant="team", gpus_per_task=1)).placed
    half = s.place(Job("half", tenant="team", gpu_milli=500))
    assert half.placed and half.placement.gpu_memory_mib == A100 / 2  # type: ignore[union-attr]
    d = s.place(Job("more", tenant="team", gpu_milli=100))
    assert not d.placed and "GPU-memory quota" in d.reason
    assert s.quotas.usage("team").gpu_memory_mib == A100 + A100 / 2


def test_declared_gpu_memory_is_charged_as_declared() -> None:
    s = sched(Quota("team", gpu_memory_mib=50000))
    d = s.place(Job("a", tenant="team", gpu_milli=300, gpu_memory_mib=20000, tasks=2))
    assert d.placed and s.quotas.usage("team").gpu_memory_mib == 40000
    assert not s.place(Job("b", tenant="team", gpu_milli=300, gpu_memory_mib=20000)).placed


def test_memory_quota_cannot_be_proven_on_gpus_of_unknown_memory() -> None:
    s = sched(Quota("team", gpu_memory_mib=10**9), model="G2")
    assert not s.place(Job("a", tenant="team", gpus_per_task=1)).placed
    assert s.place(Job("b", tenant="nolimit", gpus_per_task=1)).placed


def test_failed_gang_charges_nothing() -> None:
    s = sched(Quota("team", gpu_milli=16000))
    assert not s.place(Job("g", tenant="team", tasks=3, gpus_per_task=4)).placed
    assert s.quotas.usage("team").gpu_milli == 0


def test_bad_quotas() -> None:
    with pytest.raises(InputError, match="must be >= 0"):
        Quota("t", gpu_milli=-1)
    with pytest.raises(InputError, match="borrowing needs"):
        Quota("t", borrow_gpu_milli=100)
    with pytest.raises(InputError, match="needs a tenant"):
        Quota("")
