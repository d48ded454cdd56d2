"""The risk loop for ``make demo``: a GPU degrades, is flagged with reasons, and its node is
re-tagged in the bundled scheduler (the running critical job is told to checkpoint and leave).

Everything is in process and on simulated time: a live simulated fleet collected into an
in-memory store, the decision engine, the audit log and a bundled scheduler built from the
fleet's nodes. ``assess`` defaults to a scripted stand-in for the model (one GPU's risk ramps
up); pass ``gpuwarden.serve.assessors.default_assessor()`` to score with the trained model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuwarden.alerts.base import RiskAssessment
from gpuwarden.serve.assessors import Assessor, combine, decision_lines
from gpuwarden.telemetry import GpuId
from gpuwarden.wording import counted


@dataclass(frozen=True)
class LoopDemoResult:
    target: GpuId
    flagged_at_step: int | None
    health: str  # the target GPU's health in the bundled scheduler at the end
    evicted: list[str]
    audit_rows: int


def ramp_assessor(target: GpuId, start_ts: float, step_s: float) -> Assessor:
    """A stand-in scorer: ``target``'s risk climbs 0.08 per step from 0.2, the rest stay low."""

    def assess(store: Any, at: float) -> list[RiskAssessment]:
        out = []
        for r in store.gpus().itertuples():
            gpu = GpuId(r.hostname, int(r.gpu), r.uuid, model=r.model)
            if gpu.uuid != target.uuid:
                out.append(RiskAssessment(gpu, at, 0.05))
                continue
            k = max(0.0, (at - start_ts) / step_s)
            risk = min(0.97, 0.2 + 0.08 * k)
            reasons = (
                f"single-bit ECC errors rising: {12 + 9 * k:.0f}/h (fleet median 0.4/h)",
                f"HBM {3 + 0.8 * k:.1f} C hotter than its neighbours under the same load",
            )
            action = "Move critical work off; schedule a GPU reset and a DCGM level-3 diag."
            out.append(RiskAssessment(gpu, at, risk, reasons=reasons, action=action))
        return out

    return assess


def run_loop_demo(
    *,
    nodes: int = 4,
    gpus_per_node: int = 4,
    seed: int = 7,
    steps: int = 12,
    step_s: int = 300,
    start_ts: float = 1_767_225_600.0,
    assess: Assessor | None = None,
    enter_at: float | None = None,
    echo: Callable[[str], None] = print,
) -> LoopDemoResult:
    """Run ``steps`` scoring intervals over a simulated fleet and narrate the loop; a GPU turns
    at-risk as ``gpuwarden serve`` turns it (``enter_at``: default, the shipped model's line)."""
    from gpuwarden.alerts.decision import DecisionEngine
    from gpuwarden.alerts.hard_signals import HardSignalAssessor
    from gpuwarden.collectors.sim import SimCollector
    from gpuwarden.scheduler import Job, NodeSpec, Scheduler
    from gpuwarden.scheduler_hooks.bundled import BundledTagger, SchedulerTarget
    from gpuwarden.serve.service import RiskService
    from gpuwarden.store.sqlite import SqliteStore

    sim = SimCollector.from_url(
        f"sim://?nodes={nodes}&gpus={gpus_per_node}&seed={seed}&step={step_s}&start={int(start_ts)}"
    )
    store = SqliteStore(":memory:")
    clock = [start_ts]
    try:
        first = sim.collect()
        store.write_batch(first)
        gpus = sorted({s.gpu for s in first.samples}, key=lambda g: (g.hostname, g.index))
        hosts = sorted({g.hostname for g in gpus})
        model = gpus[0].model or "H100-80GB"
        scheduler = Scheduler(
            [NodeSpec.uniform(h, 64000, 262144, gpus_per_node, model) for h in hosts],
            policy="bestfit",
        )
        # a critical job runs somewhere; the GPU under it is the one that degrades
        scheduler.place(Job("train-llm", gpus_per_task=1))
        task = scheduler.placements["train-llm"].tasks[0]
        target = next(g for g in gpus if (g.hostname, g.index) == (task.node, task.gpus[0]))
        scorer = assess or ramp_assessor(target, first.ts, step_s)
        enter, leave = decision_lines(enter_at)
        service = RiskService(
            store,
            assess=combine(scorer, HardSignalAssessor(lookback_s=2 * step_s)),
            engine=DecisionEngine(enter_at=enter, exit_below=leave),
            taggers=[BundledTagger(SchedulerTarget(scheduler))],
            interval_s=step_s,
            breaker_share=1.0,
            clock=lambda: clock[0],
        )
        echo(
            f"risk loop: {counted(len(gpus), 'GPU')} on {counted(len(hosts), 'node')}, "
            f"scored every {step_s} s"
        )
        scored_by = (
            "the scorer given" if assess else "a scripted risk ramp, standing in for the model"
        )
        echo(f"risk from {scored_by}; at-risk from {enter:.2f}, as gpuwarden serve decides")
        echo(f"watching {target.hostname}/{target.index} ({target.uuid})")
        flagged, evicted = None, []
        for step in range(steps):
            batch = first if step == 0 else sim.collect()
            if step:
                store.write_batch(batch)
            clock[0] = batch.ts
            changes = service.tick(batch.ts)
            status = service.engine.status(target.uuid)
            risk = "unknown" if math.isnan(status.risk) else f"{status.risk:.2f}"
            echo(f"  step {step:2d}: {target.hostname}/{target.index} risk {risk}  {status.state}")
            for t in changes:
                echo(f"  -> {t.gpu.hostname}/{t.gpu.index} {t.old} -> {t.new} ({t.source})")
                for why in t.reasons:
                    echo(f"       because {why}")
                if t.action:
                    echo(f"       recommended: {t.action}")
            for row in service.audit.rows(hook="bundled", since=batch.ts):
                echo(f"     bundled scheduler: {row.result}")
                evicted += [p for p in row.result.split("; ") if "checkpoint" in p]
            if changes and flagged is None:
                flagged = step
        health = SchedulerTarget(scheduler).gpu_health(target.hostname, target.index)
        echo(f"{target.hostname}/{target.index} is {health} in the bundled scheduler")
        return LoopDemoResult(target, flagged, health, evicted, service.audit.count())
    finally:
        sim.close()
        store.close()


__all__ = ["LoopDemoResult", "ramp_assessor", "run_loop_demo"]
