"""Training on a fleet's own history, on fleets unlike the shipped model's: does it beat the
shipped model on the months after, and does the history tell where its at-risk line belongs?

    .venv/bin/python bench/bench_own_history.py --family 4001,4002 --link-focused --out DIR
    .venv/bin/python bench/bench_own_history.py --default 25 --out DIR      # 1,024 GPUs
    .venv/bin/python bench/bench_own_history.py --pool DIR

Each fleet is drawn as ``bench_candidates.py fresh`` draws it (family members as drawn, and
link-focused with ``--link-focused``), with ``--history-days`` more before it: the user's
history. The same 60 days a judgement scores are then held out, scored every hour. On the
history (labels known up to its end, as ``gpuwarden train`` sees them):

- ``warm``: ``gpuwarden train --warm-start`` (boosting continued from the shipped trees, cut
  back on the history's later block, calibrated there), read at its own line;
- ``own``: the shipped recipe's trees on the history alone (as ``bench_specialist.py`` grows
  them, uncalibrated), read at the held-out budget line below;
- ``history line``: the shipped model at the lowest line that flags at most 1 healthy GPU-day
  in 1,000 of the history (healthy: no failure within 30 days, so the history's last 30 days
  are left out of the count), and at the higher of that and the card's line.

Beside them, the shipped model at its card's line and every model at the *held-out budget
line*: the one that flags at most 1 healthy GPU-day in 1,000 of the held-out months
themselves, which no deployed model can know (``bench_specialist.budget_flags``); at the same
false flags, catches compare rankings. Catchable and caught as in ``bench_candidates.py``
(precursor 24 h or more ahead, flagged 7 days to 24 h ahead; hard signals and link rules flag
as in ``gpuwarden score``); false flags on the held-out's first 30 days.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

#: who is read, in the order the tables print them
WHO = (
    "shipped",
    "shipped_budget",
    "shipped_history_line",
    "shipped_max_line",
    "warm",
    "warm_budget",
    "own_budget",
)
HISTORY_DAYS = 60.0


def run_fleet(
    name: str, spec: Any, hides: list[Any], f0: float, model: Any, days: float
) -> dict[str, Any]:
    from bench_specialist import budget_cut, budget_flags
    from bench_visibility import catchable_tables

    from gpuwarden.models import _metrics as M
    from gpuwarden.models.artifact import RiskModel
    from gpuwarden.models.estimator import default_trees
    from gpuwarden.models.evaluate import failures_of
    from gpuwarden.models.labels import build_dataset, scoring_indices
    from gpuwarden.models.rules import LinkRules, hard_signal
    from gpuwarden.models.simdata import simulate_panel
    from gpuwarden.models.train import TrainOptions, kind_weights, training_rows
    from gpuwarden.models.transfer import fit_from_base

    spec = replace(spec, days=spec.days + days, start_ts=spec.start_ts - days * 86400.0)
    sim = simulate_panel(spec, transforms=hides)
    panel, week = sim.panel, 7 * 86400
    rules = LinkRules.in_force()
    held = build_dataset(panel, scoring_indices(panel, step_h=1, start=f0), horizon_s=week)
    hist = build_dataset(
        panel,
        scoring_indices(panel, step_h=1, start=spec.start_ts + week),
        horizon_s=week,
        labels_until=f0,
    )
    hist = hist.select(hist.meta["at"].to_numpy() < f0)
    hard = hard_signal(held.X) | rules.flag(held.X)
    hard_h = hard_signal(hist.X) | rules.flag(hist.X)
    line = budget_cut(model.risk(hist.X), hist.meta, hard_h)  # the history line
    risk = model.risk(held.X)
    flags = {
        "shipped": (risk >= model.threshold) | hard,
        "shipped_budget": budget_flags(risk, held.meta, hard),
        "shipped_history_line": (risk > line) | hard,
        "shipped_max_line": ((risk > line) & (risk >= model.threshold)) | hard,
    }
    options = TrainOptions()
    train = training_rows(panel, labels_until=f0, options=options)
    est, info = fit_from_base(
        model, train, how="warm", weight=kind_weights(train, options.rare_kind_power)
    )
    warm_model = RiskModel(est, {**model.card, "threshold": info.get("threshold", model.threshold)})
    warm = warm_model.risk(held.X)
    flags["warm"] = (warm >= warm_model.threshold) | hard
    flags["warm_budget"] = budget_flags(warm, held.meta, hard)
    X = train.X.loc[:, train.X.notna().any().to_numpy()]  # a field never read is not learnt
    own = default_trees().fit(X, train.y).predict_proba(held.X[list(X.columns)])[:, 1]
    flags["own_budget"] = budget_flags(own, held.meta, hard)
    out: dict[str, Any] = {
        "fleet": name,
        "history_days": days,
        "history_failing_gpus": int(train.meta.loc[train.y == 1, "key"].nunique()),
        "history_line": line,
        "warm": {k: v for k, v in info.items() if k in ("how", "trees_added", "threshold")},
    }
    tables = catchable_tables(held, failures_of(panel), flags, out)
    for who, flag in flags.items():
        on, gpu_days = M.false_flag_days(held.meta, flag)
        out[f"{who}_ff_days"] = [int(on), float(gpu_days)]
    out["failures"] = [
        {"mode": str(kind).split("_")[0], **{w: bool(tables[w]["caught"].get(key)) for w in WHO}}
        for key, kind in tables["shipped"]["fail_kind"].items()
    ]
    return out


def pool(out: Path) -> None:
    import json

    rows, per = [], []
    for f in sorted(out.glob("*.json")):
        d = json.loads(f.read_text())
        rows += d["failures"]
        per.append(
            {
                "fleet": d["fleet"],
                "line": round(d["history_line"], 3),
                "catchable": len(d["failures"]),
                **{w: int(sum(r[w] for r in d["failures"])) for w in WHO},
                **{f"{w} FF": d[f"{w}_ff_per_1000"] for w in ("shipped", "shipped_max_line")},
            }
        )
    df = pd.DataFrame(rows)
    table = []
    for mode, g in [*df.groupby("mode"), ("all", df)]:
        table.append({"mode": mode, "catchable": len(g), **{w: int(g[w].sum()) for w in WHO}})
    ff = {"mode": "false flags / 1,000 GPU-days", "catchable": ""}
    for w in WHO:
        on = sum(json.loads(f.read_text())[f"{w}_ff_days"][0] for f in out.glob("*.json"))
        days = sum(json.loads(f.read_text())[f"{w}_ff_days"][1] for f in out.glob("*.json"))
        ff[w] = f"{on / days * 1000:.2f}" if days else "-"
    with pd.option_context("display.width", 220):
        print(pd.DataFrame([*table, ff]).to_string(index=False))
        print(pd.DataFrame(per).round(2).to_string(index=False))


def main() -> None:
    from bench_visibility import fleet_args, run_members

    ap = fleet_args(__doc__ or "", "family members, comma-separated (as drawn)", link_focused=True)
    ap.add_argument("--history-days", type=float, default=HISTORY_DAYS)
    run_members(ap, run_fleet, pool, "history_days")


if __name__ == "__main__":
    main()
