"""GPU demand history: what jobs asked for, hour by hour, from the scheduler or a trace.

Demand is what jobs *requested*, from submission to end, not what they were granted: a job
waiting in the queue is demand the fleet did not meet, and planning that sees only placements
never learns it is short. One hour's value is the GPU-hours requested inside that hour (a job
asking for 4 GPUs for the whole hour adds 4.0; a 250-milli share for half of it adds 0.125),
so the series reads as "GPUs wanted on average during the hour".

Sources: the bundled scheduler's SQLite file (``jobs``: ``submitted_at``, ``started_at``,
``ended_at``; the placement's node gives the GPU model) and the openb trace
(``creation_time``/``deletion_time``; the trace has no tenant, so all of it is ``default``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.scheduler import mig
from gpuwarden.scheduler.resources import GPU_MILLI

#: The GPU model of a job that may run on any model and has not been placed yet.
ANY_MODEL = "any"
HOUR_S = 3600.0
#: Anchor of a trace's relative seconds (openb counts from 0): a Monday, so that weekdays in
#: plots and weekly seasonality line up with something, even if not the trace's real calendar.
TRACE_EPOCH = pd.Timestamp("2023-01-02", tz="UTC")


@dataclass(frozen=True)
class DemandRecord:
    """One job's request: ``gpus`` GPUs (fractional for shares) of ``gpu_model`` for ``tenant``,
    wanted from ``submitted_s`` until ``ended_s`` (unix seconds; None while it still runs),
    granted at ``started_s`` (None while it waits)."""

    tenant: str
    gpu_model: str
    gpus: float
    submitted_s: float
    started_s: float | None = None
    ended_s: float | None = None


def spec_gpus(spec: dict[str, object]) -> float:
    """GPUs a stored scheduler job spec asks for, all tasks together (a MIG instance counts
    its compute slices out of 7, a share its thousandths)."""
    tasks = _whole(spec.get("tasks", 1))
    profile = spec.get("mig_profile")
    if isinstance(profile, str) and profile:
        return tasks * int(profile.split("g.", 1)[0]) / mig.COMPUTE_SLICES
    per_task = _whole(spec.get("gpus_per_task", 1))
    milli = _whole(spec.get("gpu_milli", GPU_MILLI))
    if per_task == 1 and milli < GPU_MILLI:
        return tasks * milli / GPU_MILLI
    return float(tasks * per_task)


def _whole(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def records_from_scheduler(path: str | Path) -> list[DemandRecord]:
    """Every GPU job in a scheduler database (``gpuwarden scheduler --db``), read only.

    The GPU model is that of the node the job was placed on; a job never placed counts under
    the one model it allows, or ``any``."""
    from gpuwarden.scheduler.state import SchedulerDB

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such scheduler database")
    db = SchedulerDB(path)
    try:
        models = {n.node: _node_model(n.gpus) for n in db.nodes()}
        out = []
        for job in db.jobs():
            gpus = spec_gpus(job.spec)
            if gpus <= 0:
                continue
            out.append(
                DemandRecord(
                    tenant=job.tenant,
                    gpu_model=_job_model(job.spec, job.placement, models),
                    gpus=gpus,
                    submitted_s=job.submitted_at,
                    started_s=job.started_at,
                    ended_s=job.ended_at,
                )
            )
    finally:
        db.close()
    return out


def scheduler_demand(
    path: str | Path, *, by: Sequence[str] = ("gpu_model",), now_s: float | None = None
) -> tuple[list[DemandRecord], pd.DataFrame]:
    """The jobs of a scheduler database and their hourly demand up to the last whole hour
    before ``now_s`` (default: the clock), a running job wanted until ``now_s``: what
    ``gpuwarden plan`` and the report's capacity facts both plan from."""
    import time

    records = records_from_scheduler(path)
    if not records:
        raise InputError(f"{path}: no GPU job recorded yet, nothing to plan from")
    now = time.time() if now_s is None else now_s
    end = math.floor(now / HOUR_S) * HOUR_S
    return records, hourly_demand(records, by=by, now_s=now, end_s=end)


def _node_model(gpus: list[dict[str, object]]) -> str:
    names = sorted({str(g.get("model") or "") for g in gpus} - {""})
    return "|".join(names) or ANY_MODEL


def _job_model(
    spec: dict[str, object], placement: list[dict[str, object]] | None, models: dict[str, str]
) -> str:
    if placement:
        node = str(placement[0].get("node", ""))
        if node in models:
            return models[node]
    allowed = spec.get("gpu_models") or []
    if isinstance(allowed, list) and len(allowed) == 1:
        return str(allowed[0])
    return ANY_MODEL


def records_from_openb(path: str | Path) -> list[DemandRecord]:
    """The GPU pods of an openb pod list; times are the trace's seconds from its start. A pod
    starts at its ``scheduled_time`` when the file has one at or after its creation (a pending
    pod's is 0), else it never started."""
    from gpuwarden.scheduler.openb import load_pods

    pods = load_pods(path)  # names a file that is not there, or lacks the pod list's columns
    scheduled = _scheduled_times(Path(path))
    out = []
    for pod in pods:
        if pod.created_s is None or pod.deleted_s is None or not pod.job.total_gpu_milli:
            continue
        models = sorted(pod.job.gpu_models)
        out.append(
            DemandRecord(
                tenant=pod.job.tenant,
                gpu_model=models[0] if len(models) == 1 else ANY_MODEL,
                gpus=pod.job.total_gpu_milli / GPU_MILLI,
                submitted_s=pod.created_s,
                started_s=_start(scheduled.get(pod.job.job_id), pod.created_s),
                ended_s=pod.deleted_s,
            )
        )
    if not out:
        raise InputError(f"{path}: no GPU pod with both a creation and a deletion time")
    return out


