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
    echo: Callable[[str], None] = print,
) -> str | None:
    """Replay the last ``hours`` of ``store``; returns the flagged GPU's UUID, or None when the
    model flags nothing in that window (the caller then shows the scripted loop)."""
    from gpuwarden.scheduler import Job, NodeSpec, Scheduler
    from gpuwarden.scheduler.jobs import PriorityClass
    from gpuwarden.scheduler_hooks.bundled import BundledTagger, SchedulerTarget
    from gpuwarden.serve.assessors import default_assessor
    from gpuwarden.serve.service import RiskService

    gpus = store.gpus()
    if gpus.empty:
        return None
    end = float(gpus["last_ts"].max())
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
    service = RiskService(
        store,
        # hard signals between two replayed rounds count too (the live default looks 15 min back)
        assess=default_assessor(lookback_s=step_h * 3600),
        taggers=[BundledTagger(SchedulerTarget(scheduler))],
        interval_s=step_h * 3600,
        breaker_share=1.0,
        clock=lambda: clock[0],
    )
    echo(
        f"      replaying the last {hours:g} h of {len(slots)} GPUs every {step_h:g} h with the "
        "shipped model and hard signals; every GPU runs a critical inference job"
    )
    target: Any = None
    t = end - hours * 3600
    while t <= end + 1:
        clock[0] = t
        when = _hhmm(t)
        for tr in service.tick(t):
            if tr.new is not GpuState.AT_RISK or target is not None:
                if tr.new is GpuState.UNHEALTHY:
                    echo(
                        f"      {when}  {tr.gpu.hostname}/{tr.gpu.index} -> unhealthy (hard signal)"
                    )
                continue
            target = tr.gpu
            echo(
                f"      {when}  {tr.gpu.hostname}/{tr.gpu.index} {tr.old} -> at-risk, risk {_risk(tr)}"
            )
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
            f"the board has since been replaced, so the slot is {health} again"
            if replaced
            else f"the GPU is {health} in the bundled scheduler now"
        )
    )
    return str(target.uuid)


def _hhmm(ts: float) -> str:
    import time

    return time.strftime("%m-%d %H:%M", time.gmtime(ts))


def _risk(tr: Any) -> str:
    risk = getattr(tr, "risk", math.nan)
    return "unknown" if risk is None or math.isnan(risk) else f"{risk:.2f}"
