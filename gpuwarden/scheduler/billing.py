"""GPU-hours per job and tenant, from the intervals jobs held GPUs.

The service opens a ``UsageInterval`` when a job's attempt starts and closes it when the attempt
stops (finished, cancelled, preempted, evicted). A bill is the GPU-hours inside a window
``[since, until)``: each interval is clipped to the window, and an open one counts up to ``now``.
Shares count fractionally: a 250-milli share for one hour is 0.25 GPU-hours, a MIG 3g instance
3/7 GPU-hours per hour (``billed_gpu_milli`` gives the exact fraction; ``Job.total_gpu_milli``
rounds it to whole thousandths). A share that reserves GPU memory (``gpu_memory_mib``) bills
the larger of its compute share and its share of the GPU's memory: 100 milli with 60,000 MiB of
an 80 GB GPU (81,920 MiB) keeps others off most of that GPU and bills 0.732 GPU, not 0.1.
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from gpuwarden.errors import InputError
from gpuwarden.scheduler import mig
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.resources import GPU_MILLI

CSV_HEADER = ("tenant", "job_id", "name", "gpu_hours")


@dataclass(frozen=True)
class UsageInterval:
    """One attempt of a job holding ``gpu_milli`` GPU thousandths (all tasks together) from
    ``start_s`` to ``end_s`` (unix seconds; None while it still runs)."""

    job_id: str
    tenant: str
    name: str
    gpu_milli: float
    start_s: float
    end_s: float | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.start_s):
            raise InputError(f"usage of job {self.job_id}: start_s must be a time")
        if self.end_s is not None and not self.end_s >= self.start_s:
            raise InputError(f"usage of job {self.job_id}: ends before it starts")
        if not self.gpu_milli >= 0:
            raise InputError(f"usage of job {self.job_id}: gpu_milli must be >= 0")


@dataclass(frozen=True)
class BillRow:
    """GPU-hours one job used inside the billing window."""

    tenant: str
    job_id: str
    name: str
    gpu_hours: float


def billed_gpu_milli(job: Job, gpu_memory_mib: Sequence[float | None] = ()) -> float:
    """GPU thousandths ``job`` holds while it runs, all tasks together, without rounding: a MIG
    instance is its compute slices out of 7 (3g = 428.57...).

    A share of a GPU (``job.kind`` "fractional") that declares ``gpu_memory_mib`` bills, per
    task, the larger of its compute share and that memory over the framebuffer of the GPU the
    task runs on (``gpu_memory_mib[i]`` for task ``i``, MiB; None or missing: unknown, compute
    share only), at most a whole GPU: the dominant share. Whole-GPU and MIG jobs already hold
    their GPU's or instance's memory with their compute and bill as before."""
    if job.mig_profile is not None:
        compute = int(job.mig_profile.split("g.", 1)[0])
        return job.tasks * GPU_MILLI * compute / mig.COMPUTE_SLICES
    need = job.gpu_memory_mib
    if job.kind != "fractional" or need is None:
        return float(job.total_gpu_milli)
    total = 0.0
    for i in range(job.tasks):
        cap = gpu_memory_mib[i] if i < len(gpu_memory_mib) else None
        share = float(job.gpu_milli)
        if cap is not None and math.isfinite(cap) and cap > 0:
            share = max(share, min(float(GPU_MILLI), GPU_MILLI * need / cap))
        total += share
    return total


def gpu_hours(
    intervals: Iterable[UsageInterval],
    since: float | None = None,
    until: float | None = None,
    now: float | None = None,
) -> list[BillRow]:
    """GPU-hours per job inside ``[since, until)`` (None: unbounded), open intervals counted to
    ``now`` (required when one is open). One row per job that used any, by tenant then job."""
    lo = -math.inf if since is None else since
    hi = math.inf if until is None else until
    if lo > hi:
        raise InputError(f"billing window starts after it ends: since={since} until={until}")
    milli_s: dict[tuple[str, str], float] = defaultdict(float)
    names: dict[tuple[str, str], str] = {}
    for iv in intervals:
        end = iv.end_s
        if end is None:
            if now is None:
                raise InputError(f"usage of job {iv.job_id} is still open; pass now")
            end = max(now, iv.start_s)
        seconds = min(end, hi) - max(iv.start_s, lo)
        if seconds <= 0:
            continue
        key = (iv.tenant, iv.job_id)
        milli_s[key] += iv.gpu_milli * seconds
        names.setdefault(key, iv.name)
    return [
        BillRow(tenant, job_id, names[(tenant, job_id)], _hours(milli_s[(tenant, job_id)]))
        for tenant, job_id in sorted(milli_s)
        if milli_s[(tenant, job_id)] > 0
    ]


#: GPU board power (W) from NVIDIA's datasheets (T4, P100 SXM2 300 / PCIe 250, V100 SXM2, A10,
#: L4, L40S, A100 SXM4, H100 SXM5, H200 SXM): what a fully busy GPU draws at most.
BOARD_POWER_W: dict[str, float] = {
    "T4": 70.0,
    "P100": 250.0,
    "V100M16": 300.0,
    "V100M32": 300.0,
    "A10": 150.0,
    "L4": 72.0,
    "L40S": 350.0,
    "A100-40GB": 400.0,
    "A100-80GB": 400.0,
    "H100-80GB": 700.0,
    "H200": 700.0,
}


@dataclass(frozen=True)
class EnergyRow:
    """A job's energy inside the billing window. ``kwh``: measured by its GPUs' energy counters
    where the agents measured it, and for the GPU-hours they did not, GPU-hours at the board
    power of its GPU model (an upper bound: a GPU rarely draws its board power all the time);
    None when part of it is unmeasured and the model's power is unknown. ``source``: measured
    (all of its GPU-hours), partly measured, or estimated (none). ``co2_kg``: ``kwh`` x the
    grid's intensity; None when either is unknown (missing is never zero)."""

    tenant: str
    job_id: str
    kwh: float | None
    co2_kg: float | None
    source: str = "estimated"


