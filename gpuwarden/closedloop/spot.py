"""What spot capacity saves, and what its reclaims cost: a simulation with the real scheduler.

The closed-loop simulator's workload (``closedloop.workload``: long-lived inference services and
a Poisson stream of checkpointing, interruptible training gangs) runs on a hybrid fleet, owned
(or reserved) nodes plus spot nodes, through ``Scheduler`` itself: critical work cannot land on
spot, interruptible work goes there first. Each spot node is reclaimed at a published rate:
AWS's Spot Instance Advisor buckets every instance type and region by the share of instances
interrupted in a month, "<5%", "5-10%", "10-15%", "15-20%" and ">20%"
(https://aws.amazon.com/ec2/spot/instance-advisor/). A bucket's upper edge ``p`` is a monthly
probability, so a node's reclaims are a Poisson process of rate ``-ln(1 - p)`` per 30 days.

A reclaim gives ``notice_s`` (AWS: 120 s). Jobs on the node are evicted through the preemption
path: a job whose checkpoint takes at most the notice saves its work then; one that cannot loses
what it did since its last periodic checkpoint. Either way it is queued again first in its class
and resumes elsewhere. The provider hands a replacement node back after ``replace_s``.

The same workload and fleet run with every node billed on demand and no reclaims (the baseline);
the report is the cost saved beside its trade-off: work lost, and how much later jobs finish.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from gpuwarden.closedloop.workload import WorkloadSpec, make_workload
from gpuwarden.errors import InputError
from gpuwarden.planning.events import Events
from gpuwarden.scheduler import Job, NodeSpec, Scheduler
from gpuwarden.scheduler.resources import CostClass
from gpuwarden.wording import counted

DAY_S = 86_400.0
MONTH_S = 30 * DAY_S

#: AWS Spot Instance Advisor's interruption-frequency buckets, by their upper edge (a share of
#: instances interrupted per month); ">20%" has no upper edge, so 0.30 stands in for it.
ADVISOR_BUCKETS: dict[str, float] = {
    "none": 0.0,  # no reclaims: what spot-first placement alone costs
    "<5%": 0.05,
    "5-10%": 0.10,
    "10-15%": 0.15,
    "15-20%": 0.20,
    ">20%": 0.30,
}


@dataclass(frozen=True)
class SpotScenario:
    """A hybrid fleet and its prices. ``spot_discount``: spot price below on demand (the guideline
    says spot cuts interruptible training's cost by 60-80%; AWS GPU instances show 50-70%).
    ``checkpoint_write_s``: how long a job's checkpoint takes to write when the notice comes."""

    owned_nodes: int = 16
    spot_nodes: int = 16
    gpus_per_node: int = 8
    gpu_model: str = "H100-80GB"
    days: float = 30.0
    monthly_interruption: float = 0.10
    notice_s: float = 120.0
    checkpoint_write_s: float = 60.0
    replace_s: float = 600.0
    spot_discount: float = 0.65
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)

    def __post_init__(self) -> None:
        if self.owned_nodes < 1 or self.spot_nodes < 0 or self.gpus_per_node < 1:
            raise InputError("need at least one owned node, spot_nodes >= 0, gpus_per_node >= 1")
        if not 0 <= self.monthly_interruption < 1:
            raise InputError(
                f"monthly_interruption must be in [0, 1), got {self.monthly_interruption}"
            )
        if not 0 <= self.spot_discount < 1:
            raise InputError(f"spot_discount must be in [0, 1), got {self.spot_discount}")
        if self.days <= 0 or self.notice_s < 0 or self.replace_s < 0:
            raise InputError("days must be > 0, notice_s and replace_s >= 0")

    @property
    def reclaim_rate_per_s(self) -> float:
        return -math.log1p(-self.monthly_interruption) / MONTH_S

    def nodes(self, *, spot: bool) -> list[NodeSpec]:
        """The fleet; spot nodes as owned ones when ``spot`` is False (the baseline)."""
        out = []
        for i in range(self.owned_nodes + self.spot_nodes):
            cls = CostClass.SPOT if spot and i >= self.owned_nodes else CostClass.OWNED
            name = f"{'spot' if i >= self.owned_nodes else 'own'}-{i:03d}"
            out.append(
                NodeSpec.uniform(
                    name, 256_000, 2_097_152, self.gpus_per_node, self.gpu_model, cost_class=cls
                )  # fmt: skip
            )
        return out


@dataclass(frozen=True)
class SpotResult:
    """One run. Costs are in on-demand GPU-hours (multiply by a price per GPU-hour)."""

    spot: bool
    cost_gpu_h: float
    reclaims: int
    jobs_evicted: int
    lost_gpu_h: float
    saved_at_notice: int
    done_work_gpu_h: float
    mean_completion_h: float
    mean_wait_h: float
    completed: int


