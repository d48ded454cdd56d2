"""Closed-loop benchmark: no prediction vs the rule baseline vs the model, on the same fleets.

    .venv/bin/python bench/bench_closed_loop.py                       # 5 seeds x 90 d x 512 GPUs,
                                                                      # sudden 0%, 30%, 50%
    .venv/bin/python bench/bench_closed_loop.py --seeds 1 --days 14   # quick look
    .venv/bin/python bench/bench_closed_loop.py --threshold 0.6       # the model at another line
    .venv/bin/python bench/bench_closed_loop.py --family              # randomized family members

Prints the table (docs/benchmarks.md, docs/closed-loop.md) and writes it with the plots to
``--out``. The same as ``gpuwarden evaluate closed-loop``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from gpuwarden.closedloop.cli import parse_shares
from gpuwarden.closedloop.report import render, write_report
from gpuwarden.closedloop.run import run_closed_loop


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--days", type=float, default=90.0)
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--sudden", default="0,0.3,0.5")
    ap.add_argument("--accel", type=float, default=20.0)
    ap.add_argument("--thermal-drift", type=float, default=0.0, help="benign drift sd, C")
    ap.add_argument("--family", action="store_true", help="randomized family members")
    ap.add_argument("--threshold", type=float, default=None, help="model arm's line")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", default="closed-loop")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    result = run_closed_loop(
        seeds=args.seeds,
        days=args.days,
        gpus=args.gpus,
        sudden=parse_shares(args.sudden),
        accel=args.accel,
        thermal_drift_c=args.thermal_drift,
        threshold=args.threshold,
        family=args.family,
        jobs=args.jobs,
        progress=not args.no_progress,
    )
    write_report(result, args.out)
    sys.stdout.write(render(result))
    print(f"wall clock {time.perf_counter() - t0:.0f} s (jobs={args.jobs}); files in {args.out}/")


if __name__ == "__main__":
    main()
