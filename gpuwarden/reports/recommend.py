"""Recommendations from the facts alone, each citing the facts it rests on.

- **scaling**: with capacity facts, the planner's ``should_scale`` per GPU model (add N now or
  in K weeks, release N), citing the forecast, the plan's peak need with its buffer and the
  GPUs the fleet has; and where a model's measured utilisation is under its TCO break-even,
  that cloud on-demand costs less per used hour than owning. Without them, as the planning
  guideline's ``should_scale``: a long queue (p95 wait over ``WAIT_SCALE_UP_MIN``) on capacity
  mostly allocated (over ``BUSY_PCT``) says add GPUs; capacity mostly idle (allocated under
  ``IDLE_PCT``) with no queue says release some;
- **drain or RMA** each GPU gpuwarden holds unhealthy or at risk, with NVIDIA's action for its
  condition (the stored verdict's action, from the Xid catalogue and the hard signals);
- **idle capacity**: GPUs that averaged under 5 % utilisation, and GPU models under ``IDLE_PCT``;
- **quota changes**: tenants holding nearly all their quota while jobs wait, or a small part of it;
- **sleep**: the nodes the idle-node sleep policy would have put to sleep in its window, with
  the kWh a week that saves (``planning.sleep_plan`` over the period's readings);
- nodes with low availability to look at, and failures gpuwarden missed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuwarden.health import AT_RISK_ACTION, GpuState
from gpuwarden.reports._usage import IDLE_UTIL_PCT
from gpuwarden.reports.model import Facts
from gpuwarden.reports.templates import add_when
from gpuwarden.wording import counted, figure, plural

WAIT_SCALE_UP_MIN = 30.0
BUSY_PCT = 80.0
IDLE_PCT = 30.0
LOW_AVAILABILITY_PCT = 95.0
QUOTA_FULL_PCT = 90.0
QUOTA_SPARE_PCT = 25.0
MAX_GPUS_LISTED = 10


@dataclass(frozen=True)
class Recommendation:
    id: str
    kind: str  # scale-up, scale-down, tco, drain, rma, idle, sleep, quota, availability, missed
    text: str
    cites: tuple[str, ...]  # "section.field = value" of the facts it rests on


def recommend(f: Facts) -> list[Recommendation]:
    out: list[tuple[str, str, tuple[str, ...]]] = []
    s = f.scheduler
    if f.capacity is not None:
        out += _capacity(f)
    if s is not None:
        wait = s.queue_wait_p95_min
        cites = (
            f"scheduler.queue_wait_p95_min = {wait}",
            f"scheduler.allocated_pct = {s.allocated_pct}",
        )
        # with capacity facts, the planner's per-model decisions replace the whole-fleet rule
        rule = f.capacity is None
        if rule and wait is not None and wait > WAIT_SCALE_UP_MIN and s.allocated_pct > BUSY_PCT:
            hours = f.period.hours
            need = math.ceil(
                s.gpu_hours / hours / (BUSY_PCT / 100.0) - s.capacity_gpu_hours / hours
            )
            out.append(("scale-up", f"Add capacity: jobs waited {figure(wait)} min at p95 while "
                        f"{figure(s.allocated_pct)}% of GPU-hours were allocated; about {counted(max(need, 1), 'more GPU')} "
                        f"would bring allocation to {figure(BUSY_PCT)}%.", cites))  # fmt: skip
        elif rule and s.allocated_pct < IDLE_PCT and (wait is None or wait <= WAIT_SCALE_UP_MIN):
            out.append(("scale-down", f"Release capacity: only {figure(s.allocated_pct)}% of GPU-hours "
                        f"were allocated and jobs waited {figure(wait if wait is not None else 0)} min at p95.",
                        cites))  # fmt: skip
        for t in s.by_tenant:
            q = t.quota_used_pct
            if q is None:
                continue
            qc = (f"scheduler.by_tenant[{t.tenant}].quota_used_pct = {q}", *cites[:1])
            if q > QUOTA_FULL_PCT and wait is not None and wait > WAIT_SCALE_UP_MIN:
                out.append(("quota", f"Raise the quota of {t.tenant}: it held {figure(q)}% of its "
                            f"{figure(t.quota_gpus)}-GPU quota on average while jobs waited.", qc))  # fmt: skip
            elif q < QUOTA_SPARE_PCT:
                out.append(("quota", f"Lower the quota of {t.tenant} or lend it out: it used "
                            f"{figure(q)}% of its {figure(t.quota_gpus)}-GPU quota.", qc))  # fmt: skip
    for g in f.risk.gpus[:MAX_GPUS_LISTED]:
        name = f"{g.hostname} GPU {g.gpu}"
        cite = (f"risk.gpus[{name}].state = {g.state}",)
        if g.state == str(GpuState.UNHEALTHY):
            rma = "RMA" in g.action or "replace" in g.action.lower()
            out.append(("rma" if rma else "drain", f"{'Send for RMA' if rma else 'Drain'}: {name} "
                        f"({g.model}) is unhealthy. NVIDIA's action: {g.action}", cite))  # fmt: skip
        else:
            out.append(
                ("drain", f"Watch {name} ({g.model}): at risk. {g.action or AT_RISK_ACTION}", cite)
            )
    u = f.utilisation
    if u is not None:
        if u.idle_gpus:
            out.append(("idle", f"{counted(u.idle_gpus, 'GPU')} idled under {figure(IDLE_UTIL_PCT)}% "
                        "utilisation on average: give "
                        f"{plural(u.idle_gpus, 'it', 'them')} interruptible work or let "
                        f"{plural(u.idle_gpus, 'it', 'them')} sleep.", (f"utilisation.idle_gpus = {u.idle_gpus}",)))  # fmt: skip
        for m in u.by_model:
            if m.gpu_util_pct is not None and m.gpu_util_pct < IDLE_PCT:
                out.append(("idle", f"{m.model} GPUs averaged {figure(m.gpu_util_pct)}% utilisation: "
                            "move work onto them or release some.",
                            (f"utilisation.by_model[{m.model}].gpu_util_pct = {m.gpu_util_pct}",)))  # fmt: skip
    z = f.sleep
    if z is not None and z.nodes_sleeping:
        out.append(("sleep", f"Let {counted(z.nodes_sleeping, 'node')} sleep in the {z.window} "
                    f"window: {plural(z.nodes_sleeping, 'it', 'they')} stayed under "
                    f"the {figure(z.below_util_pct)}% utilisation threshold there, and sleeping "
                    f"{plural(z.nodes_sleeping, 'it', 'them')} saves about "
                    f"{figure(z.kwh_saved_per_week)} kWh a week.",
                    (f"sleep.nodes_sleeping = {z.nodes_sleeping}",
                     f"sleep.below_util_pct = {z.below_util_pct}",
                     f"sleep.kwh_saved_per_week = {z.kwh_saved_per_week}")))  # fmt: skip
    if f.availability is not None:
        low = [n for n in f.availability.by_node if n.availability_pct < LOW_AVAILABILITY_PCT]
        for n in sorted(low, key=lambda n: n.availability_pct)[:MAX_GPUS_LISTED]:
            out.append(("availability", f"Look at {n.hostname}: {figure(n.availability_pct)}% available, "
                        f"{figure(n.downtime_h)} h of GPU downtime.",
                        (f"availability.by_node[{n.hostname}].availability_pct = {n.availability_pct}",)))  # fmt: skip
    fl = f.failures
    if fl.missed_near:
        near = fl.missed_near
        out.append(("missed", f"{counted(near, 'missed failure')} came near the at-risk line "
                    f"before failing: review {plural(near, 'its', 'their')} telemetry, and "
                    "consider a lower at_risk_threshold or `gpuwarden train` on this fleet's "
                    "history.",
                    (f"failures.missed_near = {near}",)))  # fmt: skip
    if fl.missed > fl.missed_near:
        quiet = fl.missed - fl.missed_near
        out.append(("missed", f"{counted(quiet, 'missed failure')} showed little before "
                    f"failing (a risk under half the line throughout): no line or retraining "
                    f"on this telemetry would have flagged {plural(quiet, 'it', 'them')}; "
                    "look for what the telemetry lacks (a field the store does not have, a "
                    "kernel log) rather than at the model.",
                    (f"failures.missed = {fl.missed}", f"failures.missed_near = {fl.missed_near}")))  # fmt: skip
    return [Recommendation(f"R{i}", k, t, c) for i, (k, t, c) in enumerate(out, 1)]


def _capacity(f: Facts) -> list[tuple[str, str, tuple[str, ...]]]:
    """The planner's decisions and the break-even per GPU model (``f.capacity`` is set)."""
    assert f.capacity is not None
    out: list[tuple[str, str, tuple[str, ...]]] = []
    buffer = f.capacity.buffer
    for m in f.capacity.by_model:
        at = f"capacity.by_model[{m.model}]"
        cites = (
            f"{at}.action = {m.action}", f"{at}.change_gpus = {m.change_gpus}",
            f"{at}.forecast_mean_gpus = {m.forecast_mean_gpus}",
            f"{at}.peak_need_gpus = {m.peak_need_gpus}", f"{at}.gpus = {m.gpus}",
            f"capacity.buffer = {buffer}",
        )  # fmt: skip
        plan = (f"the forecast wants {counted(m.forecast_mean_gpus, 'GPU')} on average next week "
                f"and the plan needs {counted(m.peak_need_gpus, 'GPU')} at its peak with the "
                f"{figure(buffer)} buffer against the {counted(m.gpus, 'GPU')} the fleet has.")  # fmt: skip
        if m.action == "add":
            out.append(("scale-up", f"Add {counted(m.change_gpus, f'{m.model} GPU')} {add_when(m.in_weeks)}: {plan}",
                        (*cites, f"{at}.in_weeks = {m.in_weeks}")))  # fmt: skip
        elif m.action == "release":
            out.append(
                (
                    "scale-down",
                    f"Release {counted(m.change_gpus, f'{m.model} GPU')}: {plan}",
                    cites,
                )
            )
        be, util = m.break_even_own_pct, m.gpu_util_pct
        if be is not None and util is not None and util < be:
            out.append(("tco", f"{m.model} GPUs averaged {figure(util)}% utilisation, under the {figure(be)}% "
                        "break-even of owning against cloud on-demand: for this load renting "
                        "by the hour costs less per used GPU-hour than owning.",
                        (f"{at}.gpu_util_pct = {util}", f"{at}.break_even_own_pct = {be}",
                         f"capacity.prices = {f.capacity.prices}")))  # fmt: skip
    return out
