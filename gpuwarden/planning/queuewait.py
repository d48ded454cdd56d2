"""Queue wait per GPU model: measured in the job history, and forecast by replaying the demand
forecast through the bundled scheduler.

*Measured*: the hours from submission to start of the jobs submitted in a window; a job still
waiting at its end counts with the wait it has so far, so those percentiles are lower bounds
(``waiting`` says how many).

*Forecast*: the fleet's next ``horizon`` hours are simulated with the scheduler's own placement
code (``scheduler.simulate.replay``) on the nodes the database holds. What arrives is last
week's jobs again (the whole days there are, with less history), each day thinned or repeated
so that its GPU-hours follow the demand forecast for that day (the ratio ``r`` of forecast to
last week's demand in those hours, a job kept ``floor(r)`` times and once more with
probability ``r - floor(r)``); the jobs running now keep their GPUs for as long
again as they have run (a job seen mid-run is, on average, half done), and the jobs queued now
arrive first. A job's wait is its simulated start minus its arrival; the waits reported are
those of the jobs arriving in the horizon (the backlog delays them; its own waits are past).
Adding GPUs to that replay (copies of the model's largest node) until the p90 wait meets a
target is what ``should_scale``'s "queue wait says add N GPUs" rests on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.planning.demand import HOUR_S, DemandRecord, _job_model, _node_model
from gpuwarden.wording import counted

WEEK_S = 7 * 24 * HOUR_S
DAY_S = 24 * HOUR_S
#: Most nodes a "queue wait says add N" search adds per model (it doubles up to this).
MAX_ADDED_NODES = 64


@dataclass(frozen=True)
class WaitStats:
    """Queue wait of ``jobs`` jobs of ``gpu_model``: median and 90th percentile in hours (NaN
    with no job); ``waiting``: jobs that had not started by the window's end (counted with
    their wait so far, so the percentiles are then lower bounds)."""

    gpu_model: str
    jobs: int
    p50_h: float
    p90_h: float
    waiting: int = 0

    def __str__(self) -> str:
        if not self.jobs:
            return f"{self.gpu_model}: no job"
        bound = ">=" if self.waiting else ""
        late = f", {self.waiting} still waiting" if self.waiting else ""
        return (
            f"{self.gpu_model}: p50 {bound}{self.p50_h:.2f} h, p90 {bound}{self.p90_h:.2f} h "
            f"over {counted(self.jobs, 'job')}{late}"
        )


def _stats(model: str, waits_s: Sequence[float], waiting: int) -> WaitStats:
    if not waits_s:
        return WaitStats(model, 0, math.nan, math.nan, 0)
    hours = np.asarray(waits_s, dtype=float) / HOUR_S
    p50, p90 = np.quantile(hours, [0.5, 0.9])
    return WaitStats(model, len(hours), float(p50), float(p90), waiting)


def measured_waits(
    records: Iterable[DemandRecord], *, since_s: float, until_s: float
) -> dict[str, WaitStats]:
    """Per GPU model, the waits of the jobs submitted in ``[since_s, until_s)``."""
    if until_s <= since_s:
        raise InputError("the wait window is empty: its end is not after its start")
    waits: dict[str, list[float]] = {}
    waiting: dict[str, int] = {}
    for r in records:
        if not since_s <= r.submitted_s < until_s:
            continue
        started = r.started_s is not None and r.started_s <= until_s
        if not started and r.ended_s is not None and r.ended_s <= until_s:
            continue  # cancelled in the queue: it never got a wait to measure
        end = r.started_s if started else until_s
        assert end is not None
        waits.setdefault(r.gpu_model, []).append(max(0.0, end - r.submitted_s))
        waiting[r.gpu_model] = waiting.get(r.gpu_model, 0) + (not started)
    return {m: _stats(m, waits[m], waiting[m]) for m in sorted(waits)}


@dataclass(frozen=True)
class _Template:
    """A job of the history as the replay needs it."""

    job: object  # scheduler.jobs.Job
    gpu_model: str
    gpus: float
    submitted_s: float
    started_s: float | None
    ended_s: float | None


@dataclass
class FleetHistory:
    """What a replay needs from a scheduler database: its live nodes and its jobs."""

    nodes: list  # scheduler.resources.NodeSpec
    jobs: list[_Template]
    now_s: float

    @property
    def template_s(self) -> float:
        """The stretch of history whose jobs arrive again, period after period: the last
        week, or the whole days there are when the history is shorter (at least one)."""
        first = min((j.submitted_s for j in self.jobs), default=self.now_s)
        days = math.floor((self.now_s - first) / DAY_S)
        return min(WEEK_S, max(1, days) * DAY_S)

    @classmethod
    def from_db(cls, path: str | Path, now_s: float) -> FleetHistory:
        from gpuwarden.planning.demand import spec_gpus
        from gpuwarden.scheduler.service import SchedulerDB, job_of, node_spec

        path = Path(path)
        if not path.is_file():
            raise InputError(f"{path}: no such scheduler database")
        db = SchedulerDB(path)
        try:
            rows = [n for n in db.nodes() if n.lost_at is None]
            models = {n.node: _node_model(n.gpus) for n in rows}
            jobs = []
            for j in db.jobs():
                if j.submitted_at >= now_s:
                    continue
                try:
                    job = job_of(j.job_id, j.tenant, j.spec)
                except KeyError as exc:  # a spec not written by the service
                    raise InputError(f"{path}: job {j.job_id}'s spec lacks {exc}, so the "
                                     "scheduler cannot replay it") from exc  # fmt: skip
                model = _job_model(j.spec, j.placement, models)
                jobs.append(_Template(job, model, spec_gpus(j.spec), j.submitted_at,
                                      j.started_at, j.ended_at))  # fmt: skip
        finally:
            db.close()
        return cls([node_spec(n) for n in rows], [j for j in jobs if j.gpus > 0], now_s)


def _arrivals(
    history: FleetHistory,
    forecasts: Mapping[str, pd.Series],
    past: Mapping[str, pd.Series],
    horizon_h: int,
    rng: np.random.Generator,
) -> list[tuple[float, _Template, float, bool]]:
    """(arrival s, template, duration s, counted), arrivals from time 0 (now); ``counted``: an
    arrival of the horizon, whose wait is reported (not a job running or queued now)."""
    now = history.now_s
    done = [j.ended_s - j.started_s for j in history.jobs
            if j.started_s is not None and j.ended_s is not None and j.ended_s <= now]  # fmt: skip
    typical = float(np.median(done)) if done else HOUR_S
    out: list[tuple[float, _Template, float, bool]] = []
    for j in history.jobs:
        ended = j.ended_s is not None and j.ended_s <= now
        started = j.started_s is not None and j.started_s <= now
        if not ended and started:  # running: as long again as it has run
            assert j.started_s is not None
            out.append((0.0, j, max(now - j.started_s, 60.0), False))
        elif not ended:  # queued now: arrives first
            out.append((0.0, j, typical, False))
    span = history.template_s
    ratios: dict[tuple[str, int, int], float] = {}  # (model, day, period) -> ratio
    for j in history.jobs:
        if not now - span <= j.submitted_s < now:
            continue
        duration = (
            j.ended_s - j.started_s
            if j.started_s is not None and j.ended_s is not None and j.ended_s <= now
            else typical
        )
        k = 1
        while (at := j.submitted_s + k * span - now) < horizon_h * HOUR_S:
            key = (j.gpu_model, math.floor((now + at) / DAY_S), k)
            if key not in ratios:
                ratios[key] = _ratio(forecasts.get(j.gpu_model), past.get(j.gpu_model),
                                     now + at, k * span)  # fmt: skip
            ratio = ratios[key]
            copies = int(ratio) + int(rng.random() < ratio - int(ratio))
            out.extend((at, j, duration, True) for _ in range(copies))
            k += 1
    return out


def _ratio(fc: pd.Series | None, past: pd.Series | None, at_s: float, shift_s: float) -> float:
    """Forecast demand over the hours of ``at_s``'s day that the forecast covers, against the
    same hours ``shift_s`` earlier, where the copied jobs came from (1 where either is unknown
    or those hours had none)."""
    if fc is None or past is None or fc.empty:
        return 1.0
    day = pd.Timestamp(math.floor(at_s / DAY_S) * DAY_S, unit="s", tz="UTC")
    ahead = fc[(fc.index >= day) & (fc.index < day + pd.Timedelta(days=1))]
    if ahead.empty:  # past the forecast's end: its last day
        ahead = fc.iloc[-24:]
    before = past.reindex(ahead.index - pd.Timedelta(seconds=shift_s))
    if before.isna().any() or not before.sum() > 0:
        return 1.0
    return float(ahead.sum() / before.sum())


def forecast_waits(
    history: FleetHistory,
    forecasts: Mapping[str, pd.Series],
    past: Mapping[str, pd.Series],
    horizon_h: int,
    *,
    extra_nodes: Mapping[str, int] | None = None,
    seed: int = 0,
) -> dict[str, WaitStats]:
    """Per GPU model, the simulated waits of the jobs arriving in the next ``horizon_h`` hours
    (behind the jobs queued now). ``forecasts``/``past``: hourly demand forecast and history per
    model (``hourly_demand`` columns); ``extra_nodes``: copies of the model's largest node to
    add. A job no node could ever hold stays waiting and counts with the replay's length."""
    from gpuwarden.scheduler.jobs import Job
    from gpuwarden.scheduler.scheduler import Scheduler
    from gpuwarden.scheduler.simulate import Arrival, replay

    if horizon_h < 1:
        raise InputError(f"the wait forecast needs a horizon of at least 1 hour, got {horizon_h}")
    if not history.nodes:
        raise InputError("the scheduler database has no live node to replay the forecast on")
    nodes = list(history.nodes)
    for model, count in (extra_nodes or {}).items():
        pool = [n for n in history.nodes if n.gpu_model and n.gpu_model in model.split("|")]
        if count and not pool:
            raise InputError(f"no node of {model} to copy")
        if pool:
            largest = max(pool, key=lambda n: len(n.gpus))
            nodes += [replace(largest, name=f"{largest.name}+{i}") for i in range(count)]
    planned = sorted(
        _arrivals(history, forecasts, past, horizon_h, np.random.default_rng(seed)),
        key=lambda a: a[0],
    )
    arrivals = []
    for i, (at, t, duration, _) in enumerate(planned):
        job = t.job
        assert isinstance(job, Job)
        arrivals.append(Arrival(at, replace(job, job_id=f"{job.job_id}#{i}"), duration))
    result = replay(Scheduler(nodes), arrivals, retry_pending=True)
    end = max([a[0] for a in planned] + [float(np.nanmax(result.started_s, initial=0.0))])
    waits: dict[str, list[float]] = {}
    waiting: dict[str, int] = {}
    for (at, t, _, in_horizon), started in zip(planned, result.started_s, strict=True):
        if not in_horizon:
            continue
        never = math.isnan(started)
        waits.setdefault(t.gpu_model, []).append((end if never else started) - at)
        waiting[t.gpu_model] = waiting.get(t.gpu_model, 0) + never
    return {m: _stats(m, waits[m], waiting[m]) for m in sorted(waits)}


