"""The event loop: one arm over one scored fleet and its workload, in simulated time.

Events in time order (ties: repairs, departures, failures, arrivals, then the hourly scoring):

    failure    the GPU leaves the scheduler at once; an inference replica on it is *interrupted*
               (down until placed again, plus ``restart_s``); a training job loses the work since
               its last checkpoint and queues again
    repair     a new board fills the slot (the simulator's repair time), health ok
    scoring    the arm's verdicts for the hour go through its decision path; inference the
               tagger moves off a flagged GPU is *preempted* (a graceful move: down only while no
               ok GPU is free), training on a GPU flagged at-risk checkpoints and stays
    arrival / departure of training jobs; every change is followed by a scheduling round

Counts cover ``[eval_start, eval_end]``; the loop starts a few days earlier so the cluster is
already busy. Capacity withheld is GPU-hours, sampled at each scoring hour, of GPUs the
scheduler keeps from critical work (at-risk or unhealthy) while they have not failed.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from gpuwarden.closedloop.arms import ArmDriver, HealthChange
from gpuwarden.closedloop.fleet import ScoredFleet, SlotFailure
from gpuwarden.closedloop.workload import Workload, cluster_nodes
from gpuwarden.health import GpuState
from gpuwarden.scheduler import Eviction, Job, PriorityClass, Scheduler
from gpuwarden.telemetry import GpuId

_REPAIR, _DONE, _FAIL, _ARRIVE, _SCORE = range(5)
HARD_REASON = "hard signal in telemetry (double-bit error, remap failure, GPU lost or fatal Xid)"


@dataclass
class _Run:
    """One job's progress in one arm (mutable: the loop's own bookkeeping)."""

    job: Job
    work_s: float  # running time it needs; inf for a service
    done_s: float = 0.0  # work saved by checkpoints while not running
    started: float | None = None
    ckpt: float = 0.0  # last checkpoint taken outside the periodic schedule
    gen: int = 0  # departures of an older start are stale
    down_since: float | None = None
    down_extra_s: float = 0.0
    on: list[tuple[str, int]] = field(default_factory=list)  # GPUs it runs on now
    gpus: int = field(init=False)

    def __post_init__(self) -> None:
        self.gpus = self.job.tasks * self.job.gpus_per_task

    @property
    def critical(self) -> bool:
        return self.job.priority is PriorityClass.INFERENCE

    def last_checkpoint(self, now: float, every_s: float) -> float:
        assert self.started is not None
        periodic = self.started + math.floor((now - self.started) / every_s) * every_s
        return max(periodic, self.ckpt)


@dataclass(frozen=True)
class ArmResult:
    """One arm on one seed; GPU-hours within the evaluated period."""

    arm: str
    seed: int
    sudden_fraction: float
    failures: int
    failures_with_precursor: int
    interruptions: int
    interruptions_with_precursor: int
    interruptions_sudden: int
    inference_downtime_gpu_h: float
    training_lost_gpu_h: float
    withheld_gpu_h: float
    fleet_gpu_h: float
    preemptions_inference: int
    preemptions_training: int
    busy_share: float
    breaker_refusals: int
    withheld_per_hour: np.ndarray = field(repr=False, compare=False)

    @property
    def withheld_share(self) -> float:
        return self.withheld_gpu_h / self.fleet_gpu_h if self.fleet_gpu_h else math.nan


class _Loop:
    def __init__(self, fleet: ScoredFleet, workload: Workload, arm: str, start_ts: float):
        self.f, self.w = fleet, workload
        self.now = start_ts
        self.sched = Scheduler(cluster_nodes(fleet.nodes), policy="bestfit")
        self.arm = ArmDriver(
            arm,
            self.sched,
            fleet.slots,
            life_index={str(k): i for i, k in enumerate(fleet.life_key)},
            clock=lambda: self.now,
            enter_at=fleet.threshold,
        )
        self.runs: dict[str, _Run] = {}
        self.on_gpu: dict[tuple[str, int], set[str]] = {}
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.n = dict.fromkeys(
            ("int", "int_pre", "int_sudden", "pre_inf", "pre_train", "fail", "fail_pre"), 0
        )
        self.down_gpu_s = self.lost_gpu_s = 0.0
        self.withheld: list[int] = []
        self.busy: list[float] = []

    # -- bookkeeping -----------------------------------------------------------------------
    def push(self, ts: float, kind: int, payload: object) -> None:
        heapq.heappush(self.heap, (ts, kind, self.seq, payload))
        self.seq += 1

    def counting(self) -> bool:
        return self.f.eval_start_ts <= self.now <= self.f.eval_end_ts

    def _clip(self, a: float, b: float) -> float:
        return max(0.0, min(b, self.f.eval_end_ts) - max(a, self.f.eval_start_ts))

    def start(self, job_id: str) -> None:
        run = self.runs[job_id]
        run.started = run.ckpt = self.now
        run.on = [(t.node, g) for t in self.sched.placements[job_id].tasks for g in t.gpus]
        for gpu in run.on:
            self.on_gpu.setdefault(gpu, set()).add(job_id)
        if run.down_since is not None:
            back = self.now + run.down_extra_s
            self.down_gpu_s += run.gpus * self._clip(run.down_since, back)
            run.down_since = None
        if math.isfinite(run.work_s):
            self.push(self.now + run.work_s - run.done_s, _DONE, (job_id, run.gen))

    def stop(self, job_id: str) -> _Run:
        run = self.runs[job_id]
        for gpu in run.on:
            self.on_gpu[gpu].discard(job_id)
        run.on = []
        run.started = None
        run.gen += 1
        return run

    def schedule(self) -> None:
        """A round of ``Scheduler.place`` over the queue in its order (what ``schedule`` does),
        skipping jobs that cannot fit: those asking for more GPU than is free anywhere, and
        those of the same shape as one that just failed on the same cluster state (placement
        is deterministic, so asking again would only cost the scheduler its explanation)."""
        c = self.sched.cluster
        free = c.capacity_milli - c.allocated_milli - 1000 * int(self.arm.failed.sum())
        failed: set[tuple[object, ...]] = set()  # shapes refused since the last placement
        for job in self.sched.pending:
            if job.total_gpu_milli > free:
                continue
            shape = job.shape
            if shape in failed:
                continue
            if self.sched.place(job).placed:
                self.start(job.job_id)
                free -= job.total_gpu_milli
                failed.clear()
            else:
                failed.add(shape)

    # -- what happens to work --------------------------------------------------------------
    def interrupted(self, e: Eviction, failure: SlotFailure) -> None:
        run = self.runs[e.job.job_id]
        if run.started is None:
            return
        if run.critical:
            if self.counting():
                self.n["int"] += 1
                self.n["int_pre" if failure.with_precursor else "int_sudden"] += 1
            run.down_since, run.down_extra_s = self.now, self.w.spec.restart_s
        else:
            saved = run.last_checkpoint(self.now, self.w.spec.checkpoint_s)
            if self.counting():
                self.lost_gpu_s += run.gpus * (self.now - saved)
            run.done_s += saved - run.started
        self.stop(e.job.job_id)

    def moved(self, changes: list[HealthChange]) -> None:
        for ch in changes:
            for e in ch.evictions:
                run = self.runs[e.job.job_id]
                if run.started is None:
                    continue
                if run.critical:
                    self.n["pre_inf"] += self.counting()
                    run.down_since, run.down_extra_s = self.now, 0.0
                else:  # told to checkpoint and leave: nothing lost
                    self.n["pre_train"] += self.counting()
                    run.done_s += self.now - run.started
                self.stop(e.job.job_id)
            if ch.health == GpuState.AT_RISK:  # training stays, but saves its work now
                for job_id in self.on_gpu.get((ch.hostname, ch.index), ()):
                    self.runs[job_id].ckpt = self.now

    # -- events ----------------------------------------------------------------------------
    def fail(self, f: SlotFailure) -> None:
        if self.counting():
            self.n["fail"] += 1
            self.n["fail_pre"] += f.with_precursor
        host, index = self.f.slots[f.slot]
        for e in self.arm.fail(f.slot, GpuId(host, index, f.uuid), self.now, f.kind):
            self.interrupted(e, f)
        self.moved(self.arm.apply())
        self.push(f.ts + max(f.repair_s, 600.0), _REPAIR, f.slot)

    def score(self, t: int) -> None:
        f, arm = self.f, self.arm
        lo, hi = int(f.row_ptr[t]), int(f.row_ptr[t + 1])
        lives = f.row_life[lo:hi]
        risk = arm.risk_of(f.row_risk[lo:hi], f.row_rule[lo:hi])
        hard = f.row_hard[lo:hi]
        rule = arm.rule_of(f.row_link[lo:hi])
        for i in arm.candidates(lives, risk, hard, rule):
            host, index = f.slots[int(f.life_slot[lives[i]])]
            why = HARD_REASON if hard[i] and arm.name != "none" else None
            key = str(f.life_key[lives[i]])
            arm.assess(GpuId(host, index, key), self.now, float(risk[i]), why, str(rule[i]))
        arm.tick(self.now)
        self.moved(arm.apply())

    def run(self) -> None:
        for job in self.w.services:
            self.runs[job.job_id] = _Run(job, math.inf)
            self.push(self.now, _ARRIVE, job)
        for a in self.w.training:
            self.runs[a.job.job_id] = _Run(a.job, a.work_s)
            self.push(a.ts, _ARRIVE, a.job)
        for fl in self.f.failures:
            self.push(fl.ts, _FAIL, fl)
        for t, at in enumerate(self.f.at):
            self.push(float(at), _SCORE, t)
        end = self.f.eval_end_ts
        while self.heap and self.heap[0][0] <= end:
            ts, kind, _, payload = heapq.heappop(self.heap)
            self.now = max(self.now, ts)
            if kind == _ARRIVE:
                assert isinstance(payload, Job)
                self.sched.submit(payload)
            elif kind == _DONE:
                job_id, gen = cast(tuple[str, int], payload)
                if self.runs[job_id].gen != gen:
                    continue
                self.stop(job_id)
                self.sched.release(job_id)
            elif kind == _FAIL:
                assert isinstance(payload, SlotFailure)
                self.fail(payload)
            elif kind == _REPAIR:
                self.arm.repair(cast(int, payload), self.now)
                self.moved(self.arm.apply())
            else:
                self.score(cast(int, payload))
            if kind != _SCORE or self.sched.pending:
                self.schedule()
            if kind == _SCORE:
                self.withheld.append(self.arm.withheld())
                self.busy.append(self.sched.allocation_ratio())
        self.now = end
        for run in self.runs.values():  # still waiting for a GPU when the period ends
            if run.down_since is not None:
                self.down_gpu_s += run.gpus * self._clip(run.down_since, end)


def run_arm(fleet: ScoredFleet, workload: Workload, arm: str, *, start_ts: float) -> ArmResult:
    """Replay ``arm`` from ``start_ts`` (workload and failures before the evaluated period
    included, uncounted) to the end of ``fleet``'s evaluated period."""
    loop = _Loop(fleet, workload, arm, start_ts)
    loop.run()
    n = loop.n
    hours = len(fleet.at)
    withheld = np.asarray(loop.withheld, dtype=np.int32)
    return ArmResult(
        arm,
        fleet.spec.seed,
        fleet.spec.sudden_fraction,
        n["fail"],
        n["fail_pre"],
        n["int"],
        n["int_pre"],
        n["int_sudden"],
        loop.down_gpu_s / 3600.0,
        loop.lost_gpu_s / 3600.0,
        float(withheld.sum()),
        float(fleet.n_slots * hours),
        n["pre_inf"],
        n["pre_train"],
        float(np.mean(loop.busy)) if loop.busy else math.nan,
        loop.arm.refusals,
        withheld,
    )
