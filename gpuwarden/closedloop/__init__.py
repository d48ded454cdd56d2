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

import importlib
from typing import Any

_WHERE = {
    "ARMS": "arms",
    "ArmResult": "loop",
    "ClosedLoopResult": "run",
    "RunConfig": "run",
    "ScoredFleet": "fleet",
    "Workload": "workload",
    "WorkloadSpec": "workload",
    "make_workload": "workload",
    "render": "report",
    "run_arm": "loop",
    "run_closed_loop": "run",
    "run_seed": "run",
    "scored_fleet": "fleet",
    "write_report": "report",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"gpuwarden.closedloop.{_WHERE[name]}"), name)