_ARRIVE, _DONE, _RECLAIM, _BACK = 3, 0, 1, 2  # at one instant: finish, reclaim, return, arrive


@dataclass
class _Run:
    job_gpus: int
    work_s: float
    submitted: float
    done_s: float = 0.0
    started: float | None = None
    ckpt: float = 0.0
    gen: int = 0
    first_start: float | None = None


def simulate(scenario: SpotScenario, *, seed: int, spot: bool) -> SpotResult:
    """Run ``scenario`` once: with spot nodes and their reclaims, or (``spot`` False) the same
    fleet all on demand."""
    sc = scenario
    end = sc.days * DAY_S
    nodes = sc.nodes(spot=spot)
    n_gpus = len(nodes) * sc.gpus_per_node
    wl = make_workload(n_gpus, 0.0, end, seed=seed, spec=sc.workload)
    sched = Scheduler(nodes, policy="bestfit")
    for svc in wl.services:
        if not sched.place(svc, now=0.0).placed:
            raise InputError(f"service {svc.job_id} does not fit on the owned nodes")
    rng = np.random.default_rng([seed, 0x5B07])
    events = Events()
    push = events.push

    runs: dict[str, _Run] = {}
    for a in wl.training:
        runs[a.job.job_id] = _Run(a.job.total_gpu_milli // 1000, a.work_s, a.ts)
        push(a.ts, _ARRIVE, a.job)
    spot_names = [n.name for n in nodes if n.cost_class is CostClass.SPOT]
    rate = sc.reclaim_rate_per_s
    for name in spot_names:
        if rate > 0:
            push(float(rng.exponential(1 / rate)), _RECLAIM, name)
    spot_up_s = {name: 0.0 for name in spot_names}
    up_since = dict.fromkeys(spot_names, 0.0)
    reclaims = evicted = saved = 0
    lost_gpu_s = 0.0
    completion: list[float] = []
    waits: list[float] = []

    def start_placed(now: float) -> None:
        for d in sched.schedule(now=now):
            if not d.placed:
                continue
            r = runs[d.job_id]
            r.started = r.ckpt = now
            if r.first_start is None:
                r.first_start = now
                waits.append(now - r.submitted)
            push(now + r.work_s - r.done_s, _DONE, (d.job_id, r.gen))

    every = sc.workload.checkpoint_s
    while events:
        now, kind, payload = events.pop()
        if now > end:
            break
        if kind == _ARRIVE:
            assert isinstance(payload, Job)
            sched.submit(payload)
        elif kind == _DONE:
            assert isinstance(payload, tuple)
            job_id, gen = str(payload[0]), int(payload[1])
            r = runs[job_id]
            if gen != r.gen or r.started is None:
                continue
            sched.release(job_id)
            r.done_s, r.started = r.work_s, None
            completion.append(now - r.submitted)
        elif kind == _RECLAIM:
            name = str(payload)
            reclaims += 1
            spot_up_s[name] += now - up_since.pop(name)
            for e in sched.reclaim(name, "spot reclaim"):
                r = runs[e.job.job_id]
                assert r.started is not None
                ran = now - r.started
                last = r.started + math.floor(ran / every) * every  # periodic checkpoints
                if sc.checkpoint_write_s <= sc.notice_s:
                    saved += 1
                    r.done_s += ran  # the checkpoint at the notice keeps it all
                else:
                    r.done_s += last - r.started
                    lost_gpu_s += (now - last) * r.job_gpus
                r.started, r.gen = None, r.gen + 1
                evicted += 1
            push(now + sc.notice_s + sc.replace_s, _BACK, name)
        else:
            name = str(payload)
            sched.set_open(name, True)
            up_since[name] = now
            if rate > 0:
                push(now + float(rng.exponential(1 / rate)), _RECLAIM, name)
        start_placed(now)
    for name, since in up_since.items():
        spot_up_s[name] += end - since
    done_gpu_s = sum(min(r.done_s, r.work_s) * r.job_gpus for r in runs.values() if r.done_s)
    for r in runs.values():  # work of jobs still running at the end
        if r.started is not None:
            done_gpu_s += min(end - r.started, r.work_s - r.done_s) * r.job_gpus
    owned_gpu_h = sc.owned_nodes * sc.gpus_per_node * end / 3600
    spot_gpu_h = sum(spot_up_s.values()) * sc.gpus_per_node / 3600
    if not spot:
        spot_gpu_h = sc.spot_nodes * sc.gpus_per_node * end / 3600
    price = (1 - sc.spot_discount) if spot else 1.0
    return SpotResult(
        spot,
        owned_gpu_h + price * spot_gpu_h,
        reclaims,
        evicted,
        lost_gpu_s / 3600,
        saved,
        done_gpu_s / 3600,
        float(np.mean(completion)) / 3600 if completion else math.nan,
        float(np.mean(waits)) / 3600 if waits else math.nan,
        len(completion),
    )


@dataclass(frozen=True)
class SpotRow:
    """Spot against all on demand, over seeds: means and the seeds' spread."""

    bucket: str
    checkpoint_at_notice: bool
    cost_saved_pct: float
    spot_share_saved_pct: float
    lost_work_pct: float
    lost_gpu_h: float
    reclaims: float
    completion_delay_pct: float
    throughput_change_pct: float


def compare(scenario: SpotScenario, buckets: Iterable[str], seeds: Iterable[int]) -> list[SpotRow]:
    """For each Advisor bucket, with and without a checkpoint that fits in the notice."""
    seeds = list(seeds)
    base = {s: simulate(scenario, seed=s, spot=False) for s in seeds}
    rows = []
    for bucket in buckets:
        if bucket not in ADVISOR_BUCKETS:
            raise InputError(f"unknown bucket {bucket!r}; choose from {', '.join(ADVISOR_BUCKETS)}")
        for at_notice in (True, False) if ADVISOR_BUCKETS[bucket] else (True,):
            sc = replace(
                scenario,
                monthly_interruption=ADVISOR_BUCKETS[bucket],
                checkpoint_write_s=(scenario.notice_s / 2 if at_notice else scenario.notice_s * 10),
            )
            res = [simulate(sc, seed=s, spot=True) for s in seeds]
            b = [base[s] for s in seeds]
            spot_part = scenario.spot_nodes * scenario.gpus_per_node * scenario.days * 24
            rows.append(
                SpotRow(
                    bucket,
                    at_notice,
                    _mean(
                        100 * (1 - r.cost_gpu_h / x.cost_gpu_h) for r, x in zip(res, b, strict=True)
                    ),
                    _mean(
                        100 * (x.cost_gpu_h - r.cost_gpu_h) / spot_part
                        for r, x in zip(res, b, strict=True)
                    ),
                    _mean(100 * r.lost_gpu_h / max(r.done_work_gpu_h, 1e-9) for r in res),
                    _mean(r.lost_gpu_h for r in res),
                    _mean(r.reclaims for r in res),
                    _mean(
                        100 * (r.mean_completion_h / x.mean_completion_h - 1)
                        for r, x in zip(res, b, strict=True)
                    ),
                    _mean(
                        100 * (r.done_work_gpu_h / x.done_work_gpu_h - 1)
                        for r, x in zip(res, b, strict=True)
                    ),
                )
            )
    return rows


def _mean(values: Iterable[float]) -> float:
    v = [x for x in values if not math.isnan(x)]
    return float(np.mean(v)) if v else math.nan


def render(rows: list[SpotRow], scenario: SpotScenario, seeds: int) -> str:
    """The markdown table docs/planning.md and docs/benchmarks.md show."""
    sc = scenario
    lines = [
        f"{sc.owned_nodes} owned + {sc.spot_nodes} spot nodes x {sc.gpus_per_node} GPUs, "
        f"{sc.days:g} days, spot {100 * sc.spot_discount:.0f}% below on demand, "
        f"{sc.notice_s:.0f} s notice, replacement after {sc.replace_s:.0f} s; "
        f"means over {counted(seeds, 'seed')}",
        "",
        "| interruptions / month | checkpoint at notice | cost saved vs all on demand | "
        "saved on the spot part | reclaims | work lost | work lost % | job completion time | "
        "work done |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.bucket} | {'yes' if r.checkpoint_at_notice else 'no'} | "
            f"{r.cost_saved_pct:.1f}% | {r.spot_share_saved_pct:.1f}% | {r.reclaims:.1f} | "
            f"{r.lost_gpu_h:.1f} GPU-h | {r.lost_work_pct:.2f}% | "
            f"{_change(r.completion_delay_pct, 1)} | {_change(r.throughput_change_pct, 2)} |"
        )
    if any(r.bucket == "none" for r in rows):
        lines += ["", "none: no reclaims at all; its job completion time is what spot-first "
                  "placement alone costs (critical work never runs on spot)."]  # fmt: skip
    return "\n".join(lines)


def _change(pct: float, digits: int) -> str:
    """A signed percentage at ``digits`` decimals; one that rounds to nothing reads +0.00%, not
    -0.00%."""
    return f"{round(pct, digits) + 0.0:+.{digits}f}%"


__all__ = ["ADVISOR_BUCKETS", "SpotResult", "SpotRow", "SpotScenario", "compare", "render",
           "simulate"]  # fmt: skip
