"""Placement policies: the fragmentation measures against a direct reading of their
definitions, and each policy's characteristic choice."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import POLICIES, Job, NodeSpec, Scheduler, TaskMix, make_policy
from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.policies._frag import Fragmentation, NodeStats, StrandedCapacity
from gpuwarden.scheduler.policies.mix import TaskType

MIX_JOBS = [
    Job("s810", gpu_milli=810, cpu_milli=3000, memory_mib=4000),
    Job("s810b", gpu_milli=810, cpu_milli=3000, memory_mib=4000),
    Job("s470", gpu_milli=470, cpu_milli=8000, memory_mib=30000),
    Job("s160", gpu_milli=160, cpu_milli=2000, memory_mib=2000),
    Job("w1", gpus_per_task=1, cpu_milli=11000, memory_mib=48000),
    Job("w1b", gpus_per_task=1, cpu_milli=11000, memory_mib=48000),
    Job("w2", gpus_per_task=2, cpu_milli=16000, memory_mib=64000),
    Job("t4", gpus_per_task=1, cpu_milli=4000, gpu_models=frozenset({"T4"})),
    Job("cpu", gpus_per_task=0, cpu_milli=12000, memory_mib=60000),
]


def random_cluster(seed: int) -> ClusterState:
    rng = np.random.default_rng(seed)
    nodes = [
        NodeSpec.uniform(f"n{i}", int(rng.integers(8, 100)) * 1000, 262144, int(g), m)
        for i, (g, m) in enumerate(
            zip(rng.choice([1, 2, 4, 8], 12), rng.choice(["T4", "G2"], 12), strict=True)
        )
    ]
    c = ClusterState(nodes)
    for n in range(c.n_nodes):
        for g in range(int(c.n_gpus[n])):
            take = int(rng.choice([0, 0, 160, 470, 810, 1000, 530]))
            if take and c.cpu_free[n] >= 2000:
                job = Job(f"x{n}-{g}", gpu_milli=take, cpu_milli=2000, memory_mib=1000)
                c.apply(job, n, (g,), None)
    return c


def brute_frag(c: ClusterState, n: int, types: list[TaskType], memory: bool) -> float:
    free = [int(f) for f in c.free[n, : c.n_gpus[n]]]
    total, frag = sum(free), 0.0
    for t in types:
        if not t.gpus:
            frag += t.weight * total
            continue
        model_ok = not t.models or c.specs[n].gpu_model in t.models
        ok = model_ok and c.cpu_free[n] >= t.cpu_milli
        ok = ok and (not memory or c.mem_free[n] >= t.memory_mib)
        ok = ok and sum(f >= t.gpu_milli for f in free) >= t.gpus
        frag += t.weight * (sum(f for f in free if f < t.gpu_milli) if ok else total)
    return frag


def brute_stranded(c: ClusterState, n: int, types: list[TaskType]) -> float:
    free = [int(f) for f in c.free[n, : c.n_gpus[n]]]
    total, usable = sum(free), 0.0
    for t in types:
        if not t.gpus or (t.models and c.specs[n].gpu_model not in t.models):
            continue
        k = sum(f // t.gpu_milli for f in free) // t.gpus
        if t.cpu_milli:
            k = min(k, int(c.cpu_free[n]) // t.cpu_milli)
        if t.memory_mib:
            k = min(k, int(c.mem_free[n] // t.memory_mib))
        usable += t.weight * min(total, k * t.gpus * t.gpu_milli)
    return total - usable


@pytest.mark.parametrize("seed", range(5))
def test_measures_match_their_definitions(seed: int) -> None:
    c = random_cluster(seed)
    mix = TaskMix.from_jobs(MIX_JOBS, coverage=1.0)
    types = mix.types()
    assert sum(t.weight for t in types) == pytest.approx(1.0)
    for memory in (False, True):
        frag = Fragmentation(NodeStats(c, mix), with_memory=memory)
        want = [brute_frag(c, n, types, memory) for n in range(c.n_nodes)]
        np.testing.assert_allclose(frag.value, want)
    stranded = StrandedCapacity(NodeStats(c, mix), with_memory=True)
    np.testing.assert_allclose(
        stranded.value, [brute_stranded(c, n, types) for n in range(c.n_nodes)]
    )


def test_candidate_increase_matches_a_real_placement() -> None:
    from gpuwarden.scheduler.policies.fgd import candidates

    c = random_cluster(7)
    mix = TaskMix.from_jobs(MIX_JOBS, coverage=1.0)
    stats = NodeStats(c, mix)
    for measure in (Fragmentation(stats), StrandedCapacity(stats, with_memory=True)):
        for job in (Job("s", gpu_milli=320, cpu_milli=1000), Job("w", gpus_per_task=1)):
            feasible = c.feasible(job)
            nodes, gpus = candidates(c, job, feasible)
            deltas = measure.increase(job, nodes, gpus)
            for node, gpu, delta in zip(nodes, gpus, deltas, strict=True):
                before = measure.value[node]
                alloc = (
                    c.apply(job, int(node), *c.default_gpus(job, int(node)))
                    if gpu < 0
                    else c.apply(job, int(node), (int(gpu),), None)
                )
                measure.refresh()
                assert measure.value[node] - before == pytest.approx(delta)
                c.undo(alloc)
                measure.refresh()


def small_share_cluster(policy: str) -> Scheduler:
    mix = TaskMix.from_jobs(MIX_JOBS)
    s = Scheduler(
        [
            NodeSpec.uniform("a", 64000, 262144, 2, "G2"),
            NodeSpec.uniform("b", 64000, 262144, 2, "G2"),
        ],
        policy,
        mix=mix,
    )
    s.place(Job("big", gpu_milli=810, cpu_milli=1000))
    return s


@pytest.mark.parametrize("policy", ["fgd", "warden"])
def test_fragmentation_aware_policies_fill_the_sliver(policy: str) -> None:
    s = small_share_cluster(policy)
    big = s.placements["big"].tasks[0]
    small = s.place(Job("small", gpu_milli=160, cpu_milli=1000)).placement
    assert small is not None
    assert (small.tasks[0].node, small.tasks[0].gpus) == (big.node, big.gpus)


def test_gpupacking_prefers_a_used_gpu_and_bestfit_the_fullest_node() -> None:
    s = small_share_cluster("gpupacking")
    big = s.placements["big"].tasks[0]
    p = s.place(Job("p", gpu_milli=100)).placement
    assert p is not None and (p.tasks[0].node, p.tasks[0].gpus) == (big.node, big.gpus)
    b = Scheduler([NodeSpec.uniform(n, 64000, 262144, 4, "T4") for n in "ab"], "bestfit")
    b.place(Job("first", gpus_per_task=2, cpu_milli=32000))
    second = b.place(Job("second", gpus_per_task=1)).placement
    assert second is not None
    assert second.tasks[0].node == b.placements["first"].tasks[0].node


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_policies_are_deterministic_per_seed(policy: str) -> None:
    def run(seed: int) -> list[tuple[str, tuple[int, ...]]]:
        s = Scheduler(
            [NodeSpec.uniform(f"n{i}", 32000, 131072, 4, "T4") for i in range(6)], policy, seed=seed
        )
        out = []
        for i, job in enumerate(MIX_JOBS * 2):
            d = s.place(
                Job(
                    f"{job.job_id}-{i}",
                    gpus_per_task=job.gpus_per_task,
                    gpu_milli=job.gpu_milli,
                    cpu_milli=job.cpu_milli,
                )
            )
            if d.placement:
                out.append((d.placement.tasks[0].node, d.placement.tasks[0].gpus))
        return out

    assert run(1) == run(1)


def test_learnt_mix_and_bad_names() -> None:
    mix = TaskMix(coverage=0.5)
    for job in MIX_JOBS:
        mix.observe(job)
    assert mix.observed == len(MIX_JOBS)
    top = mix.types()  # the two shapes seen twice, then the first of the rest, renormalised
    assert [(t.gpu_milli, t.gpus, t.weight) for t in top] == [
        (810, 1, 0.4),
        (1000, 1, 0.4),
        (160, 1, 0.2),
    ]
    with pytest.raises(InputError, match="unknown policy"):
        make_policy("tetris")
    with pytest.raises(InputError, match="coverage"):
        TaskMix(coverage=0)