@dataclass(frozen=True)
class QueueEvidence:
    """What replaying the forecast through the scheduler says about one GPU model's queue over
    the next ``horizon_h`` hours: the waits on today's fleet (``now``), and ``add_gpus`` GPUs
    for the p90 wait to meet ``max_p90_h`` (0: it does; None: not even with the most the
    search adds, ``queuewait.MAX_ADDED_NODES`` nodes) with the waits then (``then``)."""

    horizon_h: int
    max_p90_h: float
    now: WaitStats
    add_gpus: int | None
    then: WaitStats | None = None

    def sentence(self) -> str:
        if not self.now.jobs:
            return f"queue wait: no job of this model arrives in the replayed {self.horizon_h} h"
        said = f"forecast p90 wait {self.now.p90_h:.1f} h over the next {self.horizon_h} h"
        if self.add_gpus == 0:
            return f"queue wait holds: {said}, within {self.max_p90_h:g} h"
        if self.add_gpus is None:
            return (f"queue wait says add GPUs: {said} stays above {self.max_p90_h:g} h even "
                    f"with {MAX_ADDED_NODES} more nodes")  # fmt: skip
        assert self.then is not None
        return (f"queue wait says add {counted(self.add_gpus, 'GPU')}: {said}, {self.then.p90_h:.1f} h "
                f"with them (target {self.max_p90_h:g} h)")  # fmt: skip


