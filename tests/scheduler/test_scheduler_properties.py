"""Property tests: whatever jobs arrive, leave, and whatever health changes happen, no GPU is
over-committed, MIG layouts stay legal, quotas hold, gangs are all-or-nothing, and at-risk or
unhealthy GPUs hold no work they may not; preemption evicts only interruptible training, batch
and dev work, for inference jobs only, and a preemption that does not make room changes nothing."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwarden.errors import InputError
from gpuwarden.scheduler import (
    POLICIES,
    PREEMPTIBLE,
    Candidate,
    Decision,
    GpuSpec,
    Health,
    Job,
    NodeSpec,
    PriorityClass,
    Quota,
    Scheduler,
    SharingMode,
    cheapest_victims,
    mig,
)

MODELS = ["A100-80GB", "H100-80GB", "T4"]
TENANTS = ["a", "b", "c"]
MIG_80GB = ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]


@st.composite
def nodes(draw: st.DrawFn) -> list[NodeSpec]:
    out = []
    for i in range(draw(st.integers(1, 4))):
        model = draw(st.sampled_from(MODELS))
        modes = [SharingMode.WHOLE, SharingMode.FRACTIONAL]
        if mig.mig_capable(model):
            modes.append(SharingMode.MIG)
        gpus = tuple(
            GpuSpec(
                g,
                health=draw(st.sampled_from(list(Health))),
                mode=draw(st.sampled_from(modes)),
                memory_mib=16384 if model == "T4" else 81920,
            )  # fmt: skip
            for g in range(draw(st.integers(1, 4)))
        )
        cpu = draw(st.integers(4, 64)) * 1000
        out.append(NodeSpec(f"n{i}", cpu, draw(st.integers(8, 256)) * 1024, model, gpus))
    return out


@st.composite
def quotas(draw: st.DrawFn) -> list[Quota]:
    out = []
    for tenant in TENANTS:
        if draw(st.booleans()):
            gpu = draw(st.none() | st.integers(0, 6).map(lambda x: x * 500))
            borrow = draw(st.integers(0, 4)) * 500 if gpu is not None else 0
            mem = draw(st.none() | st.integers(1, 8).map(lambda x: x * 20000))
            out.append(Quota(tenant, gpu_milli=gpu, gpu_memory_mib=mem, borrow_gpu_milli=borrow))
    return out


@st.composite
def jobs(draw: st.DrawFn, job_id: str, priority: PriorityClass | None = None) -> Job:
    kind = draw(st.sampled_from(["cpu", "whole", "fractional", "mig"]))
    common = dict(
        tenant=draw(st.sampled_from(TENANTS)),
        priority=priority or draw(st.sampled_from(list(PriorityClass))),
        interruptible=draw(st.sampled_from([True, True, False])),
        tasks=draw(st.integers(1, 3)),
        cpu_milli=draw(st.integers(0, 16)) * 1000,
        memory_mib=draw(st.integers(0, 32)) * 1024,
        gpu_memory_mib=draw(st.none() | st.sampled_from([4096, 20000, 60000])),
    )
    if kind == "cpu":
        common["gpu_memory_mib"] = None
        return Job(job_id, gpus_per_task=0, **common)  # type: ignore[arg-type]
    if kind == "whole":
        return Job(job_id, gpus_per_task=draw(st.integers(1, 3)), **common)  # type: ignore[arg-type]
    if kind == "fractional":
        return Job(job_id, gpu_milli=draw(st.integers(1, 19)) * 50, **common)  # type: ignore[arg-type]
    return Job(job_id, mig_profile=draw(st.sampled_from(MIG_80GB)), **common)  # type: ignore[arg-type]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[NodeSpec], list[Quota], str, list[tuple]]:
    cluster = draw(nodes())
    ops: list[tuple] = []
    for i in range(draw(st.integers(1, 25))):
        op = draw(
            st.sampled_from(
                ["place", "place", "submit", "schedule", "release", "health", "preempt", "ckpt"]
            )
        )
        if op in ("place", "submit", "preempt"):
            inference = PriorityClass.INFERENCE if op == "preempt" else None
            ops.append((op, draw(jobs(f"j{i}", inference))))
        elif op in ("release", "ckpt"):
            ops.append((op, draw(st.integers(0, 30))))
        elif op == "health":
            n = draw(st.integers(0, len(cluster) - 1))
            g = draw(st.integers(0, len(cluster[n].gpus) - 1))
            ops.append((op, cluster[n].name, g, draw(st.sampled_from(list(Health)))))
        else:
            ops.append((op, draw(st.booleans())))
    return cluster, draw(quotas()), draw(st.sampled_from(sorted(POLICIES))), ops


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold_after_every_operation(scenario: tuple) -> None:
    cluster, quota_list, policy, ops = scenario
    clock = iter(range(0, 10_000, 7))
    s = Scheduler(cluster, policy, quota_list, seed=3, clock=lambda: float(next(clock)))
    known: list[str] = []
    for op in ops:
        placed_before = dict(s.placements)
        if op[0] == "place":
            d = s.place(op[1])
            assert d.placed or d.reason
            assert not d.evictions
            known.append(op[1].job_id)
        elif op[0] == "preempt":
            before = snapshot(s)
            d = s.place(op[1], preempt=True)
            check_preemption(d, op[1], placed_before)
            if not d.placed:
                assert snapshot(s) == before  # nothing changed
            known.append(op[1].job_id)
        elif op[0] == "submit":
            s.submit(op[1])
            known.append(op[1].job_id)
        elif op[0] == "schedule":
            pending = {j.job_id: j for j in s.pending}
            for d in s.schedule(preempt=op[1]):
                check_preemption(d, pending[d.job_id], placed_before)
                assert op[1] or not d.evictions
        elif op[0] in ("release", "ckpt") and known:
            job_id = known[op[1] % len(known)]
            try:
                if op[0] == "release":
                    s.release(job_id)
                else:
                    s.note_checkpoint(job_id, s.runtime(job_id).started_at + 1.0)
            except InputError:
                pass  # already released, or never placed
        elif op[0] == "health":
            s.set_health(op[1], op[2], op[3])
        check(s)


def check_preemption(d: Decision, job: Job, placed_before: dict) -> None:
    """Only a placed inference job evicts, and only interruptible lower-class work that ran."""
    if not d.evictions:
        return
    assert d.placed and job.priority is PriorityClass.INFERENCE
    for e in d.evictions:
        assert e.job.job_id in placed_before
        assert e.job.interruptible and e.job.priority in PREEMPTIBLE


def snapshot(s: Scheduler) -> tuple:
    c = s.cluster
    arrays = (c.free, c.cpu_free, c.mem_free, c.mig_mask, c.nonint, c.tasks_on)
    return (
        tuple(np.asarray(a).tobytes() for a in arrays),
        tuple(sorted((k, v.tasks) for k, v in s.placements.items())),
        tuple(j.job_id for j in s.pending),
        tuple((t, s.quotas.usage(t)) for t in TENANTS),
    )


def check(s: Scheduler) -> None:
    c = s.cluster
    shares: dict[tuple[int, int], int] = defaultdict(int)
    instances: dict[tuple[int, int], list[mig.MigInstance]] = defaultdict(list)
    cpu: dict[int, int] = defaultdict(int)
    mem: dict[int, int] = defaultdict(int)
    milli_by_tenant: dict[str, int] = defaultdict(int)
    gmem_by_tenant: dict[str, float] = defaultdict(float)
    for job_id, p in s.placements.items():
        job = p.job
        assert len(p.tasks) == job.tasks  # a gang is placed whole or not at all
        assert job_id not in {j.job_id for j in s.pending}
        if p.borrowed:
            assert job.interruptible
        milli_by_tenant[job.tenant] += job.total_gpu_milli
        gmem_by_tenant[job.tenant] += p.gpu_memory_mib
        for t in p.tasks:
            n = c.index[t.node]
            want = {"cpu": 0, "mig": 1}.get(job.kind, job.gpus_per_task)
            assert len(t.gpus) == len(set(t.gpus)) == want
            cpu[n] += job.cpu_milli
            mem[n] += job.memory_mib
            for g in t.gpus:
                health = list(Health)[int(c.health[n, g])]
                assert health is not Health.UNHEALTHY
                assert health is Health.OK or job.interruptible
                if t.mig is not None:
                    instances[(n, g)].append(t.mig)
                else:
                    shares[(n, g)] += t.gpu_milli
    allocated = 0
    for n in range(c.n_nodes):
        assert 0 <= cpu[n] == c.cpu_cap[n] - c.cpu_free[n] <= c.cpu_cap[n]
        assert 0 <= mem[n] == c.mem_cap[n] - c.mem_free[n] <= c.mem_cap[n]
        for g in range(int(c.n_gpus[n])):
            if instances[(n, g)]:
                assert shares[(n, g)] == 0
                mig.validate_layout(c.specs[n].gpu_model, instances[(n, g)])
                compute = sum(
                    mig.profile(c.specs[n].gpu_model, i.profile).compute_slices
                    for i in instances[(n, g)]
                )
                assert c.free[n, g] == 1000 - round(1000 * compute / 7)
            else:
                assert shares[(n, g)] <= 1000  # no GPU over-committed
                assert c.free[n, g] == 1000 - shares[(n, g)]
            allocated += 1000 - int(c.free[n, g])
    assert allocated == c.allocated_milli
    for tenant in TENANTS:
        usage = s.quotas.usage(tenant)
        assert usage.gpu_milli == milli_by_tenant[tenant]
        q = s.quotas.quota(tenant)
        if q is None:
            continue
        if q.gpu_milli is not None:
            assert usage.gpu_milli <= q.gpu_milli + q.borrow_gpu_milli
        if q.gpu_memory_mib is not None:
            assert usage.gpu_memory_mib <= q.gpu_memory_mib + 1e-6


@st.composite
def busy_clusters(draw: st.DrawFn) -> tuple[list[NodeSpec], list[Job], list[Job]]:
    """Small clusters filled with lower-class work, then inference jobs that want room."""
    cluster = []
    for i in range(draw(st.integers(1, 3))):
        modes = draw(st.lists(st.sampled_from(list(SharingMode)), min_size=2, max_size=4))
        gpus = tuple(GpuSpec(g, mode=m, memory_mib=81920) for g, m in enumerate(modes))
        cluster.append(NodeSpec(f"n{i}", 64000, 512 * 1024, "H100-80GB", gpus))
    lower = [p for p in PriorityClass if p is not PriorityClass.INFERENCE]
    fill = [
        draw(jobs(f"f{i}", draw(st.sampled_from(lower)))) for i in range(draw(st.integers(1, 12)))
    ]
    wanted = [
        draw(jobs(f"inf{i}", PriorityClass.INFERENCE)) for i in range(draw(st.integers(1, 4)))
    ]
    return cluster, fill, wanted


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_clusters(), st.randoms(use_true_random=False))
def test_preemption_makes_room_without_breaking_rules(scenario: tuple, rnd) -> None:
    cluster, fill, wanted = scenario
    s = Scheduler(cluster, "warden", seed=1, clock=lambda: 0.0)
    for t, job in enumerate(fill):
        s.place(job, now=float(t))
    for job in fill:
        if job.job_id in s.placements and rnd.random() < 0.3:
            s.note_checkpoint(job.job_id, float(rnd.randint(0, 20)))
    for job in wanted:
        placed_before = dict(s.placements)
        before = snapshot(s)
        d = s.place(job, now=100.0, preempt=True)
        check_preemption(d, job, placed_before)
        if not d.placed:
            assert snapshot(s) == before
        for e in d.evictions:
            assert e.job.job_id in {j.job_id for j in s.pending}
            assert e.job.job_id not in s.placements
        check(s)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(1, 3)), min_size=1, max_size=7),
    st.lists(st.sets(st.integers(0, 6), min_size=1, max_size=3), min_size=1, max_size=4),
)
def test_victim_search_finds_the_cheapest_set(costs: list, enough: list) -> None:
    """Against brute force: fits when the victims include any one of the ``enough`` sets."""
    cands = [Candidate(f"v{i}", 1000.0 * c, n) for i, (c, n) in enumerate(costs)]
    sufficient = [{f"v{i}" for i in e if i < len(cands)} for e in enough]
    sufficient = [e for e in sufficient if e]

    def fits(ids: Sequence[str]) -> bool:
        gone = set(ids)
        return any(e <= gone for e in sufficient)

    got = cheapest_victims(cands, fits)
    if not sufficient:
        assert got is None
        return
    by_id = {c.job_id: c for c in cands}

    def key(ids: Iterable[str]) -> tuple[float, int, int]:
        chosen = [by_id[i] for i in ids]
        return (sum(c.cost_milli_s for c in chosen), sum(c.nodes for c in chosen), len(chosen))

    # any set that fits holds one of the sufficient sets, which costs no more
    assert got is not None and fits(got.job_ids)
    assert key(got.job_ids) == min(key(e) for e in sufficient)
