"""Preemption: an inference job pushes out the interruptible work that loses the least."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import (
    Candidate,
    GpuSpec,
    Job,
    NodeSpec,
    Quota,
    Scheduler,
    SharingMode,
    TaskPlacement,
    cheapest_victims,
)


def cluster(n: int, gpus: int, policy: str = "gpupacking", **kw: object) -> Scheduler:
    nodes = [NodeSpec.uniform(f"n{i}", 64000, 1 << 20, gpus, "H100-80GB") for i in range(n)]
    return Scheduler(nodes, policy, clock=lambda: 0.0, **kw)  # type: ignore[arg-type]


def batch(job_id: str, **kw: object) -> Job:
    kw.setdefault("interruptible", True)
    return Job(job_id, priority=kw.pop("priority", "batch"), **kw)  # type: ignore[arg-type]


def put(s: Scheduler, job: Job, node: str, gpus: tuple[int, ...], at: float = 0.0) -> None:
    """Place ``job`` exactly there (the test decides the layout, not the policy)."""
    s.adopt(job, [TaskPlacement(node, gpus, job.gpu_milli)], started_at=at)


def snapshot(s: Scheduler) -> tuple:
    c = s.cluster
    arrays = (c.free, c.cpu_free, c.mem_free, c.gpu_mem_free, c.mig_mask, c.nonint, c.tasks_on)
    usage = {t: s.quotas.usage(t) for t in s.quotas.tenants()}
    return (
        [a.copy() for a in arrays],
        dict(s.placements),
        [j.job_id for j in s.pending],
        usage,
        c.allocated_milli,
    )


def same(a: tuple, b: tuple) -> bool:
    arrays_a, *rest_a = a
    arrays_b, *rest_b = b
    eq = all(np.array_equal(x, y, equal_nan=True) for x, y in zip(arrays_a, arrays_b, strict=True))
    return eq and rest_a == rest_b


def test_cheapest_set_beats_cheapest_jobs_first() -> None:
    # n0: three one-GPU jobs, checkpointed 100 s ago (100,000 milli-s each, 300,000 together);
    # n1: one four-GPU job checkpointed 60 s ago (240,000). Evicting the cheapest jobs first
    # takes all three small ones; the cheapest set is the one big job.
    s = cluster(2, 4)
    for i in range(3):
        put(s, batch(f"small{i}"), "n0", (i,), at=0.0)
    put(s, batch("big", gpus_per_task=4, priority="training"), "n1", (0, 1, 2, 3), at=40.0)
    d = s.place(Job("serve", gpus_per_task=4, priority="inference"), now=100.0, preempt=True)
    assert d.placed, d.reason
    assert [e.job.job_id for e in d.evictions] == ["big"]
    assert d.evictions[0].reason == "preempted by inference job serve"
    assert d.placement.tasks[0].node == "n1"  # type: ignore[union-attr]
    assert set(s.placements) == {"small0", "small1", "small2", "serve"}
    assert [j.job_id for j in s.pending] == ["big"]


def test_search_alone_is_exact_where_greedy_is_not() -> None:
    # The same case through the pure search, with a fit oracle: n0 needs all three small jobs
    # gone, n1 needs the big one gone.
    cands = [Candidate(f"s{i}", 100_000, 1) for i in range(3)] + [Candidate("big", 240_000, 1)]

    def fits(ids: Sequence[str]) -> bool:
        gone = set(ids)
        return {"s0", "s1", "s2"} <= gone or "big" in gone

    got = cheapest_victims(cands, fits)
    assert got is not None and got.job_ids == ("big",) and got.cost_milli_s == 240_000
    # greedy (cheapest first until it fits) would have paid 300,000
    assert cheapest_victims(cands, fits, max_trials=0).job_ids == ("s0", "s1", "s2")  # type: ignore[union-attr]


def test_cheap_job_on_the_wrong_node_is_not_evicted() -> None:
    # n0: a cheap job beside non-interruptible work (evicting it cannot make two GPUs free);
    # n1: a dearer job beside a free GPU. Greedy takes the cheap one first, then drops it.
    s = cluster(2, 2)
    put(s, batch("cheap"), "n0", (0,), at=90.0)
    put(s, Job("pinned", priority="training"), "n0", (1,))
    put(s, batch("dear"), "n1", (0,), at=0.0)
    d = s.place(Job("serve", gpus_per_task=2, priority="inference"), now=100.0, preempt=True)
    assert d.placed and [e.job.job_id for e in d.evictions] == ["dear"]
    assert "cheap" in s.placements and "pinned" in s.placements


def test_equal_cost_prefers_victims_on_fewer_nodes() -> None:
    # "a-gang" (500 on n1 and on n2) and "solo" (1000 on n0) lose the same work; a 500-milli
    # inference job fits after either. The gang touches two nodes, so "solo" goes.
    s = cluster(3, 1)
    for n in ("n1", "n2"):
        put(s, Job(f"keep-{n}", gpu_milli=500, priority="training"), n, (0,))
    gang = batch("a-gang", tasks=2, gpu_milli=500)
    s.adopt(gang, [TaskPlacement("n1", (0,), 500), TaskPlacement("n2", (0,), 500)], started_at=0)
    put(s, batch("solo"), "n0", (0,), at=0.0)
    d = s.place(Job("serve", gpu_milli=500, priority="inference"), now=100.0, preempt=True)
    assert d.placed and [e.job.job_id for e in d.evictions] == ["solo"]


def test_recent_checkpoint_makes_a_job_cheap() -> None:
    s = cluster(2, 1)
    put(s, batch("a"), "n0", (0,), at=0.0)
    put(s, batch("b"), "n1", (0,), at=0.0)
    s.note_checkpoint("b", 95.0)
    assert s.runtime("b").last_checkpoint_at == 95.0 and s.runtime("b").started_at == 0.0
    d = s.place(Job("serve", priority="inference"), now=100.0, preempt=True)
    assert [e.job.job_id for e in d.evictions] == ["b"]
    s.note_started("a", 50.0)  # a restart resets the checkpoint to the start
    assert s.runtime("a").last_checkpoint_at == 50.0


def test_never_preempts_inference_or_non_interruptible_work() -> None:
    s = cluster(1, 2)
    put(s, Job("serving", priority="inference", interruptible=True), "n0", (0,))
    put(s, Job("train", priority="training"), "n0", (1,))
    before = snapshot(s)
    d = s.place(Job("serve2", priority="inference"), now=100.0, preempt=True)
    assert not d.placed and "preempting would not make room" in d.reason
    assert same(before, snapshot(s))


def test_only_inference_preempts() -> None:
    s = cluster(1, 1)
    put(s, batch("b"), "n0", (0,))
    d = s.place(Job("t", priority="training"), now=100.0, preempt=True)
    assert not d.placed and not d.evictions and "b" in s.placements


def test_job_that_cannot_fit_leaves_cluster_exactly_as_it_was() -> None:
    s = cluster(2, 2, quotas=[Quota("default", gpu_milli=10_000)])
    put(s, batch("a", gpu_milli=300), "n0", (0,))
    put(s, batch("b", gpu_milli=700), "n0", (0,), at=50.0)
    put(s, batch("c", tasks=1, gpus_per_task=2), "n1", (0, 1))
    s.submit(batch("queued"))
    before = snapshot(s)
    # three GPUs on one node exist nowhere, whatever is evicted
    d = s.place(Job("huge", gpus_per_task=3, priority="inference"), now=100.0, preempt=True)
    assert not d.placed and not d.evictions
    assert same(before, snapshot(s))
    assert s.runtime("b").started_at == 50.0  # runtimes survive the trials


def test_gangs_are_evicted_whole_and_placed_whole() -> None:
    s = cluster(2, 4)
    train = batch("train", tasks=2, gpus_per_task=4, priority="training")
    s.adopt(
        train, [TaskPlacement("n0", (0, 1, 2, 3), 1000), TaskPlacement("n1", (0, 1, 2, 3), 1000)]
    )
    d = s.place(Job("serve", tasks=2, gpus_per_task=2, priority="inference"), preempt=True)
    assert d.placed and [e.job.job_id for e in d.evictions] == ["train"]
    assert len(d.placement.tasks) == 2  # type: ignore[union-attr]
    assert s.cluster.allocated_milli == 4000  # the gang left both nodes
    assert [j.job_id for j in s.pending] == ["train"]


def test_quota_holds_and_own_jobs_can_make_quota_room() -> None:
    s = cluster(2, 2, quotas=[Quota("web", gpu_milli=1000)])
    put(s, batch("other", tenant="ml"), "n0", (0,), at=0.0)
    put(s, batch("own", tenant="web"), "n1", (0,), at=90.0)
    d = s.place(Job("serve", tenant="web", priority="inference"), now=100.0, preempt=True)
    # the cluster has free GPUs; the tenant's quota is the limit, so only its own job helps,
    # even though evicting "other" is not cheaper anyway
    assert d.placed and [e.job.job_id for e in d.evictions] == ["own"]
    assert s.quotas.usage("web").gpu_milli == 1000


def test_quota_of_the_preempting_tenant_is_never_exceeded() -> None:
    s = cluster(1, 2, quotas=[Quota("web", gpu_milli=1000)])
    put(s, batch("other", tenant="ml", gpus_per_task=2), "n0", (0, 1))
    d = s.place(Job("serve", tenant="web", priority="inference", gpus_per_task=2), preempt=True)
    assert not d.placed and "GPU quota" in d.reason and "other" in s.placements


def test_schedule_round_preempts_and_requeues_victims_first_in_their_class() -> None:
    s = cluster(1, 1)
    put(s, batch("old", priority="training"), "n0", (0,))
    s.submit(batch("waiting", priority="training"))
    s.submit(Job("serve", priority="inference"))
    decisions = s.schedule(now=10.0, preempt=True)
    by_id = {d.job_id: d for d in decisions}
    assert by_id["serve"].placed and [e.job.job_id for e in by_id["serve"].evictions] == ["old"]
    assert [j.job_id for j in s.pending] == ["old", "waiting"]
    assert s.schedule(now=11.0) and s.running_on("n0", 0) == ["serve"]


def test_schedule_without_preempt_evicts_nothing() -> None:
    s = cluster(1, 1)
    put(s, batch("b"), "n0", (0,))
    s.submit(Job("serve", priority="inference"))
    (d,) = s.schedule(now=10.0)
    assert not d.placed and "b" in s.placements


def test_mig_instance_preempted_for_mig_inference() -> None:
    gpus = (GpuSpec(0, mode=SharingMode.MIG, memory_mib=81920),)
    s = Scheduler([NodeSpec("m", 64000, 1 << 20, "H100-80GB", gpus)], "warden", clock=lambda: 0.0)
    for i in range(2):
        assert s.place(batch(f"half{i}", mig_profile="3g.40gb"), now=0.0).placed
    d = s.place(Job("serve", mig_profile="4g.40gb", priority="inference"), now=10.0, preempt=True)
    assert d.placed
    # a 4g must start at slice 0, so only the instance there had to go
    (ev,) = d.evictions
    kept = {"half0", "half1"} - {ev.job.job_id}
    assert set(s.placements) == kept | {"serve"}
    assert d.placement.tasks[0].mig.start == 0  # type: ignore[union-attr]
    assert s.placements[kept.pop()].tasks[0].mig.start == 4  # type: ignore[union-attr]


def test_runtime_and_running_on_name_problems() -> None:
    s = cluster(1, 2)
    put(s, batch("a", gpu_milli=500), "n0", (1,))
    put(s, batch("b", gpu_milli=500), "n0", (1,))
    assert s.running_on("n0", 1) == ["a", "b"] and s.running_on("n0", 0) == []
    with pytest.raises(InputError, match="no node"):
        s.running_on("zz", 0)
    with pytest.raises(InputError, match="not placed"):
        s.note_checkpoint("ghost", 1.0)
    with pytest.raises(InputError, match="not placed"):
        s.note_started("ghost", 1.0)


def test_trials_restore_jobs_whatever_order_they_came_in() -> None:
    # "declared" asked for 60,000 MiB of framebuffer when the GPU had it; "share" came later and
    # is charged its share without a check. Put back after a trial, "declared" would no longer
    # pass apply's check, so trials must restore exactly, not re-place.
    s = cluster(1, 1)
    s.place(batch("declared", gpu_milli=400, gpu_memory_mib=60_000), now=90.0)
    s.place(batch("share", gpu_milli=300), now=0.0)
    before = snapshot(s)
    d = s.place(Job("big", gpus_per_task=2, priority="inference"), now=100.0, preempt=True)
    assert not d.placed and same(before, snapshot(s))
    d = s.place(Job("serve", priority="inference"), now=100.0, preempt=True)
    assert d.placed and {e.job.job_id for e in d.evictions} == {"declared", "share"}
