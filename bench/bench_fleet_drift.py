"""How much the HBM-core spread drifts on the fleets a model is trained on (issue 17, wave 15).

    .venv/bin/python bench/bench_fleet_drift.py                 # make model's 24 family members
    .venv/bin/python bench/bench_fleet_drift.py --seeds 2001,2002 --days 30

Per fleet, ``score.fleet_spread_drift`` (the median GPU's standard deviation of its 7 daily mean
spreads) at one scoring time a day after the first week: its median and maximum, with the
member's drawn drift. The default simulator (seed 1) comes first. ``score.SPREAD_DRIFT_LIMIT_C``,
above which ``gpuwarden score`` and ``serve`` warn, is set from the training members' medians.
Family members are simulated as ``make model`` trains on them: every third link-focused.
"""

from __future__ import annotations

import argparse

import numpy as np
from tqdm import tqdm

from gpuwarden import tuning
from gpuwarden.config import load_settings


def drift_by_day(panel) -> np.ndarray:
    from gpuwarden.models.score import daily_spread_drift

    return daily_spread_drift(panel, np.arange(24 * 8 - 1, panel.shape[0]))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", default="", help="family members (default: make model's 24)")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--days", type=float, default=40.0)
    args = ap.parse_args()
    tuning.apply(load_settings())
    from gpuwarden.models.make_default import link_focused
    from gpuwarden.models.score import SPREAD_DRIFT_LIMIT_C
    from gpuwarden.models.simdata import family_panel, fleet_spec, simulate_panel
    from gpuwarden.sim.family import TRAIN_SEEDS, draw_family

    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(TRAIN_SEEDS[:24])
    spec = fleet_spec(nodes=args.nodes, days=args.days, seed=1)
    rows = [("default, seed 1", "-", drift_by_day(simulate_panel(spec).panel))]
    for i, seed in enumerate(tqdm(seeds, desc="family members", unit="fleet")):
        draw = draw_family(seed, nodes=args.nodes, days=args.days, start_ts=spec.start_ts)
        if not args.seeds and i % 3 == 2:
            draw = link_focused(draw)
        s = draw.spec
        drawn = (
            f"core {s.thermal_drift_core_c:.2f}, HBM {s.thermal_drift_hbm_c:.2f}, "
            f"node {s.thermal_drift_node_c:.2f} C, every {s.thermal_drift_period_h:.0f} h"
        )
        rows.append((str(seed), drawn, drift_by_day(family_panel(draw).panel)))
    print("\n| fleet | drawn drift (sd) | spread drift, median (C) | max |\n|---|---|---:|---:|")
    medians = []
    for name, drawn, v in rows:
        if v.size == 0:
            print(f"| {name} | {drawn} | no HBM temperature | |")
            continue
        medians.append(float(np.median(v)))
        print(f"| {name} | {drawn} | {np.median(v):.2f} | {v.max():.2f} |")
    lo, hi = min(medians), max(medians)
    print(f"\nmedians {lo:.2f}-{hi:.2f} C; score.SPREAD_DRIFT_LIMIT_C = {SPREAD_DRIFT_LIMIT_C:g}")


if __name__ == "__main__":
    main()
