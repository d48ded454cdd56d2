"""How much the report's capacity section adds to the facts: one forecast per GPU model.

    .venv/bin/python bench/bench_capacity_facts.py                 # 1, 2 and 4 GPU models
    .venv/bin/python bench/bench_capacity_facts.py --weeks 6 --models 1 8

For each model count a scheduler database of ``--weeks`` weeks of synthetic 2-GPU jobs (a daily
wave, several a model-hour) is built once, then the capacity facts are timed against the read
they cannot do without: the database's hourly demand (``scheduler_demand``). The fleet size
does not enter: the section forecasts per GPU model, never per GPU, and the bench checks that a
fleet of 10,000 GPUs per model costs what 8 do.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from gpuwarden.planning.demand import scheduler_demand
from gpuwarden.reports._capacity import capacity
from gpuwarden.scheduler.state import JobRow, NodeRow, SchedulerDB

MODELS = ("H100", "A100", "L40S", "H200", "B200", "A10", "L4", "V100")


def build(path: Path, models: int, weeks: int, end: float) -> tuple[int, list[str]]:
    db = SchedulerDB(path)
    names = [MODELS[i % len(MODELS)] + ("" if i < len(MODELS) else f"-{i}") for i in range(models)]
    for i, model in enumerate(names):
        gpus = [{"index": k, "model": model} for k in range(8)]
        db.upsert_node(NodeRow(f"n{i}", 64000, 1 << 18, gpus, None, 0))
    rng = np.random.default_rng(1)
    start = end - weeks * 168 * 3600.0
    spec = {"tasks": 1, "gpus_per_task": 2, "gpu_milli": 1000}
    seq = 0
    for hour in range(weeks * 168):
        for i in range(models):
            for _ in range(1 + (hour % 24 > 8) + int(rng.integers(0, 3))):
                seq += 1
                t = start + hour * 3600 + float(rng.uniform(0, 3000))
                db.insert_job(JobRow(f"j{seq}", seq, "ml", "x", spec, "succeeded", 0, None, t, t,
                                     t + 60, t + 5400, placement=[{"node": f"n{i}"}]))  # fmt: skip
    db.close()
    return seq, names


def best(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weeks", type=int, default=12)
    ap.add_argument("--models", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    now = time.time()
    end = now // 3600 * 3600
    folder = Path(tempfile.mkdtemp(prefix="bench-capacity-"))
    print(f"{args.weeks} weeks of demand history; best of {args.repeat}")
    print(f"{'GPU models':>10} {'jobs':>8} {'demand read s':>14} {'capacity facts s':>17} "
          f"{'ratio':>7} {'s per model':>12} {'10,000 GPUs/model s':>20}")  # fmt: skip
    for models in args.models:
        path = folder / f"s{models}.db"
        jobs, names = build(path, models, args.weeks, end)
        read, _ = best(partial(scheduler_demand, path, now_s=now), args.repeat)
        fleet = dict.fromkeys(names, 8)
        facts, section = best(partial(capacity, str(path), now, fleet, None), args.repeat)
        large, _ = best(partial(capacity, str(path), now, dict.fromkeys(names, 10_000), None), 1)
        assert section[0] is not None, section[1]  # type: ignore[index]
        print(f"{models:>10} {jobs:>8,} {read:>14.2f} {facts:>17.2f} {facts / read:>6.1f}x "
              f"{facts / models:>12.2f} {large:>20.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