#: a job whose measured GPU-hours reach this share of its billed ones counts as measured (the
#: first and last second of a task fall between two syncs and are never measured)
MEASURED_SHARE = 0.99


@dataclass(frozen=True)
class Measured:
    """Measured energy of one job in the window: ``kwh`` over ``gpu_hours`` of its GPU-time."""

    kwh: float
    gpu_hours: float


def energy(
    rows: Iterable[BillRow],
    watts_per_gpu: Mapping[str, float | None],
    grid_g_per_kwh: float | None,
    measured: Mapping[str, Measured] | None = None,
) -> list[EnergyRow]:
    """kWh and CO2 per job of ``rows``; ``watts_per_gpu``: job id -> watts one of its GPUs
    draws (``BOARD_POWER_W`` of its model); ``measured``: job id -> what its GPUs' energy
    counters measured. The GPU-hours not measured are estimated at ``watts_per_gpu``."""
    out = []
    for r in rows:
        m = (measured or {}).get(r.job_id)
        seen_h = 0.0 if m is None else min(m.gpu_hours, r.gpu_hours)
        rest_h = r.gpu_hours - seen_h
        w = watts_per_gpu.get(r.job_id)
        guess: float | None = 0.0
        if r.gpu_hours > 0 and seen_h >= MEASURED_SHARE * r.gpu_hours:
            source = "measured"
        else:
            source = "estimated" if seen_h <= 0 else "partly measured"
            guess = None if w is None or w != w else rest_h * w / 1000.0
        total = None if guess is None else guess + (0.0 if m is None else m.kwh)
        kwh = None if total is None else round(total, 6)
        co2 = (
            None
            if kwh is None or grid_g_per_kwh is None
            else round(kwh * grid_g_per_kwh / 1000.0, 6)
        )
        out.append(EnergyRow(r.tenant, r.job_id, kwh, co2, source))
    return out


def measured_energy(
    rows: Iterable[tuple[str, float, float, float, float]],
    since: float | None,
    until: float | None,
) -> dict[str, Measured]:
    """``Measured`` per job from stored (job_id, first second, last second, mJ, GPU
    thousandth-seconds) rows (one per job and hour), each counted by the share of its seconds
    inside ``[since, until)``: energy within one row is taken as spread evenly, so a window
    that cuts a row bills it pro rata."""
    lo = -math.inf if since is None else since
    hi = math.inf if until is None else until
    mj: dict[str, float] = defaultdict(float)
    milli_s: dict[str, float] = defaultdict(float)
    for job_id, first, last, e, cover in rows:
        if last <= first:
            inside = 1.0 if lo <= last < hi else 0.0
        else:
            inside = max(0.0, min(last, hi) - max(first, lo)) / (last - first)
        if inside > 0:
            mj[job_id] += e * inside
            milli_s[job_id] += cover * inside
    return {j: Measured(mj[j] / 3.6e9, _hours(milli_s[j])) for j in mj}


def energy_totals(rows: Iterable[EnergyRow]) -> dict[str, tuple[float | None, float | None]]:
    """(kWh, kg CO2) per tenant; None for a tenant with any job whose figure is unknown."""
    kwh: dict[str, float | None] = {}
    co2: dict[str, float | None] = {}
    for r in rows:
        for acc, v in ((kwh, r.kwh), (co2, r.co2_kg)):
            prev = acc.get(r.tenant, 0.0)
            acc[r.tenant] = None if prev is None or v is None else prev + v
    return {t: (kwh[t], co2[t]) for t in sorted(kwh)}


def tenant_totals(rows: Iterable[BillRow]) -> dict[str, float]:
    """GPU-hours per tenant, by tenant name."""
    totals: dict[str, float] = defaultdict(float)
    for r in rows:
        totals[r.tenant] += r.gpu_hours
    return {t: round(totals[t], 6) for t in sorted(totals)}


def write_csv(rows: Iterable[BillRow], file: TextIO | str | Path) -> None:
    """Write ``rows`` as CSV with the header tenant,job_id,name,gpu_hours."""
    if isinstance(file, str | Path):
        with open(file, "w", newline="", encoding="utf-8") as f:
            write_csv(rows, f)
        return
    out = csv.writer(file, lineterminator="\n")
    out.writerow(CSV_HEADER)
    for r in rows:
        out.writerow((r.tenant, r.job_id, r.name, f"{r.gpu_hours:.6f}"))


def to_csv(rows: Iterable[BillRow]) -> str:
    """``write_csv`` into a string (an HTTP response body)."""
    buf = io.StringIO()
    write_csv(rows, buf)
    return buf.getvalue()


def _hours(milli_s: float) -> float:
    # thousandths x seconds -> GPU-hours; rounded so 3/7 of a GPU for 7 h bills exactly 3.0
    return round(milli_s / GPU_MILLI / 3600.0, 9)