def gpus_for_wait(
    history: FleetHistory,
    forecasts: Mapping[str, pd.Series],
    past: Mapping[str, pd.Series],
    horizon_h: int,
    gpu_model: str,
    max_p90_h: float,
    *,
    seed: int = 0,
) -> QueueEvidence:
    """The replay's waits of ``gpu_model`` on today's fleet, and the fewest GPUs (whole copies
    of the model's largest node) to add so that its p90 wait is at most ``max_p90_h`` with no
    job left waiting, found by doubling and then bisecting the nodes added."""
    pool = [n for n in history.nodes if n.gpu_model and n.gpu_model in gpu_model.split("|")]

    def waits(count: int) -> WaitStats:
        got = forecast_waits(history, forecasts, past, horizon_h,
                             extra_nodes={gpu_model: count} if count else None, seed=seed)  # fmt: skip
        return got.get(gpu_model, WaitStats(gpu_model, 0, math.nan, math.nan))

    def meets(w: WaitStats) -> bool:
        return not w.jobs or (w.p90_h <= max_p90_h and not w.waiting)

    now = waits(0)
    if meets(now):
        return QueueEvidence(horizon_h, max_p90_h, now, 0, now)
    if not pool:
        return QueueEvidence(horizon_h, max_p90_h, now, None)
    per_node = len(max(pool, key=lambda n: len(n.gpus)).gpus)
    lo, hi, found = 0, 1, None
    while hi <= MAX_ADDED_NODES:
        w = waits(hi)
        if meets(w):
            found = w
            break
        lo, hi = hi, hi * 2
    if found is None:
        return QueueEvidence(horizon_h, max_p90_h, now, None)
    while hi - lo > 1:  # lo misses, hi meets
        mid = (lo + hi) // 2
        w = waits(mid)
        if meets(w):
            hi, found = mid, w
        else:
            lo = mid
    return QueueEvidence(horizon_h, max_p90_h, now, hi * per_node, found)
