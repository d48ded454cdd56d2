"""The acceptance measurement: the model and the rule baseline on a fleet neither saw.

    .venv/bin/python bench/bench_model.py                    # the shipped default model
    .venv/bin/python bench/bench_model.py --model my-model   # another model folder
    .venv/bin/python bench/bench_model.py --no-robustness    # skip the four robustness runs

The held-out fleet is ``simdata.held_out_spec()``: seed 2, 1,024 GPUs, scored every hour for
37 days from 200 days after the training fleet's start (the last 7 days' labels run past the
end, so flags there are judged only against failures), after a week of simulated history.
Prints the per-mode table (sudden failures in their own rows) with false flags per 1,000
GPU-days and PR-AUC for both, then the robustness table: the same metrics when 10% of samples
are dropped, memory temperature is unsupported on the A100s, volatile counters reset weekly
(a driver reload per node per week), and failed GPUs come back under their old UUID. Writes the
PR, reliability and lead-time plots to --out (a temp folder by default).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from gpuwarden.models.artifact import load_model
from gpuwarden.models.evaluate import Evaluation, evaluate_dataset, failures_of
from gpuwarden.models.labels import build_dataset, scoring_indices
from gpuwarden.models.simdata import (
    DropSamples,
    HideField,
    SameUuidAfterRepair,
    held_out_spec,
    simulate_panel,
)


def run(spec, first: float, model, *, transforms=(), out: Path | None = None) -> Evaluation:
    sim = simulate_panel(spec, transforms=transforms)
    ds = build_dataset(
        sim.panel,
        scoring_indices(sim.panel, step_h=1, start=first),
        horizon_s=model.horizon_s,
        drop_unknown=False,
    )
    return evaluate_dataset(
        ds, failures_of(sim.panel), model, horizon_s=model.horizon_s, out_dir=out
    )


def _figures(ev: Evaluation) -> dict[str, float]:
    t = ev.table.set_index("mode")
    s = ev.summary
    return {
        "recall_24h": float(t.loc["ALL with precursors", "model_recall"]),
        "median_lead_h": float(t.loc["ALL with precursors", "model_lead_h"]),
        "false_flags_per_1000": float(s["model_false_flags_per_1000"]),
        "pr_auc": float(s["model_pr_auc"]),
        "pr_auc_precursor": float(s.get("model_pr_auc_precursor") or float("nan")),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default=None, help="model folder (default: the shipped one)")
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--days", type=float, default=37.0)
    ap.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "gpuwarden-bench-model",
        help="folder for the PNG plots",
    )
    ap.add_argument("--no-robustness", action="store_true")
    args = ap.parse_args()
    model = load_model(args.model)
    spec, first = held_out_spec(args.nodes, args.days)
    t0 = time.time()
    base = run(spec, first, model, out=args.out)
    print(
        f"held-out fleet: {args.nodes * 8} GPUs, {args.days:g} days, seed 2 "
        f"({time.time() - t0:.0f} s)\n"
    )
    print(base.render())
    if args.no_robustness:
        return
    cases = {
        "10% of samples dropped": (spec, [DropSamples(0.1, seed=7)]),
        "memory temperature unsupported on A100": (spec, [HideField("A100-80GB")]),
        "volatile counters reset weekly": (
            replace(spec, driver_reload_rate_per_node_day=1 / 7),
            [],
        ),
        "failed GPUs back under their old UUID": (spec, [SameUuidAfterRepair()]),
    }
    want = _figures(base)
    names = list(want)
    print("\n| case | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    print("| baseline | " + " | ".join(f"{want[n]:.3f}" for n in names) + " |")
    for case, (case_spec, transforms) in cases.items():
        got = _figures(run(case_spec, first, model, transforms=transforms))
        cells = []
        for n in names:
            rel = (got[n] - want[n]) / want[n] if want[n] else float("nan")
            cells.append(f"{got[n]:.3f} ({rel:+.0%})")
        print(f"| {case} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n({time.time() - t0:.0f} s in all)")


if __name__ == "__main__":
    main()
