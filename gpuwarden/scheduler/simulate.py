"""Replay a trace through the scheduler without launching anything.

Events (arrivals, and departures when a job has a duration) are processed in time order; each
arrival is placed at once or, with ``retry_pending``, queued and retried whenever a departure
frees capacity. The same ``Scheduler.place`` the service uses makes every decision, so a replay
measures the real placement code: benchmarks (bench/bench_openb.py) and, later, closed-loop runs
with failures injected between events.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.scheduler import Scheduler


@dataclass(frozen=True)
class Arrival:
    """A job arriving at ``time_s``; it leaves ``duration_s`` after it starts (never if None)."""

    time_s: float
    job: Job
    duration_s: float | None = None


@dataclass(frozen=True)
class ReplayResult:
    """Per arrival, in time order: placed or not, GPU thousandths arrived so far, and allocated
    right after it. ``decision_s``: seconds (by the replay's clock) spent inside placement
    decisions; ``decisions``: placement attempts, placed or not; ``started_s``: per arrival,
    the trace time it started (NaN: never), so ``started_s - arrival time`` is its queue wait."""

    placed: np.ndarray
    arrived_milli: np.ndarray
    allocated_milli: np.ndarray
    capacity_milli: int
    decision_s: float
    decisions: int
    started_s: np.ndarray = field(default_factory=lambda: np.empty(0))

    def ratio_at(self, demand: float) -> float:
        """Allocation ratio right after the arrival that brought requested GPUs to ``demand`` x
        capacity (the last arrival if demand never got there)."""
        if self.placed.size == 0:
            return 0.0
        i = int(np.searchsorted(self.arrived_milli, demand * self.capacity_milli - 1e-9))
        i = min(i, self.placed.size - 1)
        return float(self.allocated_milli[i]) / self.capacity_milli

    @property
    def decisions_per_s(self) -> float:
        return self.decisions / self.decision_s if self.decision_s > 0 else float("inf")


_DEPART, _ARRIVE = 0, 1  # departures at the same instant go first: they free capacity


def replay(
    scheduler: Scheduler,
    arrivals: Iterable[Arrival],
    *,
    retry_pending: bool = False,
    clock: Callable[[], float] = time.perf_counter,
) -> ReplayResult:
    """Feed ``arrivals`` to ``scheduler`` in time order (ties keep their given order).

    ``allocated_milli`` is read right after each arrival's decision; with ``retry_pending`` a
    queued job placed later flips its ``placed`` entry then."""
    heap: list[tuple[float, int, int, Job]] = []
    durations: dict[str, float | None] = {}
    for seq, a in enumerate(arrivals):
        if a.duration_s is not None and a.duration_s < 0:
            raise InputError(f"job {a.job.job_id}: negative duration")
        heapq.heappush(heap, (a.time_s, _ARRIVE, seq, a.job))
        durations[a.job.job_id] = a.duration_s
    placed: list[bool] = []
    started_at: list[float] = []
    arrived: list[int] = []
    allocated: list[int] = []
    index: dict[str, int] = {}
    spent, decisions, total = 0.0, 0, 0

    def started(job_id: str, now: float) -> None:
        placed[index[job_id]] = True
        started_at[index[job_id]] = now
        duration = durations[job_id]
        if duration is not None:
            job = scheduler.placements[job_id].job
            heapq.heappush(heap, (now + duration, _DEPART, index[job_id], job))

    while heap:
        now, kind, _, job = heapq.heappop(heap)
        if kind == _DEPART:
            scheduler.release(job.job_id)
            if not retry_pending:
                continue
            t0 = clock()
            ds = scheduler.schedule()
            spent += clock() - t0
            decisions += len(ds)
            for d in ds:
                if d.placed:
                    started(d.job_id, now)
            continue
        index[job.job_id] = len(placed)
        placed.append(False)
        started_at.append(float("nan"))
        total += job.total_gpu_milli
        arrived.append(total)
        t0 = clock()
        if retry_pending:
            scheduler.submit(job)
            ds = scheduler.schedule()
        else:
            ds = [scheduler.place(job)]
        spent += clock() - t0
        decisions += len(ds)
        for d in ds:
            if d.placed:
                started(d.job_id, now)
        allocated.append(scheduler.cluster.allocated_milli)
    return ReplayResult(
        np.array(placed, dtype=bool),
        np.array(arrived, dtype=np.int64),
        np.array(allocated, dtype=np.int64),
        scheduler.cluster.capacity_milli,
        spent,
        decisions,
        np.array(started_at, dtype=float),
    )
