"""The shipped model's flags with a veto on ordinary single-bit bursts (issue 17, wave 28).

    .venv/bin/python bench/bench_burst_veto.py --default 27 --family 27001,27002,27003,27004 \\
        --link-focused --out DIR [--counters 10]
    .venv/bin/python bench/bench_burst_veto.py --pool DIR

On loud fleets most of the shipped model's false flags are one-hour single-bit bursts on boards
whose weekly rate is below the fleet's level (docs/model-history.md, wave 27). Each fleet is
scored hourly by the model at its card's line, hard signals and link rules flagging as in
``gpuwarden score``, three ways:

- ``model``: as shipped;
- ``two marks``: no flag on the model's risk alone where the GPU's weekly single-bit rate is
  below the fleet's level (``sbe_vs_fleet_level_7d`` < 0) and more than a fifth of the day's
  single-bit errors fell in one hour (``sbe_peak_share_24h`` > ``PEAK_SHARE``);
- ``three marks``: the same, only where that hour is also not above the fleet's level of
  busiest hours: log(1 + the GPU's busiest hour of the last day) at or below its
  ``FLEET_LEVEL_QUANTILE`` over the fleet's GPUs reading the counter at that hour.

Per fleet, the catchable failures caught 24 h ahead (cooling apart) and the false-flag GPU-days
(30-day outcome) go to ``DIR/<fleet>.json``; ``--pool`` prints them pooled, the default
simulator's fleet apart from the family's. ``--counters K`` scales every error rate, failing
and benign, by K (``FleetSpec.counters_scaled``, as ``bench_candidates.py --counters``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from bench_visibility import flag_counts, fleet_args, pooled_counts, run_members

#: the busiest hour's share of the day's single-bit errors from which a day reads as a burst
PEAK_SHARE = 0.2
VARIANTS = ("model", "two marks", "three marks")


def burst_marks(ds: Any, panel: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``ds``: (a one-hour burst below the fleet's weekly level, the same where the
    burst is not above the fleet's level of busiest hours)."""
    from gpuwarden.models.features import FLEET_LEVEL_QUANTILE, FLEET_MIN_GPUS

    X = ds.X
    burst = (X["sbe_vs_fleet_level_7d"] < 0).to_numpy() & (
        X["sbe_peak_share_24h"] > PEAK_SHARE
    ).to_numpy()
    peak = np.log1p(pd.DataFrame(panel.inc["sbe"]).rolling(24, min_periods=1).max().to_numpy())
    reading = np.isfinite(peak).sum(axis=1)
    with np.errstate(all="ignore"):
        level = np.full(peak.shape[0], np.nan)
        enough = reading >= FLEET_MIN_GPUS
        level[enough] = np.nanquantile(peak[enough], FLEET_LEVEL_QUANTILE, axis=1)
    col = {k: i for i, k in enumerate(panel.keys["key"].to_numpy())}
    t = ds.meta["t"].to_numpy()
    g = ds.meta["key"].map(col).to_numpy()
    with np.errstate(invalid="ignore"):
        within = peak[t, g] - level[t] <= 0  # unknown (unread, too few GPUs): no veto
    return burst, burst & within


def run_fleet(
    name: str, spec: Any, hides: list[Any], f0: float, model: Any, counters: float
) -> dict[str, Any]:
    from bench_candidates import judged_dataset

    from gpuwarden.models.evaluate import failures_of
    from gpuwarden.models.rules import LinkRules, hard_signal

    sim, ds = judged_dataset(spec.counters_scaled(counters), hides, f0)
    hard = hard_signal(ds.X) | LinkRules.in_force().flag(ds.X)
    at = model.risk(ds.X) >= model.threshold
    two, three = burst_marks(ds, sim.panel)
    flags = dict(zip(VARIANTS, (at | hard, (at & ~two) | hard, (at & ~three) | hard), strict=True))
    counts = flag_counts(ds, failures_of(sim.panel), flags)
    return {"fleet": name, "counters": counters, **counts}


def pool(folder: Path) -> None:
    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    for group in ("default", "family"):
        mine = [r for r in rows if r["fleet"].startswith("seed") == (group == "default")]
        if mine:
            print(f"{group}: {', '.join(r['fleet'] for r in mine)}")
            print(pooled_counts(mine, list(VARIANTS)).to_string(index=False))


def main() -> None:
    ap = fleet_args(__doc__ or "", "family members, comma-separated", link_focused=True)
    ap.add_argument("--counters", type=float, default=1.0, help="every error rate x this")
    run_members(ap, run_fleet, pool, "counters")


if __name__ == "__main__":
    main()
