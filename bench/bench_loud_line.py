"""The shipped model with a second line on loud fleets (issue 17, wave 28: candidate L).

    .venv/bin/python bench/bench_loud_line.py choose --out FILE
    .venv/bin/python bench/bench_loud_line.py fresh --default 28 --family 28001,28002,28003,28004 --out FILE
    .venv/bin/python bench/bench_loud_line.py fresh --family 28001,28002,28003,28004 --counters 10 --out FILE
    .venv/bin/python bench/bench_loud_line.py pool FILE [--pair 4/0.55]

At the scoring hours when the fleet's single-bit level (``sbe_fleet_level_7d``: log(1 + errors
a day over the week) at the 90th percentile over its GPUs) is at least a level, the model flags
at a second line; elsewhere at its card's. Hard signals and link rules flag as in ``gpuwarden
score``; one score. Every pair of ``LEVELS`` and ``LINES`` is scored on each fleet, and the
catchable failures caught 24 h ahead (cooling apart) and false-flag GPU-days (30-day outcome)
go to FILE, one JSON line per fleet (appended).

- ``choose``: the fleets that choose ``make model``'s line (seed 2, ``VALIDATION_SEEDS``);
- ``fresh``: ``--default`` and ``--family`` members (both variants) as ``bench_candidates.py
  fresh`` draws them, ``--counters`` scaling every error rate;
- ``pool``: per pair, the pooled figures (the default simulator's fleets apart from the
  family's), or one pair's against the model's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

LEVELS = (2, 3, 4, 5, 6, 7)
LINES = (0.55, 0.60, 0.65, 0.70)


def run_fleet(spec: Any, hides: list[Any], f0: float, model: Any) -> dict[str, Any]:
    from bench_candidates import judged_dataset
    from bench_visibility import flag_counts

    from gpuwarden.models.evaluate import failures_of
    from gpuwarden.models.rules import LinkRules, hard_signal

    sim, ds = judged_dataset(spec, hides, f0)
    risk = model.risk(ds.X)
    hard = hard_signal(ds.X) | LinkRules.in_force().flag(ds.X)
    level = ds.X["sbe_fleet_level_7d"].to_numpy(np.float64)
    flags = {"model": (risk >= model.threshold) | hard}
    for lv in LEVELS:
        with np.errstate(invalid="ignore"):
            loud = level >= lv  # unknown (too few GPUs reading): not loud
        for line in LINES:
            flags[f"{lv}/{line:.2f}"] = (risk >= np.where(loud, line, model.threshold)) | hard
    median = float(np.nanmedian(level)) if np.isfinite(level).any() else None
    return {"level_median": median, **flag_counts(ds, failures_of(sim.panel), flags)}


def pool(path: Path, pair: str | None) -> None:
    from bench_visibility import pooled_counts

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for group in ("default", "family"):
        mine = [r for r in rows if r["fleet"].startswith("seed") == (group == "default")]
        if not mine:
            continue
        who = (
            ["model", pair] if pair else [k for k in mine[0] if k not in ("fleet", "level_median")]
        )
        print(f"{group}: {len(mine)} fleets")
        print(pooled_counts(mine, who).to_string(index=False))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("which", choices=("choose", "fresh", "pool"))
    ap.add_argument("file", nargs="?", type=Path, help="pool: the figures' file")
    ap.add_argument("--default", type=int, default=None, help="fresh: a default-simulator seed")
    ap.add_argument("--family", default="", help="fresh: family members, comma-separated")
    ap.add_argument("--counters", type=float, default=1.0, help="fresh: every error rate x this")
    ap.add_argument("--out", type=Path, default=None, help="the figures go here (appended)")
    ap.add_argument("--pair", default=None, help="pool: LEVEL/LINE beside the model, e.g. 4/0.55")
    args = ap.parse_args()
    if args.which == "pool":
        if args.file is None:
            ap.error("pool FILE")
        pool(args.file, args.pair)
        return
    if args.out is None:
        ap.error("--out is needed to run fleets")
    from bench_candidates import _fleets, _own_columns
    from tqdm import tqdm

    from gpuwarden import tuning
    from gpuwarden.config import load_settings

    tuning.apply(load_settings())
    model = _own_columns(None)
    members = tuple(int(s) for s in args.family.split(",") if s)
    if args.which == "choose":
        groups = _fleets("choose")
    else:
        groups = _fleets("fresh", (args.default or 0, members), counters=args.counters)
        if args.default is None:
            groups["default"] = []
    todo = groups["default"] + groups["family"]
    with args.out.open("a") as f:
        for name, spec, hides, f0 in tqdm(todo, desc="fleets", unit="fleet"):
            f.write(json.dumps({"fleet": name, **run_fleet(spec, hides, f0, model)}) + "\n")
            f.flush()
    pool(args.out, None)


if __name__ == "__main__":
    main()
