"""Spot capacity in the bundled scheduler over the report's period, from its SQLite file.

- **Spot nodes** are the registered nodes whose GPUs carry ``cost_class`` spot (the agent's
  ``--cost-class``); their GPU model is the one the agent registered.
- **GPU-hours on spot**: each task's GPUs times the part of its run on a spot node inside the
  period (a task still running counts to ``now``). Split by the job's ``interruptible`` flag:
  critical work on spot should be zero, since the scheduler never places it there.
- **Reclaims**: the ``reclaim`` audit rows of the period. Each job a reclaim evicted (its
  ``preempt`` row names the reclaim) lost the work since its last checkpoint in that attempt,
  or since its tasks started: that span times the GPUs its live tasks held.
- **Saving**: spot GPU-hours priced at the price file's on-demand and spot rates per GPU-hour
  for the node's model (the price file of ``gpuwarden plan tco``); a model without prices is
  counted in GPU-hours and left out of the money.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from gpuwarden.errors import InputError
from gpuwarden.reports._capacity import match_prices, price_file
from gpuwarden.reports.model import Absent, Spot, SpotModel
from gpuwarden.scheduler.state import AuditRow, SchedulerDB, TaskRow, checkpoint_of

_ALL_ROWS = 1_000_000


def spot(
    path: str, since: float, until: float, now: float, prices_path: str = ""
) -> tuple[Spot | None, Absent | None]:
    """The period's spot facts, or None and why (no spot node registered)."""
    if not Path(path).is_file():
        raise InputError(f"scheduler database {path} does not exist")
    db = SchedulerDB(path)
    try:
        model_of: dict[str, str] = {}
        gpus_of: dict[str, int] = {}
        for n in db.nodes():
            if any(g.get("cost_class") == "spot" for g in n.gpus):
                model_of[n.node] = next((str(g.get("model") or "") for g in n.gpus), "")
                gpus_of[n.node] = len(n.gpus)
        if not model_of:
            return None, Absent(section="spot", why="no spot node in the bundled scheduler "
                                "(agents register one with --cost-class spot)")  # fmt: skip
        jobs = {j.job_id: j for j in db.jobs()}
        tasks = db.tasks()
        reclaims, evictions = (
            [r for r in db.audit_rows(limit=_ALL_ROWS, since=since, action=a) if r.at < until]
            for a in ("reclaim", "preempt")
        )
        evictions = [r for r in evictions if "reclaimed" in r.reason]
        evicted = sorted({str(e.job_id) for e in evictions})
        checkpoints = (
            db.audit_rows(limit=_ALL_ROWS, action="checkpoint", job_ids=evicted) if evicted else []
        )
    finally:
        db.close()
    end = min(now, until)
    on_spot: dict[str, float] = defaultdict(float)  # GPU model -> GPU-hours
    interruptible = {True: 0.0, False: 0.0}  # GPU-hours of all tasks, by the job's flag
    critical_on_spot = 0.0
    for t in tasks:
        hours = _overlap_h(t, since, end)
        if hours <= 0:
            continue
        flag = bool(jobs[t.job_id].spec.get("interruptible")) if t.job_id in jobs else False
        interruptible[flag] += hours * len(t.gpus)
        if t.node in model_of:
            on_spot[model_of[t.node]] += hours * len(t.gpus)
            if not flag:
                critical_on_spot += hours * len(t.gpus)
    tasks_of: dict[str, list[TaskRow]] = defaultdict(list)
    for t in tasks:
        tasks_of[t.job_id].append(t)
    saved_at: dict[tuple[str, int], list[float]] = defaultdict(list)  # (job, attempt) -> times
    for c in checkpoints:
        point = checkpoint_of(c.reason)
        if c.job_id is not None and point is not None:
            saved_at[(c.job_id, point[0])].append(point[1])
    lost = sum(_lost_gpu_h(e, tasks_of[str(e.job_id)], saved_at) for e in evictions)
    prices, source = price_file(prices_path)
    by_model, saved, on_demand = [], 0.0, 0.0
    for model in sorted(set(model_of.values())):
        h = on_spot.get(model, 0.0)
        p = match_prices(prices, model)
        od = None if p is None else round(h * p.on_demand.value, 2)
        sp = None if p is None else round(h * p.spot.value, 2)
        if od is not None and sp is not None:
            saved, on_demand = saved + od - sp, on_demand + od
        by_model.append(SpotModel(
            model=model, gpus=sum(gpus_of[n] for n, m in model_of.items() if m == model),
            gpu_hours=round(h, 1),
            on_demand_per_gpu_hour=None if p is None else p.on_demand.value,
            spot_per_gpu_hour=None if p is None else p.spot.value,
            on_demand_cost=od, spot_cost=sp,
            saved=None if od is None or sp is None else round(od - sp, 2),
        ))  # fmt: skip
    priced = any(m.saved is not None for m in by_model)
    total_interruptible = interruptible[True]
    spot_interruptible = sum(on_spot.values()) - critical_on_spot
    return Spot(
        nodes=len(model_of),
        gpus=sum(gpus_of.values()),
        gpu_hours=round(sum(on_spot.values()), 1),
        interruptible_gpu_hours=round(total_interruptible, 1),
        interruptible_on_spot_pct=(
            round(100.0 * spot_interruptible / total_interruptible, 1)
            if total_interruptible
            else None
        ),
        critical_gpu_hours_on_spot=round(critical_on_spot, 1),
        reclaims=len(reclaims),
        reclaimed_nodes=sorted({str(r.node) for r in reclaims if r.node}),
        jobs_evicted=len(evicted),
        gpu_hours_lost=round(lost, 2),
        currency="USD",
        saved=round(saved, 2) if priced else None,
        saved_pct=round(100.0 * saved / on_demand, 1) if priced and on_demand else None,
        prices=source,
        by_model=by_model,
    ), None


def _overlap_h(t: TaskRow, since: float, end: float) -> float:
    if t.started_at is None:
        return 0.0
    stop = t.ended_at if t.ended_at is not None else end
    return max(0.0, min(stop, end) - max(t.started_at, since)) / 3600.0


def _lost_gpu_h(
    evicted: AuditRow, tasks: list[TaskRow], saved_at: dict[tuple[str, int], list[float]]
) -> float:
    """GPU-hours of work an eviction threw away: from the job's last checkpoint in the attempt
    (or its tasks' start) to the eviction, times the GPUs of the tasks live then. ``tasks``:
    the job's; ``saved_at``: checkpoint times by (job, attempt)."""
    at = evicted.at
    live = [
        t for t in tasks
        if t.started_at is not None and t.started_at <= at and (t.ended_at is None or t.ended_at >= at)
    ]  # fmt: skip
    if not live:
        return 0.0
    attempt = max(t.attempt for t in live)
    live = [t for t in live if t.attempt == attempt]
    started = min(float(t.started_at or at) for t in live)
    saved = max(
        (w for w in saved_at.get((str(evicted.job_id), attempt), ()) if started <= w <= at),
        default=started,
    )
    return (at - saved) / 3600.0 * sum(len(t.gpus) for t in live)
