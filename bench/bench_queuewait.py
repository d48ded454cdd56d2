"""Queue wait forecast by replay, scored against the waits a real scheduler produced.

The history is the bundled scheduler service itself (``tests/planning/scheduler_history.py``):
``--days`` days of 1-2 GPU jobs in a daily wave on 2 nodes of 4 GPUs, agents syncing every
``--step`` seconds, every submit and start time the service's own. From each day's midnight
after the first week, with only the history before it:

- **replay**: ``gpuwarden plan forecast``'s wait forecast (the demand forecast for the next
  24 h, last week's jobs scaled to it, replayed through the scheduler on the database's nodes);
- **last day**: the measured p50/p90 of the jobs submitted in the 24 h before (the naive guess);
- **last week**: the same over the 7 days before;

each scored on the measured p50/p90 of the jobs submitted in the next 24 h (mean absolute
error, hours). A second table replays each day's *actual* arrivals (the forecast replaced by
what came) to separate the simulator's error from the demand forecast's.

    .venv/bin/python bench/bench_queuewait.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "planning"))
from scheduler_history import run_history  # noqa: E402

from gpuwarden.planning.demand import records_from_scheduler, scheduler_demand  # noqa: E402
from gpuwarden.planning.forecast import forecast  # noqa: E402
from gpuwarden.planning.queuewait import FleetHistory, forecast_waits, measured_waits  # noqa: E402

MODEL = "H100-80GB"
DAY = 86400.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--step", type=float, default=300.0, help="agent sync interval, s")
    parser.add_argument("--jobs-per-hour", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.db"
        t = time.process_time()
        end = run_history(path, days=args.days, step_s=args.step,
                          jobs_per_hour=args.jobs_per_hour, end_s=1_800_000_000.0)  # fmt: skip
        print(f"history: {args.days} days, {time.process_time() - t:.1f} CPU s")
        records = records_from_scheduler(path)
        start = end - args.days * DAY
        errors: dict[str, list[tuple[float, float]]] = {}
        rows = []
        for day in range(7, args.days):
            cut = start + day * DAY
            _, frame = scheduler_demand(path, now_s=cut)
            history = FleetHistory.from_db(path, cut)
            truth = measured_waits(records, since_s=cut, until_s=cut + DAY).get(MODEL)
            if truth is None:
                continue
            fc = {MODEL: forecast(frame[MODEL], 24).mean}
            _, full = scheduler_demand(path, now_s=cut + DAY)
            came = {MODEL: full[MODEL][full.index >= fc[MODEL].index[0]].iloc[:24]}
            past = {MODEL: frame[MODEL]}
            guesses = {
                "replay of the forecast": forecast_waits(history, fc, past, 24)[MODEL],
                "replay of what came": forecast_waits(history, came, past, 24)[MODEL],
                "last day": measured_waits(records, since_s=cut - DAY, until_s=cut)[MODEL],
                "last week": measured_waits(records, since_s=cut - 7 * DAY, until_s=cut)[MODEL],
            }
            for name, g in guesses.items():
                errors.setdefault(name, []).append(
                    (abs(g.p50_h - truth.p50_h), abs(g.p90_h - truth.p90_h))
                )
            rows.append((day, truth, guesses))
        print("\n| day | measured p50 / p90 h | replay of the forecast | replay of what came "
              "| last day | last week |")  # fmt: skip
        print("|---:|---:|---:|---:|---:|---:|")
        for day, truth, g in rows:
            cells = " | ".join(f"{w.p50_h:.2f} / {w.p90_h:.2f}" for w in g.values())
            print(
                f"| {day} | {truth.p50_h:.2f} / {truth.p90_h:.2f} ({truth.jobs} jobs) | {cells} |"
            )
        print("\n| guess | MAE p50 h | MAE p90 h |")
        print("|---|---:|---:|")
        for name, errs in errors.items():
            e = np.mean(errs, axis=0)
            print(f"| {name} | {e[0]:.2f} | {e[1]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
