"""The template summary: sentences written by code from the facts, one topic each.

The report falls back to these when no LLM is configured or reachable, and an LLM sentence that
fails the claim checker twice is replaced by the template sentence of its topic. Every template
sentence passes the checker itself (a test holds them to it).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwarden.reports.model import Facts


@dataclass(frozen=True)
class Sentence:
    topic: str
    text: str


def _n(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.1f}".rstrip("0").rstrip(".") if x != int(x) else f"{int(x):,}"


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
    say("inventory", f"The fleet has {inv.gpus} GPUs on {inv.nodes} nodes ({models}).")
    if inv.added or inv.replaced or inv.missing:
        say("inventory", f"In the period {len(inv.added)} GPUs were added, {len(inv.replaced)} "
            f"replaced, and {len(inv.missing)} are missing (stopped reporting).")  # fmt: skip
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
        say("failures", f"{fl.failures} GPUs failed: gpuwarden flagged {fl.caught} of them before "
            f"they failed{lead}, and missed {fl.missed}.")  # fmt: skip
    else:
        say("failures", "No GPU failed in the period.")
    r = f.risk
    say("risk", f"Now {r.at_risk_gpus} GPUs are at risk and {r.unhealthy_gpus} are unhealthy.")
    al = f.alerts
    say("alerts", f"gpuwarden made {al.transitions} state transitions: {al.to_at_risk} to at-risk, "
        f"{al.to_unhealthy} to unhealthy and {al.to_ok} back to ok.")  # fmt: skip
    if al.retags_ok is not None:
        say("alerts", f"Scheduler hooks re-tagged nodes {al.retags_ok} times and failed "
            f"{al.retags_failed} times.")  # fmt: skip
    x = f.xids
    if x.by_code:
        top = x.by_code[0]
        say("xids", f"{x.xids} Xids were logged; the most frequent was Xid {top.code} "
            f"({top.name}, {top.xid_class}), {top.count} times on {top.gpus} GPUs.")  # fmt: skip
    else:
        say("xids", "No Xid was logged.")
    if x.hard_signals:
        say("xids", f"Hard signals: {sum(x.hard_signals.values())} in total.")
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
        say("scheduler", f"{s.jobs_started} jobs started{waits}; {s.preemptions} preemptions.")
        say("scheduler", f"Tenants were allocated {_n(s.gpu_hours)} GPU-hours, {s.allocated_pct:g}% "
            f"of the capacity.")  # fmt: skip
    if f.cost is not None:
        say("cost", f"Allocated GPU time cost {_n(f.cost.total)} {f.cost.currency} in total.")
    out += [Sentence("capacity", t) for t in _capacity(f)]
    for c in f.changes[:3]:
        pct = f" ({c.change_pct:+g}%)" if c.change_pct is not None else ""
        say("changes", f"Against the previous period, {c.metric} changed from {_n(c.before)} to "
            f"{_n(c.after)} {c.unit}{pct}.")  # fmt: skip
    return out


def _capacity(f: Facts) -> list[str]:
    c = f.capacity
    if c is None:
        return []
    out = [f"The capacity plan multiplies the demand forecast by a {c.buffer:g} buffer and "
           f"orders GPUs {c.lead_weeks} weeks ahead."]  # fmt: skip
    for m in c.by_model:
        if m.action == "add":
            when = "now" if m.in_weeks == 0 else f"in {m.in_weeks} weeks"
            do = f"add {m.change_gpus} {gpus_word(m.change_gpus)} {when}"
        elif m.action == "release":
            do = f"release {m.change_gpus} {gpus_word(m.change_gpus)}"
        else:
            do = f"hold at the {m.gpus} GPUs the fleet has"
        out.append(f"For {m.model} the forecast wants {_n(m.forecast_mean_gpus)} GPUs on average "
                   f"next week, between {_n(m.forecast_low_gpus)} and {_n(m.forecast_high_gpus)} "
                   f"GPUs in its hourly interval; the plan says {do}.")  # fmt: skip
        if m.break_even_own_pct is not None and m.gpu_util_pct is not None:
            out.append(f"Owning {m.model} GPUs breaks even against cloud on-demand at "
                       f"{m.break_even_own_pct:g}% utilisation; they averaged {m.gpu_util_pct:g}%.")  # fmt: skip
    return out


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
    "utilisation": r"utili[sz]|memory|idle",
    "energy": r"energy|kwh|mwh|co2|carbon",
    "scheduler": r"queue|wait|preempt|jobs|gpu-hours|allocat",
    "cost": r"cost|spen|price",
    "capacity": r"forecast|break[- ]even|buffer|capacity plan|\badd\b|\breleas|\border",
    "changes": r"previous|week before|rose|fell|increase|decrease|changed",
}


def gpus_word(n: int) -> str:
    """Counts in the report read as written English: "1 GPU", "5 GPUs"."""
    return "GPU" if n == 1 else "GPUs"
