"""adopt: after a restart, placements read from a database go back exactly where they were."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import (
    GpuSpec,
    Health,
    Job,
    MigInstance,
    NodeSpec,
    Quota,
    Scheduler,
    SharingMode,
    TaskPlacement,
)


def nodes() -> list[NodeSpec]:
    mig_gpus = tuple(
        GpuSpec(i, mode=SharingMode.MIG if i < 2 else SharingMode.FRACTIONAL, memory_mib=81920)
        for i in range(4)
    )
    return [
        NodeSpec.uniform("n0", 64000, 1 << 20, 4, "H100-80GB"),
        NodeSpec.uniform("n1", 64000, 1 << 20, 4, "H100-80GB"),
        NodeSpec("m", 64000, 1 << 20, "A100-80GB", mig_gpus),
    ]


QUOTAS = [Quota("a", gpu_milli=20_000, borrow_gpu_milli=4000, gpu_memory_mib=1 << 20)]

JOBS = [
    Job("whole", tenant="a", gpus_per_task=2, cpu_milli=4000, memory_mib=8192),
    Job("share1", tenant="a", gpu_milli=250, gpu_memory_mib=4096),
    Job("share2", tenant="b", gpu_milli=600, interruptible=True),
    Job("mig3g", tenant="a", mig_profile="3g.40gb"),
    Job("mig2g", tenant="b", mig_profile="2g.20gb", tasks=2),
    Job("mig-me", tenant="b", mig_profile="1g.10gb+me"),
    Job("gang", tenant="a", tasks=2, gpus_per_task=2, cpu_milli=16000, interruptible=True),
    Job("cpu", tenant="b", gpus_per_task=0, cpu_milli=2000, memory_mib=1024),
]


def state(s: Scheduler) -> list[np.ndarray]:
    c = s.cluster
    return [
        a.copy()
        for a in (c.free, c.cpu_free, c.mem_free, c.gpu_mem_free, c.mig_mask, c.mig_me, c.nonint)
    ]


def equal(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("policy", ["warden", "bestfit", "random"])
def test_every_placement_kind_round_trips(policy: str) -> None:
    first = Scheduler(nodes(), policy, QUOTAS, seed=5)
    for job in JOBS:
        d = first.place(job, now=100.0)
        assert d.placed, d.reason
    first.note_checkpoint("gang", 150.0)
    kinds = {p.job.kind for p in first.placements.values()}
    assert kinds == {"whole", "fractional", "mig", "cpu"}

    again = Scheduler(nodes(), policy, QUOTAS)
    for job_id, p in first.placements.items():
        rt = first.runtime(job_id)
        got = again.adopt(
            p.job, p.tasks, started_at=rt.started_at, last_checkpoint_at=rt.last_checkpoint_at
        )
        assert got == p  # same tasks, shares, MIG instances, quota charge and borrow flag
    assert again.placements == first.placements
    assert equal(state(first), state(again))
    assert again.cluster.allocated_milli == first.cluster.allocated_milli
    for tenant in ("a", "b"):
        assert again.quotas.usage(tenant) == first.quotas.usage(tenant)
    assert again.runtime("gang").last_checkpoint_at == 150.0
    assert again.runtime("whole").started_at == 100.0
    assert again.running_on("m", 0) == first.running_on("m", 0)


def test_adopted_jobs_release_like_placed_ones() -> None:
    s = Scheduler(nodes(), "warden", QUOTAS)
    s.adopt(JOBS[0], [TaskPlacement("n1", (2, 3), 1000)], started_at=5.0)
    assert s.running_on("n1", 3) == ["whole"] and s.quotas.usage("a").gpu_milli == 2000
    s.release("whole")
    assert s.cluster.allocated_milli == 0 and s.quotas.usage("a").gpu_milli == 0


def test_adopt_takes_a_queued_job_off_the_queue() -> None:
    s = Scheduler(nodes(), "warden")
    s.submit(JOBS[1])
    s.adopt(JOBS[1], [TaskPlacement("n0", (3,), 250)])
    assert s.pending == [] and "share1" in s.placements


def rejected(s: Scheduler, job: Job, tasks: list[TaskPlacement], match: str) -> None:
    before, placed = state(s), dict(s.placements)
    with pytest.raises(InputError, match=match):
        s.adopt(job, tasks)
    assert equal(before, state(s)) and s.placements == placed  # nothing held


def test_conflicts_are_rejected_naming_the_problem() -> None:
    s = Scheduler(nodes(), "warden")
    s.adopt(Job("owner", gpus_per_task=1), [TaskPlacement("n0", (0,), 1000)])
    s.adopt(
        Job("mig", mig_profile="3g.40gb"),
        [TaskPlacement("m", (0,), 0, MigInstance("3g.40gb", 4, 4))],
    )
    rejected(s, Job("x"), [TaskPlacement("nope", (0,), 1000)], "no node 'nope'")
    rejected(s, Job("x"), [TaskPlacement("n0", (9,), 1000)], "no GPU 9")
    rejected(s, Job("x"), [TaskPlacement("n0", (0,), 1000)], r"busy with owner")
    rejected(s, Job("x", gpu_milli=500), [TaskPlacement("n0", (0,), 500)], "busy with owner")
    rejected(s, Job("x", gpu_milli=500), [TaskPlacement("n0", (1,), 300)], "share does not match")
    rejected(s, Job("x", gpus_per_task=2), [TaskPlacement("n0", (1,), 1000)], "needs 2 GPUs")
    rejected(s, Job("x", tasks=2), [TaskPlacement("n0", (1,), 1000)], "has 2 tasks")
    # MIG: overlapping slices, an illegal start, the wrong profile
    overlap = TaskPlacement("m", (0,), 0, MigInstance("3g.40gb", 4, 4))
    rejected(s, Job("x", mig_profile="3g.40gb"), [overlap], "busy with mig")
    illegal = TaskPlacement("m", (1,), 0, MigInstance("3g.40gb", 2, 4))
    rejected(s, Job("x", mig_profile="3g.40gb"), [illegal], "does not fit at slice 2")
    wrong = TaskPlacement("m", (1,), 0, MigInstance("2g.20gb", 0, 2))
    rejected(s, Job("x", mig_profile="3g.40gb"), [wrong], "3g.40gb instance")
    rejected(s, Job("owner"), [TaskPlacement("n1", (0,), 1000)], "already placed")


def test_gang_with_one_bad_task_holds_nothing() -> None:
    s = Scheduler(nodes(), "warden")
    s.adopt(Job("owner", gpus_per_task=2), [TaskPlacement("n1", (0, 1), 1000)])
    gang = Job("gang", tasks=2, gpus_per_task=2)
    tasks = [TaskPlacement("n0", (0, 1), 1000), TaskPlacement("n1", (1, 2), 1000)]
    rejected(s, gang, tasks, "busy with owner")
    assert s.cluster.allocated_milli == 2000


def test_health_rules_hold_for_adopted_work() -> None:
    s = Scheduler(nodes(), "warden")
    s.set_health("n0", 0, Health.AT_RISK)
    s.set_health("n0", 1, Health.UNHEALTHY)
    rejected(s, Job("x"), [TaskPlacement("n0", (0,), 1000)], "GPU 0 of n0 is at-risk")
    rejected(s, Job("x", interruptible=True), [TaskPlacement("n0", (1,), 1000)], "unhealthy")
    s.adopt(Job("ok", interruptible=True), [TaskPlacement("n0", (0,), 1000)])


def test_quota_lowered_since_does_not_evict_but_marks_borrowed() -> None:
    s = Scheduler(nodes(), "warden", [Quota("a", gpu_milli=1000)])
    p = s.adopt(Job("big", tenant="a", gpus_per_task=2), [TaskPlacement("n0", (0, 1), 1000)])
    assert p.borrowed and s.quotas.usage("a").gpu_milli == 2000
    assert not s.place(Job("more", tenant="a", gpu_milli=100)).placed  # new work is refused
