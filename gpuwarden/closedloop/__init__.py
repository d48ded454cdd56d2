"""Closed-loop evaluation: does flagging GPUs keep critical work off failing ones, at what cost?

    from gpuwarden.closedloop import run_closed_loop
    result = run_closed_loop(seeds=5, days=90, gpus=512, sudden=(0.0, 0.3, 0.5))
    print(render(result))                      # gpuwarden.closedloop.report.render

One simulated fleet per (seed, sudden share) is scored once (``fleet``); four arms (no
prediction, hard signals only, rule baseline, the model: ``arms``) replay it with the same workload (``workload``)
through the real decision engine, circuit breaker and bundled-scheduler tagger (``loop``);
``run`` drives the seeds and ``report`` aggregates them with confidence intervals and plots
(``report.demo_run`` is the short version ``gpuwarden demo`` prints).
docs/closed-loop.md has the method and the figures.

Names are imported on first use, so ``gpuwarden --help`` (which registers the CLI command from
``closedloop.cli``) does not pay for numpy, the scheduler and the simulator.
"""

from __future__ import annotations

from gpuwarden.plugins import lazy_exports

_EXPORTS = {
    "ARMS": "gpuwarden.closedloop.arms",
    "ArmResult": "gpuwarden.closedloop.loop",
    "ClosedLoopResult": "gpuwarden.closedloop.run",
    "RunConfig": "gpuwarden.closedloop.run",
    "ScoredFleet": "gpuwarden.closedloop.fleet",
    "Workload": "gpuwarden.closedloop.workload",
    "WorkloadSpec": "gpuwarden.closedloop.workload",
    "make_workload": "gpuwarden.closedloop.workload",
    "render": "gpuwarden.closedloop.report",
    "run_arm": "gpuwarden.closedloop.loop",
    "run_closed_loop": "gpuwarden.closedloop.run",
    "run_seed": "gpuwarden.closedloop.run",
    "scored_fleet": "gpuwarden.closedloop.fleet",
    "write_report": "gpuwarden.closedloop.report",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
