"""Training on a user's own fleet: does starting from the shipped model beat it, and beat
training from scratch, when the fleet has few failures?

    .venv/bin/python bench/bench_warmstart.py                 # 512 GPUs, 45 + 30 days
    .venv/bin/python bench/bench_warmstart.py --seed 102      # another user fleet
    .venv/bin/python bench/bench_warmstart.py --levels 5,20   # fewer training subsets
    .venv/bin/python bench/bench_warmstart.py --methods shipped,recalibrate,warm   # no scratch fits

The user fleet is unlike the shipped model's training fleet: another seed and period, two GPU
models in place of three (A100 and H200, no H100), racks 5 C warmer, twice the look-alike
boards, and a failure rate of ``--accel`` times the real one (the shipped model's fleet ran at
20). Its first ``--train-days`` are the history the user trains on; the following
``--eval-days`` are held out, scored every ``--step`` hours on every GPU of the fleet.

Each level trains on the GPUs of the first nodes of the fleet, as many as it takes for the
history to hold about N failing GPUs (``--levels``), so the held-out months are the same for
every level and method. Methods: the shipped model as it is; trees from scratch on the user's
history (``gpuwarden train --from-scratch``); the shipped trees with the calibration refit on
the user's history (recalibrate); and boosting continued from the shipped trees (warm). Prints
per level and method: failures with precursors caught at least 24 h ahead, false flags per
1,000 GPU-days and PR-AUC on the held-out months (``evaluate.evaluate_dataset``, the figures of
``gpuwarden evaluate``), and writes a plot of them to --out.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.models.artifact import RiskModel
from gpuwarden.models.evaluate import evaluate_dataset, failures_of
from gpuwarden.models.labels import build_dataset, scoring_indices
from gpuwarden.models.simdata import fleet_spec, simulate_panel
from gpuwarden.models.train import TrainOptions, fit_on_rows, kind_weights, training_rows
from gpuwarden.models.transfer import (
    WarmOptions,
    auto_choice,
    failing_in,
    fit_from_base,
    load_base_model,
    time_blocks,
)

METHODS = ("shipped", "scratch", "recalibrate", "warm")


def user_fleet(nodes: int, days: float, seed: int, accel: float):
    """A fleet unlike the shipped model's (see the module docstring)."""
    base = fleet_spec()
    return fleet_spec(
        nodes=nodes,
        days=days,
        seed=seed,
        accel=accel,
        start_ts=base.start_ts + 400 * 86400.0,
        models=("A100-80GB", "H200"),
        ambient_c=base.ambient_c + 5.0,
        lookalike_fraction=0.2,
    )


def first_nodes(train, target: int) -> tuple[np.ndarray, int]:
    """Mask of the rows of the fewest first nodes whose GPUs hold ``target`` failing GPUs."""
    hosts = train.meta["hostname"].to_numpy()
    failing = train.meta.loc[train.y == 1].drop_duplicates("key")["hostname"]
    per_node = failing.value_counts()
    names = np.unique(hosts)
    counts = per_node.reindex(names).fillna(0).cumsum().to_numpy()
    upto = int(np.searchsorted(counts, target)) + 1
    upto = min(upto, names.size)
    return np.isin(hosts, names[:upto]), upto


def figures(ev) -> dict[str, float]:
    slow = ev.table.set_index("mode").loc["ALL with precursors"]
    s = ev.summary
    return {
        "caught": int(slow["model_caught"]),
        "of": int(slow["failures"]),
        "recall": float(slow["model_recall"]),
        "ff": float(s["model_false_flags_per_1000"]),
        "pr_auc": float(s["model_pr_auc"]),
    }


