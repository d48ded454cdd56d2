"""Capacity planning on real demand: the openb default trace's creation and deletion times.

Three tables, all in this process on the same hourly series (GPU-hours requested per hour over
the trace's complete window, about 34 days):

1. rolling-origin backtest of ``gpuwarden.planning.forecast`` (the mean of the three statsmodels
   members that did best on a rolling-origin validation inside each origin's history) against
   the seasonal-naive baselines (same hour yesterday, same hour last week): MAPE and the
   coverage of the 80% interval; each member alone, the best one, and the mean of all five as
   an ablation;
2. the plan's buffer: capacity for next week = mean forecast x buffer, scored on the week that
   followed (hours short of capacity, capacity left idle);
3. TCO with the shipped prices: cost per used GPU-hour, break-even, the guideline's check, and the
   split of this demand into base load and an elastic part.

    .venv/bin/python bench/bench_forecast.py
    .venv/bin/python bench/bench_forecast.py --pods ../shared/data/openb/openb_pod_list_default.csv

The pods file defaults to ../shared/data/openb (``GPUWARDEN_SHARED_DATA``), else the vendored
copy in tests/data/openb (byte-identical, see SOURCES.md there).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.errors import GpuwardenError
from gpuwarden.planning import demand as d
from gpuwarden.planning._members import MEMBERS
from gpuwarden.planning.backtest import rolling_origin
from gpuwarden.planning.capacity import plan
from gpuwarden.planning.forecast import DAILY, WEEKLY, forecast, seasonal_naive
from gpuwarden.planning.tco import (
    GUIDE_HIGH,
    GUIDE_LOW,
    OPTIONS,
    TABLE_UTILISATION,
    load_prices,
    split,
)
from gpuwarden.scheduler import openb

VENDORED = Path(__file__).resolve().parents[1] / "tests" / "data" / "openb"


def demand_series(pods: Path) -> pd.Series:
    records = d.records_from_openb(pods)
    lo, hi = d.openb_window(records)
    frame = d.hourly_demand(
        records,
        by=(),
        start_s=math.ceil(lo / d.HOUR_S) * d.HOUR_S,
        end_s=math.floor(hi / d.HOUR_S) * d.HOUR_S,
        epoch=d.TRACE_EPOCH,
    )
    return frame["all"]


def backtest_table(series: pd.Series, horizons: list[int], progress: bool) -> None:
    print("| horizon | origins | MAPE model | MAPE naive day | MAPE naive week | model / best "
          "naive | 80% interval coverage | members averaged (share of origins) | CPU s |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for h in horizons:
        t = time.process_time()
        bt = rolling_origin(series, h, progress=progress)
        s = bt.summary()
        best = min(s["mape_naive_day"], s["mape_naive_week"])
        used = ", ".join(f"{m} {n / len(bt.origins):.0%}" for m, n in bt.methods.most_common())
        print(f"| {h} h | {s['origins']:.0f} | {s['mape_model']:.1%} | {s['mape_naive_day']:.1%} "
              f"| {s['mape_naive_week']:.1%} | **{s['mape_model'] / best:.2f}** "
              f"| {s['coverage']:.1%} | {used} | {time.process_time() - t:.1f} |")  # fmt: skip


#: The ablation's rows: each member alone, the mean of all five, the validated top 3 (default).
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    *[(f"{m.name} alone", {"methods": (m.name,), "top": 1}) for m in MEMBERS],
    ("best 1 of 5 on the validation", {"top": 1}),
    ("mean of all 5", {"top": 5}),
    ("mean of the best 3 on the validation (default)", {}),
]


def ablation_table(series: pd.Series, horizons: list[int], progress: bool) -> None:
    """Every variant through the same rolling origin. A weekly member alone whose validation
    origins lack its two weeks and a day runs unvalidated there (no interval widening)."""
    print("\n| horizon | method | MAPE | 80% interval coverage | vs seasonal naive (day) |")
    print("|---|---|---:|---:|---:|")
    for h in horizons:
        for name, options in VARIANTS:
            s = rolling_origin(series, h, progress=progress, **options).summary()
            print(f"| {h} h | {name} | {s['mape_model']:.1%} | {s['coverage']:.1%} "
                  f"| {s['mape_model'] / s['mape_naive_day']:.2f} |")  # fmt: skip


def buffer_table(series: pd.Series, buffers: list[float]) -> None:
    """Capacity for the next week from the forecast at each daily origin with a full week after
    it; also the naive plan (last week's mean x buffer) for comparison."""
    values = series.to_numpy()
    origins = range(15 * DAILY, len(values) - WEEKLY + 1, DAILY)
    rows: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for origin in origins:
        mean = forecast(series.iloc[:origin], WEEKLY).mean
        actual = values[origin : origin + WEEKLY]
        last_week = float(np.mean(seasonal_naive(values[:origin], WEEKLY, WEEKLY)))
        for buffer in buffers:
            plans = {
                "forecast mean": plan(mean, "all", weeks=1, buffer=buffer)[0].need_gpus,
                "forecast peak": plan(mean, "all", weeks=1, buffer=buffer, basis="peak")[
                    0
                ].need_gpus,
                "last week's mean": last_week * buffer,
            }
            for name, cap in plans.items():
                short = float(np.mean(actual > cap))
                idle = float(np.mean(np.clip(cap - actual, 0, None)) / cap)
                rows.setdefault((name, buffer), []).append((short, idle))
    print(f"\n{len(origins)} origins, each planning the next 168 hours")
    print("| plan basis | buffer | hours short of capacity | capacity idle |")
    print("|---|---:|---:|---:|")
    for (name, buffer), scores in sorted(rows.items()):
        short, idle = np.mean(scores, axis=0)
        print(f"| {name} | x{buffer} | {short:.1%} | {idle:.1%} |")


def tco_table(series: pd.Series) -> None:
    prices = load_prices()
    print("\n| GPU | option | 30% | 50% | 70% | 90% | break-even vs on-demand |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for model, p in prices.items():
        for option in OPTIONS:
            cells = " | ".join(f"{p.per_used_hour(option, u):.2f}" for u in TABLE_UTILISATION)
            be = p.break_even(option) if option in ("own", "bare_metal", "cloud_reserved") else None
            print(f"| {model} | {option} | {cells} | {'-' if be is None else f'{be:.0%}'} |")
    print("\n| GPU | own vs on-demand at 70% | own vs on-demand at 30% | split of this demand |")
    print("|---|---:|---:|---|")
    for model, p in prices.items():
        od = p.on_demand.value
        s = split(series.to_numpy(), p)
        print(f"| {model} | {1 - p.per_used_hour('own', GUIDE_HIGH) / od:+.0%} cheaper | "
              f"{1 - p.per_used_hour('own', GUIDE_LOW) / od:+.0%} cheaper | own {s.base_gpus} "
              f"({s.base_share_of_hours:.0%} of GPU-hours), {s.elastic_gpus} elastic to p99 "
              f"{s.peak_gpus} |")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=Path, default=None, help="openb pod list")
    parser.add_argument("--horizons", default="24,168", help="hours ahead, comma-separated")
    parser.add_argument("--no-ablation", action="store_true", help="skip the forced-period rows")
    parser.add_argument("--ablation-only", action="store_true",
                        help="only the ablation (to run it beside the other tables)")  # fmt: skip
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    pods = args.pods or openb.default_paths()[1]
    if args.pods is None and not pods.is_file():
        pods = VENDORED / "openb_pod_list_default.csv"
    try:
        series = demand_series(pods)
        horizons = [int(h) for h in args.horizons.split(",")]
        print(f"{pods.name}: {len(series)} hours, mean {series.mean():.1f} GPUs requested, "
              f"min {series.min():.1f}, max {series.max():.1f}\n")  # fmt: skip
        if args.ablation_only:
            ablation_table(series, horizons, not args.no_progress)
            return 0
        backtest_table(series, horizons, not args.no_progress)
        if not args.no_ablation:
            ablation_table(series, horizons, not args.no_progress)
        buffer_table(series, [1.0, 1.3, 1.5])
        tco_table(series)
    except GpuwardenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
