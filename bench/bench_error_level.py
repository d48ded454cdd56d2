r"""Does ``score``'s error-level warning tell a fleet in another generator's units from the
fleets the model was trained on? (issue 17, wave 23)

    .venv/bin/python bench/bench_error_level.py                                   # wave 23's fleets
    .venv/bin/python bench/bench_error_level.py --default 22 --family 22001,22002 --counters 1,10

Each fleet (default simulator seeds at 32 nodes, family members as drawn at 32 nodes; 21 days,
every error rate x ``--counters`` with ``FleetSpec.counters_scaled``) is read as ``score``
reads it, once a day after the first week: ``score.error_level`` over the GPUs reporting at
that hour. Against the levels the shipped model's card warns above (``score.level_limit``),
the bench prints per fleet the median level, whether that median warns, and on how many days
a single reading warns (as ``serve`` reads it, once a day). No model is scored, so the fleets
stay fresh for judging one. About 10 seconds a fleet on the shared 2-core VM.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from gpuwarden.models.artifact import load_model
from gpuwarden.models.score import daily_error_levels, level_limit
from gpuwarden.models.simdata import HideField, held_out_spec, simulate_panel
from gpuwarden.sim.family import draw_family

DAYS = 21.0
NODES = 32


def fleets(defaults: list[int], family: list[int], factor: float):
    """(name, spec, transforms, benign noise) of each fleet at ``factor``."""
    held, _ = held_out_spec(days=DAYS)
    for seed in defaults:
        spec, _ = held_out_spec(nodes=NODES, days=DAYS, seed=seed)
        yield f"seed {seed}", spec.counters_scaled(factor), [], factor
    for seed in family:
        d = draw_family(seed, nodes=NODES, days=DAYS, start_ts=held.start_ts)
        spec = d.spec.counters_scaled(factor)
        yield str(seed), spec, [HideField(m, f) for m, f in d.hidden], spec.background_noise


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--default", default="21", help="default simulator seeds, comma-separated")
    ap.add_argument(
        "--family", default="21001,21002,21003,21004", help="family members, comma-separated"
    )
    ap.add_argument("--counters", default="1,10", help="error-rate factors, comma-separated")
    args = ap.parse_args()
    seeds = [int(x) for x in args.default.split(",") if x]
    members = [int(x) for x in args.family.split(",") if x]
    limit = level_limit(load_model().card)
    out = []
    for factor in (float(x) for x in args.counters.split(",")):
        for name, spec, hides, noise in fleets(seeds, members, factor):
            daily = daily_error_levels(simulate_panel(spec, transforms=hides).panel).drop(
                columns=["fleet", "t"]
            )
            keys = [k for k in limit if k in daily]
            over = (daily[keys] > pd.Series({k: limit[k] for k in keys})).any(axis=1)
            median = daily.median()
            row = {"fleet": name, "counters": f"x{factor:g}", "benign noise": f"x{noise:.2g}"}
            row |= {k: median.get(k, np.nan) for k in limit}
            row |= {
                "median warns": bool(any(median.get(k, 0.0) > limit[k] for k in keys)),
                "days warning": f"{int(over.sum())} of {len(daily)}",
            }
            out.append(row)
            print(f"{name} x{factor:g}: {row['days warning']} days", flush=True)
    print("\nwarns above: " + ", ".join(f"{k} {v:.3g}" for k, v in limit.items()))
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(pd.DataFrame(out).round(4).to_string(index=False))


if __name__ == "__main__":
    main()
