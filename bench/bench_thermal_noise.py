r"""How the model's false flags grow with benign day-to-day core-temperature variation (issue 17).

    .venv/bin/python bench/bench_thermal_noise.py                  # the shipped model, 8001-8004
    .venv/bin/python bench/bench_thermal_noise.py --model DIR --threshold 0.6 --seeds 4001,4002

On a healthy simulated board the core's daily mean temperature moves by a few hundredths of a
degree against its node's at the same power; real cores move more (workload mix, fan curves,
inlet air). This simulates each family member once (as drawn, 32 nodes, 60 days scored after a
week), then adds to every hourly core temperature an offset drawn per UTC day, either per GPU
life (independent boards) or per node (inlet air that moves a whole chassis), with standard
deviation ``--sds`` C, and scores the same fleet each time. The HBM temperature is left as is,
so the HBM-minus-core spread moves too. Prints catchable failures caught >= 24 h ahead and
false flags per 1,000 GPU-days (30-day outcome) at the model's threshold, pooled over the
members, hard signals and link rules flagging as in ``gpuwarden score``.

Since wave 14 the family draws benign drift of its own (``sim.family.DRIFT_*``); the members
are simulated without it unless ``--family-drift``, so that the offsets added here start from
the same fleets as in wave 13.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
from bench_candidates import _figures

from gpuwarden import tuning
from gpuwarden.config import load_settings


def jittered(
    panel, day: np.ndarray, sd: float, groups: np.ndarray, seed: int, *, hbm: bool = False
):
    """``panel`` with N(0, sd) added to the core temperature, one draw per (day, group); with
    ``hbm``, to the HBM temperature too (inlet air moves both)."""
    rng = np.random.default_rng(seed)
    n_groups = int(groups.max()) + 1
    off = rng.standard_normal((int(day.max()) + 1, n_groups)).astype(np.float32) * np.float32(sd)
    by_hour = off[day][:, groups]
    gauge = dict(panel.gauge)
    for name in ("gpu_temp_c", *(("mem_temp_c", "mem_temp_c_max") if hbm else ())):
        gauge[name] = panel.gauge[name] + by_hour
    gauge["spread_c"] = gauge["mem_temp_c"] - gauge["gpu_temp_c"]
    return replace(panel, gauge=gauge)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default=None, help="model folder (default: the shipped one)")
    ap.add_argument("--threshold", type=float, default=None, help="default: the model card's")
    ap.add_argument("--seeds", default="8001,8002,8003,8004", help="family members")
    ap.add_argument("--sds", default="0.5,1,2", help="standard deviations, C")
    ap.add_argument(
        "--with-hbm",
        action="store_true",
        help="move the HBM temperature by the same offset (default: the core's alone)",
    )
    ap.add_argument(
        "--family-drift",
        action="store_true",
        help="keep the members' own benign drift (default: drawn as before wave 14, none)",
    )
    args = ap.parse_args()
    tuning.apply(load_settings())
    from tqdm import tqdm

    from gpuwarden.models.artifact import load_model
    from gpuwarden.models.evaluate import failures_of, sudden_kinds
    from gpuwarden.models.labels import build_dataset, scoring_indices
    from gpuwarden.models.rules import LinkRules, hard_signal
    from gpuwarden.models.simdata import HideField, held_out_spec, simulate_panel
    from gpuwarden.sim.family import draw_family

    model = load_model(args.model)
    thr = model.threshold if args.threshold is None else args.threshold
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = [("none", 0.0)] + [
        (by, float(sd)) for by in ("GPU", "node") for sd in args.sds.split(",")
    ]
    held, first = held_out_spec(days=60.0)
    sudden = sudden_kinds()
    totals = {s: [0, 0, 0, 0.0] for s in settings}  # catchable, caught, flagged days, days
    t0 = time.time()
    for seed in tqdm(seeds, desc="members", unit="fleet"):
        d = draw_family(
            seed, nodes=32, days=67.0, start_ts=held.start_ts, thermal_drift=args.family_drift
        )
        sim = simulate_panel(d.spec, transforms=[HideField(m, f) for m, f in d.hidden])
        fails = failures_of(sim.panel)
        day = sim.panel.hours // 86400
        day = (day - day.min()).astype(np.int64)
        by_gpu = np.arange(sim.panel.shape[1])
        by_node = np.unique(sim.panel.keys["hostname"].astype(str), return_inverse=True)[1]
        for by, sd in settings:
            groups = by_node if by == "node" else by_gpu
            p = jittered(sim.panel, day, sd, groups, seed, hbm=args.with_hbm) if sd else sim.panel
            ds = build_dataset(
                p,
                scoring_indices(p, step_h=1, start=first),
                horizon_s=7 * 86400,
                drop_unknown=False,
            )
            flag = (model.risk(ds.X) >= thr) | hard_signal(ds.X) | LinkRules.in_force().flag(ds.X)
            f = _figures(ds, fails, flag, sudden)
            t = totals[(by, sd)]
            t[0] += sum(v[0] for v in f["modes"].values())
            t[1] += sum(v[1] for v in f["modes"].values())
            t[2] += f["ff_days"]
            t[3] += f["gpu_days"]
    print(
        f"\nmodel {args.model or 'shipped'} at {thr:g}; family members {args.seeds}, as drawn, "
        f"32 nodes, 60 days{', with their drift' if args.family_drift else ''}; offset on the "
        f"core{' and HBM' if args.with_hbm else ''} "
        f"({time.time() - t0:.0f} s)\n"
    )
    print(
        "| daily core offset | sd (C) | catchable caught >= 24 h | false flags / 1,000 GPU-days |"
    )
    print("|---|---:|---:|---:|")
    for (by, sd), (c, k, ff, days) in totals.items():
        label = "none" if not sd else f"per {by}"
        print(f"| {label} | {sd:g} | {k} of {c} | {1000 * ff / days:.2f} ({ff}) |")


if __name__ == "__main__":
    main()
