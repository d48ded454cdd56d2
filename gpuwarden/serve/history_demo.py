"""The risk loop replayed over a stored history with the real model (what `make demo` shows).

The demo's store holds weeks of a simulated fleet in which some GPUs degrade. This replays the
last two days through ``RiskService`` with the default assessor (the shipped model plus the hard
signals), every GPU slot running a critical inference job in a bundled scheduler, and narrates
the GPU the model flags: its risk climbing, the at-risk decision with the model's reasons, and
the scheduler telling the job on it to checkpoint and leave.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gpuwarden.health import GpuState
from gpuwarden.store.base import Store


def run_history_loop_demo(
    store: Store,
    *,
    hours: float = 48.0,
    step_h: float = 4.0,
    end: float | None = None,
    echo: Callable[[str], None] = print,
    at_risk: dict[str, float] | None = None,
    focus: str | None = None,
) -> str | None:
    """Replay the ``hours`` of ``store`` up to ``end`` (default: its newest sample); returns the
    narrated GPU's UUID, or None when the model flags nothing in that window (the caller then
    shows another window or the scripted loop). The narrated GPU is ``focus`` (a UUID) when it
    is flagged, else the first GPU flagged; every other at-risk or unhealthy decision gets a
    line of its own. The failures the store records say what became of the narrated GPU.
    ``at_risk`` gets the UUID of every GPU turned at-risk in the window, with the round it was
    first turned at-risk."""
    from gpuwarden.alerts.decision import DecisionEngine
    from gpuwarden.scheduler import Job, NodeSpec, Scheduler
    from gpuwarden.scheduler.jobs import PriorityClass
    from gpuwarden.scheduler_hooks.bundled import BundledTagger, SchedulerTarget
    from gpuwarden.serve.assessors import decision_lines, default_assessor
    from gpuwarden.serve.service import RiskService

    gpus = store.gpus()
    if gpus.empty:
        return None
    newest = float(gpus["last_ts"].max())
    end = newest if end is None else min(float(end), newest)
    slots = gpus.sort_values("last_ts").drop_duplicates(["hostname", "gpu"], keep="last")
    per_node = slots.groupby("hostname")
    scheduler = Scheduler(
        [
            NodeSpec.uniform(str(host), 64000, 262144, len(g), str(g["model"].iloc[0]))
            for host, g in per_node
        ],
        policy="bestfit",
    )
    for i in range(len(slots)):  # the fleet is full of critical, non-interruptible work
        scheduler.place(Job(f"inference-{i:03d}", priority=PriorityClass.INFERENCE))
    job_on = {
        (task.node, gpu): job_id
        for job_id, placement in scheduler.placements.items()
        for task in placement.tasks
        for gpu in task.gpus
    }
    clock = [end - hours * 3600]
    enter, leave = decision_lines()  # the model's own line, as gpuwarden serve decides
    service = RiskService(
        store,
        # hard signals between two replayed rounds count too (the live default looks 15 min back)
        assess=default_assessor(lookback_s=step_h * 3600),
        engine=DecisionEngine(enter_at=enter, exit_below=leave),
        taggers=[BundledTagger(SchedulerTarget(scheduler))],
        interval_s=step_h * 3600,
        breaker_share=1.0,
        clock=lambda: clock[0],
        verdicts=None,  # a replay of the past: the store's verdicts are the backfill's
    )
    window = f"the last {hours:g} h" if end >= newest else f"the {hours:g} h to {_hhmm(end)}"
    echo(
        f"      replaying {window} of {len(slots)} GPUs every {step_h:g} h with the "
        f"shipped model and hard signals, at-risk from {enter:.2f} as gpuwarden serve decides; "
        "every GPU runs a critical inference job"
    )
    target: Any = None
    first: Any = None  # the first GPU flagged, (gpu, ts), when focus is not it
    flag_ts = end
    t = end - hours * 3600
    while t <= end + 1:
        clock[0] = t
        when = _hhmm(t)
        for tr in service.tick(t):
            slot = f"{tr.gpu.hostname}/{tr.gpu.index}"
            if tr.new is GpuState.AT_RISK and at_risk is not None:
                at_risk.setdefault(str(tr.gpu.uuid), t)
            if tr.new is GpuState.UNHEALTHY:
                echo(f"      {when}  {slot} -> unhealthy (hard signal)")
            if tr.new is not GpuState.AT_RISK:
                continue
            wanted = str(tr.gpu.uuid) == focus if focus is not None else first is None
            if target is not None or not wanted:
                first = first or (tr.gpu, t)
                echo(f"      {when}  {slot} {tr.old} -> at-risk, risk {_risk(tr)}")
                continue
            target, flag_ts = tr.gpu, t
            echo(f"      {when}  {slot} {tr.old} -> at-risk, risk {_risk(tr)}")
            for why in tr.reasons:
                echo(f"               because {why}")
            for row in service.audit.rows(hook="bundled", since=t):
                if row.uuid == tr.gpu.uuid:
                    echo(f"               bundled scheduler: {row.result}")
            health = SchedulerTarget(scheduler).gpu_health(tr.gpu.hostname, tr.gpu.index)
            echo(
                f"               {tr.gpu.hostname}/{tr.gpu.index} is now {health} in the bundled scheduler"
            )
        t += step_h * 3600
    if target is None and first is not None:  # focus was not flagged: the first GPU that was
        target, flag_ts = first
    if target is None:
        echo("      the model flagged no GPU in this window")
        return None
    health = SchedulerTarget(scheduler).gpu_health(target.hostname, target.index)
    job = job_on.get((target.hostname, target.index), "-")
    now_there = slots[(slots["hostname"] == target.hostname) & (slots["gpu"] == target.index)]
    replaced = not now_there.empty and str(now_there["uuid"].iloc[0]) != str(target.uuid)
    echo(
        f"      {job} was asked to leave {target.hostname}/{target.index} when it was flagged; "
        + (
            f"the slot is {health} in the bundled scheduler at the replay's end, and the board "
            "has since been replaced"
            if replaced
            else f"the GPU is {health} in the bundled scheduler now"
        )
    )
    already = "; at-risk from the replay's first round" if flag_ts <= end - hours * 3600 else ""
    echo(f"      what became of it: {_fate(store, target.uuid, flag_ts)}{already}")
    return str(target.uuid)


def last_catchable_failure(store: Store, *, lead_s: float = 86400.0) -> Any:
    """The store's most recent failure whose precursor began ``lead_s`` or more before it (a
    row of ``read_failures``), or None."""
    failures = store.read_failures()
    if failures.empty:
        return None
    lead = failures["ts"] - failures["precursor_start_ts"]
    catchable = failures[lead.notna() & (lead >= lead_s)]
    return None if catchable.empty else catchable.sort_values("ts").iloc[-1]


def _fate(store: Store, uuid: str, flagged_at: float) -> str:
    """What the store's recorded failures say of the GPU ``uuid`` after ``flagged_at``."""
    failures = store.read_failures(start=flagged_at)
    mine = failures[failures["uuid"].astype(str) == str(uuid)]
    if mine.empty:
        return "no failure of this board is recorded since (a false flag, so far)"
    f = mine.sort_values("ts").iloc[0]
    hours = (float(f["ts"]) - flagged_at) / 3600
    return f"the board failed {hours:.0f} h after it was flagged ({f['kind']}, as recorded)"


def _hhmm(ts: float) -> str:
    import time

    return time.strftime("%m-%d %H:%M", time.gmtime(ts))


def _risk(tr: Any) -> str:
    risk = getattr(tr, "risk", math.nan)
    return "unknown" if risk is None or math.isnan(risk) else f"{risk:.2f}"
