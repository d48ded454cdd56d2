"""Build the shipped default model: ``make model`` runs ``python -m gpuwarden.models.make_default``.

1. simulate the training fleet (``simdata.fleet_spec()``: 1,024 GPUs, 97 days, seed 1);
2. train and calibrate on it (``train.train_on_panel``, default options);
3. evaluate on a fleet it never saw (``simdata.held_out_spec``: seed 2, scored hourly from 200
   days later for 37 days, after a week of history) and put the figures in the model card;
4. write ``gpuwarden/models/default/`` (model.skops, model_card.json).

Everything is a function of the seeds, so the same command rebuilds the same model.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpuwarden.models.artifact import DEFAULT_DIR, save_model
from gpuwarden.models.evaluate import evaluate_dataset, failures_of
from gpuwarden.models.labels import build_dataset, scoring_indices
from gpuwarden.models.simdata import fleet_spec, held_out_spec, simulate_panel
from gpuwarden.models.train import TrainOptions, train_on_panel


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_DIR, help="model folder to write")
    ap.add_argument("--nodes", type=int, default=128, help="nodes (x8 GPUs) in each fleet")
    ap.add_argument("--days", type=float, default=97.0, help="days of training history")
    ap.add_argument("--eval-days", type=float, default=37.0, help="days of held-out history")
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.time()
    train_spec = fleet_spec(nodes=args.nodes, days=args.days, seed=1)
    sim = simulate_panel(train_spec, progress=args.progress)
    print(
        f"simulated training fleet: {sim.panel.shape[1]} GPU lives, "
        f"{len(sim.failures)} failures ({time.time() - t0:.0f} s)"
    )
    source = {
        "simulator": {
            "nodes": args.nodes,
            "gpus_per_node": 8,
            "days": args.days,
            "seed": 1,
            "accel": train_spec.accel,
            "step_s": train_spec.step_s,
            "models": list(train_spec.models),
        }
    }
    model = train_on_panel(sim.panel, options=TrainOptions(), source=source, progress=args.progress)
    print(f"trained ({model.card['train_seconds']:.0f} s)")
    held, first = held_out_spec(nodes=args.nodes, days=args.eval_days)
    ev_sim = simulate_panel(held, progress=args.progress)
    ds = build_dataset(
        ev_sim.panel,
        scoring_indices(ev_sim.panel, step_h=1, start=first),
        horizon_s=model.horizon_s,
        drop_unknown=False,
    )
    ev = evaluate_dataset(ds, failures_of(ev_sim.panel), model, horizon_s=model.horizon_s)
    model.card["metrics"]["held_out"] = {
        "fleet": {
            "nodes": args.nodes,
            "days": args.eval_days,
            "seed": 2,
            "history_from_ts": held.start_ts,
            "scored_from_ts": first,
        },
        "per_mode": ev.table.to_dict(orient="records"),
        **{k: v for k, v in ev.summary.items() if not isinstance(v, dict)},
    }
    folder = save_model(model, args.out)
    print(ev.render())
    print(f"wrote {folder} ({time.time() - t0:.0f} s in all)")


if __name__ == "__main__":
    main()
