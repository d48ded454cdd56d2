"""Property tests: whatever jobs arrive, leave, and whatever health changes happen, no GPU is
over-committed, MIG layouts stay legal, quotas hold, gangs are all-or-nothing, and at-risk or
unhealthy GPUs hold no work they may not."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwarden.errors import InputError
from gpuwarden.scheduler import (
    POLICIES,
    GpuSpec,
    Health,
    Job,
    NodeSpec,
    Quota,
    Scheduler,
    SharingMode,
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
def jobs(draw: st.DrawFn, job_id: str) -> Job:
    kind = draw(st.sampled_from(["cpu", "whole", "fractional", "mig"]))
    common = dict(
        tenant=draw(st.sampled_from(TENANTS)),
        interruptible=draw(st.booleans()),
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
        op = draw(st.sampled_from(["place", "place", "submit", "schedule", "release", "health"]))
        if op in ("place", "submit"):
            ops.append((op, draw(jobs(f"j{i}"))))
        elif op == "release":
            ops.append((op, draw(st.integers(0, 30))))
        elif op == "health":
            n = draw(st.integers(0, len(cluster) - 1))
            g = draw(st.integers(0, len(cluster[n].gpus) - 1))
            ops.append((op, cluster[n].name, g, draw(st.sampled_from(list(Health)))))
        else:
            ops.append((op,))
    return cluster, draw(quotas()), draw(st.sampled_from(sorted(POLICIES))), ops


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold_after_every_operation(scenario: tuple) -> None:
    cluster, quota_list, policy, ops = scenario
    s = Scheduler(cluster, policy, quota_list, seed=3)
    known: list[str] = []
    for op in ops:
        if op[0] == "place":
            d = s.place(op[1])
            assert d.placed or d.reason
            known.append(op[1].job_id)
        elif op[0] == "submit":
            s.submit(op[1])
            known.append(op[1].job_id)
        elif op[0] == "schedule":
            s.schedule()
        elif op[0] == "release" and known:
            job_id = known[op[1] % len(known)]
            try:
                s.release(job_id)
            except InputError:
                pass  # already released, or never placed
        elif op[0] == "health":
            s.set_health(op[1], op[2], op[3])
        check(s)


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
