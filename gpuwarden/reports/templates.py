"""The template summary: sentences written by code from the facts, one topic each.

The report falls back to these when no LLM is configured or reachable, and an LLM sentence that
fails the claim checker twice is replaced by the template sentence of its topic. Every template
sentence passes the checker itself (a test holds them to it).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwarden.planning.demand import ANY_MODEL
from gpuwarden.reports.model import Change, Facts
from gpuwarden.wording import counted, figure, plural
from gpuwarden.wording import number as _n


@dataclass(frozen=True)
class Sentence:
    topic: str
    text: str


def change_unit(n: float, unit: str) -> str:
    """A value of a week-on-week change with its unit: the units of ``facts.headline`` are
    symbols ("%", "kWh", "min"), which do not inflect, or plural nouns ("GPUs", "failures"),
    which agree with the value ("1 failure"); a percentage takes no space and keeps the decimals
    the facts give it ("98.66%", as the summary and the availability tables say)."""
    if unit == "%":
        return f"{figure(n)}%"
    return counted(n, unit.removesuffix("s"), unit)


def change_size(c: Change) -> str:
    """How much a headline number moved: a percentage in points (fleet availability from 96.2%
    to 98.7% is "+2.5 percentage points", not "+2.6%"), anything else against its old value.
    Points are the difference of the values as shown (at the facts' own decimals)."""
    if c.unit == "%":
        points = round(c.after - c.before, 2)
        return (
            f"{'+' if points > 0 else ''}{figure(points)} percentage {plural(abs(points), 'point')}"
        )
    return f"{c.change_pct:+g}%" if c.change_pct is not None else ""


def summary(f: Facts) -> list[Sentence]:
    out: list[Sentence] = []

    def say(topic: str, text: str) -> None:
        out.append(Sentence(topic, text))

    last_day = _last_day(f)
    say(
        "period",
        f"This report covers {f.period.since[:10]} to {last_day} ({_n(f.period.hours)} h).",
    )
    inv = f.inventory
    models = ", ".join(f"{n} {m}" for m, n in inv.gpus_by_model.items())
    if inv.gpus:
        say("inventory", f"The fleet has {counted(inv.gpus, 'GPU')} on "
            f"{counted(inv.nodes, 'node')} ({models}).")  # fmt: skip
    else:
        say("inventory", "The store holds no GPU for this period: no telemetry was collected "
            "or loaded into it (gpuwarden collect, or gpuwarden ingest for history).")  # fmt: skip
    if inv.added or inv.replaced or inv.missing:
        added, replaced, missing = len(inv.added), len(inv.replaced), len(inv.missing)
        say("inventory", f"In the period {counted(added, 'GPU')} {plural(added, 'was', 'were')} "
            f"added, {_n(replaced)} replaced, and {_n(missing)} {plural(missing, 'is', 'are')} "
            "missing (stopped reporting).")  # fmt: skip
    a = f.availability
    if a is not None:
        say("availability", f"Fleet availability was {a.fleet_availability_pct:g}%, with "
            f"{_n(a.fleet_downtime_h)} h of GPU downtime.")  # fmt: skip
        worst = min(a.by_node, key=lambda n: n.availability_pct)
        if worst.availability_pct < 100:
            say("availability", f"The least available node was {worst.hostname} at "
                f"{worst.availability_pct:g}% ({_n(worst.downtime_h)} h down).")  # fmt: skip
    fl = f.failures
    if fl.failures:
        lead = (f", with a median lead time of {_n(fl.median_lead_time_h)} h"
                if fl.median_lead_time_h is not None else "")  # fmt: skip
        unwatched = (f" {_n(fl.unwatched)} had no verdict stored in the two weeks before "
                     "(gpuwarden was not watching them)." if fl.unwatched else "")  # fmt: skip
        near = (f" Of those missed, {_n(fl.missed_near)} came near the at-risk line before "
                "failing (a risk of at least half of it)." if fl.missed else "")  # fmt: skip
        say("failures", f"{counted(fl.failures, 'GPU')} failed: gpuwarden flagged {_n(fl.caught)} "
            f"before failure{lead}, and missed {_n(fl.missed)}.{near}{unwatched}")  # fmt: skip
    else:
        say("failures", "No GPU failed in the period.")
    r = f.risk
    say("risk", f"Now {counted(r.at_risk_gpus, 'GPU')} {plural(r.at_risk_gpus, 'is', 'are')} at "
        f"risk and {_n(r.unhealthy_gpus)} {plural(r.unhealthy_gpus, 'is', 'are')} unhealthy.")  # fmt: skip
    al = f.alerts
    say("alerts", f"gpuwarden made {counted(al.transitions, 'state transition')}: "
        f"{_n(al.to_at_risk)} to at-risk, {_n(al.to_unhealthy)} to unhealthy and {_n(al.to_ok)} "
        "back to ok.")  # fmt: skip
    if al.retags_ok is not None:
        say("alerts", f"Scheduler hooks re-tagged nodes {counted(al.retags_ok, 'time')} and failed "
            f"{counted(al.retags_failed, 'time')}.")  # fmt: skip
    x = f.xids
    if x.by_code:
        top = x.by_code[0]
        say("xids", f"{counted(x.xids, 'Xid')} {plural(x.xids, 'was', 'were')} logged; the most "
            f"frequent was Xid {top.code} ({top.name}, {top.xid_class}), "
            f"{counted(top.count, 'time')} on {counted(top.gpus, 'GPU')}.")  # fmt: skip
    else:
        say("xids", "No Xid was logged.")
    if x.hard_signals:
        say("xids", f"Hard signals: {_n(sum(x.hard_signals.values()))} in total.")
    if (m := f.memory_errors) is not None:
        types = ", ".join(f"{_n(c.errors)} {c.ecc}" for c in m.by_type)
        say("memory_errors", f"The HBM error log holds {counted(m.errors, 'memory error')} on "
            f"{counted(m.devices, 'device')} ({types}); {_n(m.uncorrectable)} "
            f"{plural(m.uncorrectable, 'was', 'were')} uncorrectable.")  # fmt: skip
    u = f.utilisation
    if u is not None and u.fleet_gpu_util_pct is not None:
        mem = (
            f" and memory use {u.fleet_memory_used_pct:g}%"
            if u.fleet_memory_used_pct is not None
            else ""
        )
        say("utilisation", f"Mean GPU utilisation was {u.fleet_gpu_util_pct:g}%{mem}.")
    e = f.energy
    if e is not None:
        co2 = (f", about {_n(e.co2_kg)} kg of CO2 at {_n(e.grid_g_co2_per_kwh)} g per kWh"
               if e.co2_kg is not None and e.grid_g_co2_per_kwh is not None else "")  # fmt: skip
        say("energy", f"The GPUs used {_n(e.energy_kwh)} kWh{co2}.")
    s = f.scheduler
    if s is not None:
        waits = (f"; queue wait median {_n(s.queue_wait_median_min)} min and p95 "
                 f"{_n(s.queue_wait_p95_min)} min" if s.queue_wait_p95_min is not None else "")  # fmt: skip
        say("scheduler", f"{counted(s.jobs_started, 'job')} started{waits}; "
            f"{counted(s.preemptions, 'preemption')}.")  # fmt: skip
        say("scheduler", f"Tenants were allocated {counted(s.gpu_hours, 'GPU-hour')}, "
            f"{s.allocated_pct:g}% of the capacity.")  # fmt: skip
    if f.cost is not None:
        say("cost", f"Allocated GPU time cost {_n(f.cost.total)} {f.cost.currency} in total.")
    out += [Sentence("capacity", t) for t in _capacity(f)]
    out += [Sentence("sleep", t) for t in _sleep(f)]
    out += [Sentence("spot", t) for t in _spot(f)]
    for w in f.queue_wait_by_model or []:
        late = f", {_n(w.still_waiting)} still waiting" if w.still_waiting else ""
        who = "Jobs that allow any GPU model" if w.model == ANY_MODEL else f"{w.model} jobs"
        least = "at least " if w.still_waiting else ""  # their waits so far: lower bounds
        say("scheduler", f"{who} waited {least}{_n(w.wait_p50_min)} min at the median and "
            f"{least}{_n(w.wait_p90_min)} min at p90 ({counted(w.jobs, 'job')} submitted{late}).")  # fmt: skip
    moved = [
        # "failures from 11 to 5", not "failures from 11 to 5 failures"
        f"{c.metric} from {figure(c.before) + '%' if c.unit == '%' else _n(c.before)} to "
        + (_n(c.after) if c.unit.lower() == c.metric.lower() else change_unit(c.after, c.unit))
        + (f" ({change_size(c)})" if change_size(c) else "")
        for c in f.changes[:3]
    ]
    if moved:
        say("changes", f"Against the previous period, {'; '.join(moved)}.")
    return out


def _capacity(f: Facts) -> list[str]:
    c = f.capacity
    if c is None:
        return []
    out = [f"The capacity plan multiplies the demand forecast by a {c.buffer:g} buffer and "
           f"orders GPUs {counted(c.lead_weeks, 'week')} ahead."]  # fmt: skip
    for m in c.by_model:
        if m.action == "add":
            do = f"add {counted(m.change_gpus, 'GPU')} {add_when(m.in_weeks)}"
        elif m.action == "release":
            do = f"release {counted(m.change_gpus, 'GPU')}"
        else:
            do = f"hold at the {counted(m.gpus, 'GPU')} the fleet has"
        out.append(f"For {m.model} the forecast wants {counted(m.forecast_mean_gpus, 'GPU')} on "
                   f"average next week, between {_n(m.forecast_low_gpus)} and "
                   f"{counted(m.forecast_high_gpus, 'GPU')} in its hourly interval; the plan says "
                   f"{do}.")  # fmt: skip
        if m.break_even_own_pct is not None and m.gpu_util_pct is not None:
            out.append(f"Owning {m.model} GPUs breaks even against cloud on-demand at "
                       f"{m.break_even_own_pct:g}% utilisation; they averaged {m.gpu_util_pct:g}%.")  # fmt: skip
    return out


def _sleep(f: Facts) -> list[str]:
    z = f.sleep
    if z is None:
        return []
    where = "UTC" if not z.utc_offset_h else "local time"
    policy = f"Replaying the sleep policy ({z.window} {where}, under the {z.below_util_pct:g}% utilisation threshold)"
    if not z.nodes_sleeping:
        return [f"{policy}, no node would have slept."]
    return [f"{policy}, {counted(z.nodes_sleeping, 'node')} would have slept for "
            f"{counted(z.node_hours_asleep, 'node-hour')}, saving {_n(z.kwh_saved)} kWh in the "
            f"period, about {_n(z.kwh_saved_per_week)} kWh a week."]  # fmt: skip


def _spot(f: Facts) -> list[str]:
    sp = f.spot
    if sp is None:
        return []
    share = (f", {sp.interruptible_on_spot_pct:g}% of the interruptible jobs' GPU-hours"
             if sp.interruptible_on_spot_pct is not None else "")  # fmt: skip
    out = [f"{counted(sp.nodes, 'spot node')} with {counted(sp.gpus, 'GPU')} held "
           f"{counted(sp.gpu_hours, 'GPU-hour')}{share}."]  # fmt: skip
    if sp.critical_gpu_hours_on_spot:
        out.append(f"Critical work held {counted(sp.critical_gpu_hours_on_spot, 'GPU-hour')} on "
                   "spot nodes, where only interruptible jobs belong.")  # fmt: skip
    if sp.saved is not None:
        pct = f" ({sp.saved_pct:g}% less)" if sp.saved_pct is not None else ""
        out.append(
            f"Running them on spot saved {_n(sp.saved)} {sp.currency}{pct} against on-demand prices for the same GPU-hours."
        )
    if sp.reclaims:
        out.append(f"The provider reclaimed spot nodes {counted(sp.reclaims, 'time')}; "
                   f"{counted(sp.jobs_evicted, 'job')} checkpointed and requeued, and "
                   f"{counted(sp.gpu_hours_lost, 'GPU-hour')} of work since the last checkpoints was lost.")  # fmt: skip
    else:
        out.append("No spot node was reclaimed.")
    return out


def add_when(in_weeks: int) -> str:
    """When the capacity plan adds GPUs: "now" or "in 3 weeks"."""
    return "now" if in_weeks == 0 else f"in {counted(in_weeks, 'week')}"


def _last_day(f: Facts) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(f.period.until_ts - 1, UTC).strftime("%Y-%m-%d")


#: Words that tie an LLM sentence to a template topic, for replacing a failing one.
TOPIC_WORDS: dict[str, str] = {
    "period": r"covers|period|week of",
    "inventory": r"inventory|added|replac|missing|nodes\b",
    "availability": r"availab|downtime|\bdown\b",
    "failures": r"fail|lead time|caught|missed",
    "risk": r"at[- ]risk|unhealthy|risk",
    "alerts": r"transition|alert|re-?tag",
    "xids": r"xid|hard signal",
    "memory_errors": r"hbm|ecc|correctable|memory error",
    "utilisation": r"utili[sz]|memory|idle",
    "energy": r"energy|kwh|mwh|co2|carbon",
    "scheduler": r"queue|wait|preempt|jobs|gpu-hours|allocat",
    "cost": r"cost|spen|price",
    "capacity": r"forecast|break[- ]even|buffer|capacity plan|\badd\b|\breleas|\border",
    "sleep": r"sleep|asleep|wake",
    "spot": r"spot|reclaim|interruptib|on-demand",
    "changes": r"previous|week before|rose|fell|increase|decrease|changed",
}