def plot(path: Path, rows: list[dict]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, key, label in zip(
        axes,
        ("recall", "ff", "pr_auc"),
        ("caught >= 24 h ahead", "false flags per 1,000 GPU-days", "PR-AUC"),
        strict=True,
    ):
        for method in METHODS:
            pts = [(r["failures"], r[key]) for r in rows if r["method"] == method]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.plot(x, y, marker="o", label=method)
        ax.set_xscale("log")
        levels = sorted({r["failures"] for r in rows})
        ax.set_xticks(levels, [str(n) for n in levels])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("failing GPUs in the user's training history")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("held-out months of the user fleet")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=64, help="nodes (x8 GPUs) in the user fleet")
    ap.add_argument("--train-days", type=float, default=45.0)
    ap.add_argument("--eval-days", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=101)
    ap.add_argument("--accel", type=float, default=12.0, help="failure rate x the real one")
    ap.add_argument("--levels", default="5,20,80", help="failing GPUs to train on")
    ap.add_argument("--methods", default=",".join(METHODS), help="of: " + ", ".join(METHODS))
    ap.add_argument("--step", type=int, default=2, help="hours between held-out scores")
    ap.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "gpuwarden-bench-warmstart"
    )
    args = ap.parse_args()
    t0 = time.time()
    spec = user_fleet(args.nodes, args.train_days + args.eval_days, args.seed, args.accel)
    sim = simulate_panel(spec, progress=True)
    cut = spec.start_ts + args.train_days * 86400.0
    print(
        f"user fleet: {sim.panel.shape[1]} GPU lives, {len(sim.failures)} failures in "
        f"{args.train_days + args.eval_days:g} days ({time.time() - t0:.0f} s)",
        flush=True,
    )
    options = TrainOptions()
    train = training_rows(sim.panel, labels_until=cut, options=options)
    held = build_dataset(
        sim.panel,
        scoring_indices(sim.panel, step_h=args.step, start=cut + 3600.0),
        drop_unknown=False,
    )
    fails = failures_of(sim.panel)
    shipped = load_base_model(None)
    print(
        f"training rows: {len(train):,}; held-out rows: {len(held):,} ({time.time() - t0:.0f} s)",
        flush=True,
    )
    base_fig = figures(evaluate_dataset(held, fails, shipped, horizon_s=shipped.horizon_s))
    rows: list[dict] = []
    picks: list[str] = []
    head = (
        "| failing GPUs in history (nodes) | method | caught >= 24 h | false flags /1,000 "
        "GPU-days | PR-AUC |"
    )
    lines = [head, "|---|---|---:|---:|---:|"]
    for target in (int(x) for x in args.levels.split(",")):
        mask, nodes = first_nodes(train, target)
        ds = train.select(mask)
        n = int(ds.meta.loc[ds.y == 1, "key"].nunique())
        times = ds.meta["at"].to_numpy()
        _, early, late = time_blocks(times, WarmOptions().calibration_share)
        pick, _ = auto_choice(n, failing_in(ds, early), failing_in(ds, late))
        print(f"{n} failing GPUs on {nodes} nodes: `gpuwarden train` picks {pick}", flush=True)
        picks.append(f"{n}: {pick}")
        for method in args.methods.split(","):
            label = method
            t1 = time.time()
            try:
                if method == "shipped":
                    model, f = shipped, base_fig
                else:
                    if method == "scratch":
                        model = fit_on_rows(sim.panel, ds, options=options)
                    else:
                        w = kind_weights(ds, options.rare_kind_power)
                        est, info = fit_from_base(shipped, ds, how=method, weight=w)
                        card = dict(shipped.card)
                        card["threshold"] = info.get("threshold", shipped.threshold)
                        model = RiskModel(est, card)
                        if method == "warm":
                            label = f"warm (+{info['trees_added']} trees)"
                    ev = evaluate_dataset(held, fails, model, horizon_s=model.horizon_s)
                    f = figures(ev)
            except InputError as exc:
                lines.append(f"| {n} ({nodes}) | {method} | cannot train: {exc} | | |")
                print(lines[-1], flush=True)
                continue
            rows.append({"failures": n, "method": method, **f})
            lines.append(
                f"| {n} ({nodes}) | {label} | {f['caught']}/{f['of']} ({f['recall']:.0%}) | "
                f"{f['ff']:.2f} | {f['pr_auc']:.3f} |"
            )
            print(lines[-1], f"  [{time.time() - t1:.0f} s]", flush=True)
    print("\n" + "\n".join(lines))
    print(f"\n`gpuwarden train` without --from-shipped/--from-scratch picks: {'; '.join(picks)}")
    print(f"\nplot: {plot(args.out / 'warmstart.png', rows)}")
    print(f"{time.time() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