def _scheduled_times(path: Path) -> dict[str, float]:
    import csv

    out = {}
    with open(path, newline="") as f:  # load_pods has read it already, so it opens
        for row in csv.DictReader(f):
            try:
                out[row["name"].strip()] = float(row.get("scheduled_time") or "nan")
            except ValueError:
                continue
    return out


def _start(scheduled: float | None, created: float) -> float | None:
    if scheduled is None or not math.isfinite(scheduled) or scheduled < created:
        return None
    return scheduled


def openb_window(records: Sequence[DemandRecord]) -> tuple[float, float]:
    """The span in which an openb pod list is complete: from its first deletion (pods deleted
    before it were never recorded, so earlier hours would read too low) to its last creation."""
    ends = [r.ended_s for r in records if r.ended_s is not None]
    if not ends:
        raise InputError("no record has an end time, so the trace's window is unknown")
    return min(ends), max(r.submitted_s for r in records)


def hourly_demand(
    records: Iterable[DemandRecord],
    *,
    by: Sequence[str] = ("gpu_model",),
    start_s: float | None = None,
    end_s: float | None = None,
    now_s: float | None = None,
    epoch: pd.Timestamp | None = None,
) -> pd.DataFrame:
    """GPU-hours requested per hour, one column per group of ``by`` (``gpu_model``,
    ``tenant``; joined with ``/``), on whole hours from ``start_s`` to ``end_s``.

    A job still running (``ended_s`` None) is wanted until ``now_s``. Times are unix seconds,
    or, with ``epoch``, seconds after it (a trace's relative clock). An hour no job wanted
    is 0.0: that is a measured absence of demand, not a missing reading."""
    for key in by:
        if key not in ("gpu_model", "tenant"):
            raise InputError(f"cannot group demand by {key!r}: use gpu_model and/or tenant")
    rows = list(records)
    if not rows:
        raise InputError("no jobs to build a demand series from")
    last = max((r.ended_s if r.ended_s is not None else (now_s or r.submitted_s)) for r in rows)
    lo = math.floor((min(r.submitted_s for r in rows) if start_s is None else start_s) / HOUR_S)
    hi = math.ceil((last if end_s is None else end_s) / HOUR_S)
    if hi <= lo:
        raise InputError("the demand window is empty: its end is not after its start")
    edges = np.arange(lo, hi + 1) * HOUR_S
    groups: dict[str, np.ndarray] = {}
    for r in rows:
        end = r.ended_s if r.ended_s is not None else now_s
        if end is None or end <= r.submitted_s:
            continue
        key = "/".join(getattr(r, k) for k in by) or "all"
        acc = groups.setdefault(key, np.zeros(len(edges) - 1))
        # only the hours the job overlaps: a database holds long histories of short jobs
        i = max(0, int(np.searchsorted(edges, r.submitted_s, side="right")) - 1)
        j = min(len(edges) - 1, int(np.searchsorted(edges, end, side="left")))
        if j <= i:
            continue
        overlap = np.minimum(end, edges[i + 1 : j + 1]) - np.maximum(r.submitted_s, edges[i:j])
        acc[i:j] += r.gpus * np.clip(overlap, 0.0, None) / HOUR_S
    base = epoch if epoch is not None else pd.Timestamp(0, tz="UTC")
    index = base + pd.to_timedelta(edges[:-1], unit="s")
    frame = pd.DataFrame(groups, index=pd.DatetimeIndex(index, freq="h"))
    return frame.reindex(sorted(frame.columns), axis=1)


def waiting(records: Iterable[DemandRecord]) -> list[DemandRecord]:
    """Each job's time in the queue as a request of its own: from submission until it started
    (or, never started, until it ended or still). ``hourly_demand`` of these is the GPU-hours
    that waited in each hour, the demand the fleet did not meet; an hour with an empty queue is
    a measured 0."""
    out = []
    for r in records:
        end = r.started_s if r.started_s is not None else r.ended_s
        out.append(DemandRecord(r.tenant, r.gpu_model, r.gpus, r.submitted_s, None, end))
    return out


def queue_wait_hourly(
    records: Iterable[DemandRecord], epoch: pd.Timestamp | None = None
) -> pd.Series:
    """Mean queue wait (seconds) of the jobs that started in each hour. An hour in which no job
    started has no wait to report and is NaN, never 0."""
    starts = [
        (r.started_s, r.started_s - r.submitted_s) for r in records if r.started_s is not None
    ]
    if not starts:
        return pd.Series(dtype=float, name="queue_wait_s")
    base = epoch if epoch is not None else pd.Timestamp(0, tz="UTC")
    at = base + pd.to_timedelta([s for s, _ in starts], unit="s")
    waits = pd.Series([max(0.0, w) for _, w in starts], index=at, name="queue_wait_s")
    return waits.resample("h").mean()


def monthly_growth(series: pd.Series, months: int = 6) -> float | None:
    """Compound monthly growth of demand over the last ``months`` months: the slope of a
    least-squares line through the log of each 30-day block's mean. None with fewer than two
    whole blocks (growth cannot be measured) or a block without demand."""
    days = 30
    hours = days * 24
    blocks = min(months, len(series) // hours)
    if blocks < 2:
        return None
    tail = series.iloc[-blocks * hours :].to_numpy(dtype=float)
    means = tail.reshape(blocks, hours).mean(axis=1)
    if not np.all(means > 0):
        return None
    slope = np.polyfit(np.arange(blocks), np.log(means), 1)[0]
    return float(math.expm1(slope))
