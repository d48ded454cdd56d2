"""Candidate models side by side, on fleets that choose and fleets that judge (issue 17).

    .venv/bin/python bench/bench_candidates.py choose shipped=-,B=/tmp/mB --out /tmp/cand
    .venv/bin/python bench/bench_candidates.py judge shipped=-,B=/tmp/mB --out /tmp/cand

Each fleet is simulated once and scored by every model (``-`` is the shipped one) at risk
thresholds ``THRESHOLDS``, on one score and on two hourly scores in a row; hard signals and
the link rules flag as in ``gpuwarden score``; each model is also read at its card's own line
(``model_lines``). Per fleet, the catchable failures caught >= 24 h
ahead by mode, the false flags (30-day outcome) and PR-AUC over the ground-truth bound go to
``OUT/<fleets>/<family>/<fleet>.json``; a fleet already there is not run again, so a run can be
stopped and resumed, or extended with another model in another folder.

- ``choose``: the default simulator's validation fleet (seed 2) and the family's
  ``VALIDATION_SEEDS``, as ``make model`` chooses the threshold; prints which threshold
  ``make_default.choose_threshold``'s rule gives each model on these thresholds.
- ``judge``: seed 3 and the family's ``HELD_OUT_SEEDS`` and ``FRESH_SEEDS``, which choose
  nothing.
- ``fresh``: seed 5 and ``FRESH_SEEDS_2`` (or ``--fresh-default N --fresh-family A,B``),
  drawn in wave 12 for judgements on fleets that saw neither ``choose`` nor ``judge``; a note
  says when a fleet was already spent on an earlier judgement (``SPENT``).

``--without-drift`` draws the family members without the benign thermal drift the family has
drawn since wave 14 (into another ``--out``). ``--counters K`` multiplies every fleet's error
rates, failing and benign alike, by K (``FleetSpec.counters_scaled``): another generator's
units, beyond the family's committed ranges (wave 23 used 0.1 and 10; another ``--out`` too).
``--family-only`` leaves the default simulator's fleet out (a stressed run of the members
alone). ``--narrow-noise`` draws the members' benign noise as before wave 24 (one level for SBE
and PCIe in ``family.NARROW_NOISE_RANGE``; another ``--out``).

Then ``pooled OUT choose|judge|fresh [MEMBERS]`` prints the pooled figures (optionally of some
fleets only, e.g. ``4001,4002,4003`` or ``seed2,2001,2002``), and ``versus
Q=OUTQ,F2=OUTF2 fresh`` each later model's most catches at the first one's false flags, line
by line (``matched``): two recipes compared along their curves, not at their choosers' lines.

Adaptive operating point (wave 15): each fleet's file also holds, per model, the figures on one
score at every pair of thresholds (t_still, t_drift), t_still < t_drift from ``THRESHOLDS``:
t_drift at the scoring hours when the fleet's HBM-core spread drifts more than
``score.SPREAD_DRIFT_LIMIT_C`` (``score.fleet_spread_drift`` over the week up to that hour),
t_still at the others. ``pairs OUT choose|judge|fresh [MEMBERS] [--pair MODEL=TS/TD,...]``
prints, for ``choose``, the pair ``make_default``'s rule gives each model (its budgets, over
pairs), and otherwise each model's pooled figures at the pair named. ``--switch A>B`` adds
model ``A>B``: model A at the still hours and B at the drifting ones, at every pair of their
thresholds.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden import tuning
from gpuwarden.config import load_settings

THRESHOLDS = (0.4, 0.45, 0.5, 0.55, 0.6, 0.62, 0.65, 0.7, 0.75, 0.8)
#: members drawn for a fresh judgement in wave 9 (2026-12-04); never trained or chosen on
FRESH_SEEDS = (4001, 4002, 4003)
#: ... and in wave 12 (2026-12-05), for ``fresh``: never trained, chosen or judged on before
FRESH_SEEDS_2 = (5001, 5002, 5003)
#: Fresh fleets already spent on a judgement (docs/simulator.md): a model designed after that
#: judgement has seen its outcome, so the figures are not fresh for it. (default seed, members,
#: wave)
SPENT: tuple[tuple[int, tuple[int, ...], int], ...] = (
    (5, (5001, 5002, 5003), 12),
    (6, (6001, 6002, 6003, 6004), 12),
    (7, (7001, 7002, 7003, 7004), 12),
    (8, (8001, 8002, 8003, 8004), 13),
    (9, (9001, 9002, 9003, 9004), 14),
    (10, (10001, 10002, 10003, 10004), 14),
    (11, (11001, 11002, 11003, 11004), 14),
    (12, (12001, 12002, 12003, 12004), 15),
    (13, (13001, 13002, 13003, 13004), 15),
    (14, (14001, 14002, 14003, 14004), 16),
    (15, (15001, 15002, 15003, 15004), 17),
    (16, (16001, 16002, 16003, 16004), 18),
    (17, (17001, 17002, 17003, 17004), 19),
    (18, (18001, 18002, 18003, 18004), 20),
    (19, (19001, 19002, 19003, 19004), 21),
    (20, (20001, 20002, 20003, 20004), 22),
    (21, (21001, 21002, 21003, 21004), 23),
    (22, (22001, 22002, 22003, 22004), 24),
    (23, (23001, 23002, 23003, 23004), 24),
    (24, (24001, 24002, 24003, 24004), 26),
    (25, (25001, 25002, 25003, 25004), 27),  # bench_own_history.py, 60 days earlier
    (26, (26001, 26002, 26003, 26004), 28),
    (27, (27001, 27002, 27003, 27004), 28),  # bench_burst_veto.py
    (28, (28001, 28002, 28003, 28004), 28),  # a second line on loud fleets (L)
    (29, (29001, 29002, 29003, 29004), 29),  # boosting until it stops (G)
    (30, (30001, 30002, 30003, 30004), 29),  # rounds chosen on the chooser's fleets (H)
    (31, (31001, 31002, 31003, 31004), 30),  # the mean of five draws (E)
    (32, (32001, 32002, 32003, 32004), 31),  # each draw hides its own nodes (F)
    (33, (33001, 33002, 33003, 33004), 32),  # F at the finer grid's line (F2)
    (34, (34001, 34002, 34003, 34004), 32),  # twice the family members (D48)
    (35, (35001, 35002, 35003, 35004), 32),  # ... the default simulator's share kept (D48w)
    (36, (36001, 36002, 36003, 36004), 33),  # one class per failure mode (M)
    (37, (37001, 37002, 37003, 37004), 35),  # early stopping on held-out GPU lives (J)
    (38, (38001, 38002, 38003, 38004), 36),  # each split from half the features (FS)
    (39, (39001, 39002, 39003, 39004), 37),  # trees that learn only what could be seen (LO)
    (40, (40001, 40002, 40003, 40004), 38),  # nor the healthy rows of a decline (LO2)
    (41, (41001, 41002, 41003, 41004), 39),  # a score that never falls as the evidence rises (MC)
    (42, (42001, 42002, 42003, 42004), 40),  # LO's rows with MC's monotone score (LM)
)
DAYS = 60.0


def _fleets(
    which: str,
    fresh: tuple[int, tuple[int, ...]] = (5, FRESH_SEEDS_2),
    *,
    drift: bool = True,
    counters: float = 1.0,
    wide_noise: bool = True,
) -> dict[str, list[tuple[str, Any, list[Any], float]]]:
    """(name, spec, transforms, first scoring time) per family of fleets; ``drift=False``: the
    family members without their benign thermal drift (as drawn before wave 14);
    ``wide_noise=False``: their benign noise as drawn before wave 24; ``counters``:
    every fleet's error rates, failing and benign, x this (``FleetSpec.counters_scaled``)."""
    from gpuwarden.models.make_default import family_variants
    from gpuwarden.models.simdata import HideField, held_out_spec
    from gpuwarden.sim.family import HELD_OUT_SEEDS, VALIDATION_SEEDS

    held, first = held_out_spec(days=DAYS)

    def family(seeds: tuple[int, ...], nodes: int) -> list[tuple[str, Any, list[Any], float]]:
        return [
            (
                label.replace(" ", "-"),  # "1001-as-drawn": the seed before the first dash
                d.spec.counters_scaled(counters),
                [HideField(m, f) for m, f in d.hidden],
                first,
            )
            for label, d in family_variants(
                seeds, nodes, DAYS + 7, held.start_ts, thermal_drift=drift, wide_noise=wide_noise
            )
        ]

    def default(seed: int) -> list[tuple[str, Any, list[Any], float]]:
        spec, f0 = held_out_spec(nodes=128, days=DAYS, seed=seed)
        return [(f"seed{seed}", spec.counters_scaled(counters), [], f0)]

    if which == "choose":
        return {"default": default(2), "family": family(VALIDATION_SEEDS, 16)}
    if which == "fresh":
        return {"default": default(fresh[0]), "family": family(fresh[1], 32)}
    return {"default": default(3), "family": family(HELD_OUT_SEEDS + FRESH_SEEDS, 32)}


def _own_columns(path: str | None) -> Any:
    """A model, loaded as ``load_model`` does (its types checked); one trained on fewer features
    than this code computes (the incumbent, scored through a candidate's code) reads its own
    columns by name."""
    from gpuwarden.models.artifact import RiskModel, load_any_features
    from gpuwarden.models.features import FEATURE_NAMES

    model = load_any_features(path)
    names = list(model.estimator.feature_names_in_)
    if names == list(FEATURE_NAMES):
        return model

    class Own(RiskModel):
        def risk(self, X: pd.DataFrame) -> np.ndarray:
            return super().risk(X[names]) if len(X) else np.empty(0)

    print(f"{model.path}: scored on its own {len(names)} columns")
    return Own(model.estimator, model.card, model.path)


def model_lines(model: Any) -> list[float]:
    """The lines a model is read at: ``THRESHOLDS`` and its card's own (a chooser on a finer
    grid than this bench's picks lines between them)."""
    return sorted(set(THRESHOLDS) | {round(float(model.threshold), 4)})


def judged_dataset(
    spec: Any, hides: list[Any], f0: float, *, step_h: int = 1, drop_unknown: bool = False
) -> tuple[Any, Any]:
    """The fleet simulated, and its rows every ``step_h`` hours from ``f0`` with the 7-day
    label (kept past the records' end, unlabelled, unless ``drop_unknown``): (sim, dataset)."""
    from gpuwarden.models.labels import build_dataset, scoring_indices
    from gpuwarden.models.simdata import simulate_panel

    sim = simulate_panel(spec, transforms=hides)
    ds = build_dataset(
        sim.panel,
        scoring_indices(sim.panel, step_h=step_h, start=f0),
        horizon_s=7 * 86400,
        drop_unknown=drop_unknown,
    )
    return sim, ds


def _figures(ds: Any, fails: pd.DataFrame, flag: np.ndarray, sudden: tuple[str, ...]) -> dict:
    from gpuwarden.models import _metrics as M
    from gpuwarden.models.evaluate import LEAD_S

    ft = M.failure_table(ds.meta, flag, fails, horizon_s=7 * 86400, lead_s=LEAD_S)
    keep = ~ft["fail_kind"].isin(sudden).to_numpy()
    slow = ft[keep].assign(catchable=M.catchable(ft)[keep])
    modes = {
        str(kind): [len(g), int(g["caught"].sum())]
        for kind, g in slow[slow["catchable"]].groupby("fail_kind")
    }
    on, days = M.false_flag_days(ds.meta, flag)
    return {"modes": modes, "ff_days": int(on), "gpu_days": float(days)}


def drifting_rows(panel: Any, at: np.ndarray) -> np.ndarray:
    """Per feature row (scored at ``at``): whether the fleet's spread drifted more than
    ``SPREAD_DRIFT_LIMIT_C`` over the week up to that hour (unknown: not drifting)."""
    from gpuwarden.models.panel import HOUR_S
    from gpuwarden.models.score import SPREAD_DRIFT_LIMIT_C, fleet_spread_drift

    t_row = np.searchsorted(panel.hours + HOUR_S, at)
    by_t = {int(t): fleet_spread_drift(panel, int(t)) for t in np.unique(t_row)}
    drift = np.array([np.nan if by_t[int(t)] is None else by_t[int(t)] for t in t_row])
    return np.nan_to_num(drift, nan=0.0) > SPREAD_DRIFT_LIMIT_C


def run(
    which: str,
    models_arg: str,
    out: Path,
    fresh: tuple[int, tuple[int, ...]] = (5, FRESH_SEEDS_2),
    *,
    drift: bool = True,
    switch: tuple[str, str] | None = None,
    counters: float = 1.0,
    wide_noise: bool = True,
    family_only: bool = False,
) -> None:
    from tqdm import tqdm

    from gpuwarden.models.evaluate import evaluate_dataset, failures_of, sudden_kinds
    from gpuwarden.models.rules import LinkRules, hard_signal

    models = {}
    for item in models_arg.split(","):
        name, _, path = item.partition("=")
        models[name] = _own_columns(None if path in ("", "-") else path)
    sudden = sudden_kinds()
    groups = _fleets(which, fresh, drift=drift, counters=counters, wide_noise=wide_noise)
    if family_only:
        groups.pop("default")
    todo = [(fam, *f) for fam, fleets in groups.items() for f in fleets]
    for fam, name, spec, hides, f0 in tqdm(todo, desc=f"{which} fleets", unit="fleet"):
        path = out / which / fam / f"{name}.json"
        if path.exists():
            continue
        t0 = time.time()
        sim, ds = judged_dataset(spec, hides, f0)
        fails = failures_of(sim.panel)
        hard = hard_signal(ds.X) | LinkRules.in_force().flag(ds.X)
        key = ds.meta["key"].astype(str).to_numpy()
        order = np.lexsort((ds.meta["at"].to_numpy(), key))
        same_prev = np.r_[False, key[order][1:] == key[order][:-1]]
        drifting = drifting_rows(sim.panel, ds.meta["at"].to_numpy(np.float64))
        res: dict[str, Any] = {"drifting_share": float(drifting.mean()) if drifting.size else 0.0}
        raws = {}
        for mname, model in models.items():
            raw = raws[mname] = model.risk(ds.X)
            s = raw[order]
            two = np.empty_like(raw)  # the lower of this hour's score and the one before
            two[order] = np.minimum(s, np.where(same_prev, np.r_[0.0, s[:-1]], 0.0))
            for n, arr in ((1, raw), (2, two)):
                for t in model_lines(model):
                    res[f"{mname}|{n}|{t}"] = _figures(ds, fails, (arr >= t) | hard, sudden)
            for i, ts in enumerate(THRESHOLDS):
                for td in THRESHOLDS[i + 1 :]:
                    flag = (raw >= np.where(drifting, td, ts)) | hard
                    res[f"{mname}|pair|{ts}/{td}"] = _figures(ds, fails, flag, sudden)
            ev = evaluate_dataset(ds, fails, model, horizon_s=model.horizon_s)
            res[f"{mname}|prauc"] = ev.summary.get("pr_auc_vs_bound")
        if switch is not None:
            still, moving = (raws[m] for m in switch)
            for ts in THRESHOLDS:
                for td in THRESHOLDS:
                    flag = np.where(drifting, moving >= td, still >= ts) | hard
                    res[f"{switch[0]}>{switch[1]}|pair|{ts}/{td}"] = _figures(
                        ds, fails, flag, sudden
                    )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res))
        tqdm.write(f"{which} {fam} {name}: {time.time() - t0:.0f} s")
    pooled(out, which, None)


def _pool(out: Path, which: str, members: list[str] | None) -> pd.DataFrame:
    """One row per (family, key) over the fleets' files: key ``MODEL|N|T`` (N scores in a row
    at threshold T) or ``MODEL|pair|TS/TD``."""
    rows = []
    for fam_dir in sorted((out / which).iterdir()):
        acc: dict[str, dict[str, Any]] = defaultdict(
            lambda: {"modes": defaultdict(lambda: [0, 0]), "ff": 0, "days": 0.0, "pr": []}
        )
        for f in sorted(fam_dir.glob("*.json")):
            if members and f.stem.split("-")[0] not in members:
                continue
            d = json.loads(f.read_text())
            for k, v in d.items():
                if not isinstance(v, dict):
                    continue
                a = acc[k]
                for m, (c, k_) in v["modes"].items():
                    a["modes"][m][0] += c
                    a["modes"][m][1] += k_
                a["ff"] += v["ff_days"]
                a["days"] += v["gpu_days"]
                p = d.get(f"{k.split('|')[0]}|prauc")
                if p is not None:
                    a["pr"].append(p)
        for k, a in acc.items():
            model, n, t = k.split("|")
            ts, _, td = t.partition("/")
            c = sum(x[0] for x in a["modes"].values())
            caught = sum(x[1] for x in a["modes"].values())
            row = {
                "family": fam_dir.name,
                "model": model,
                "in_a_row": 1 if n == "pair" else int(n),
                "threshold": float(ts),
                "t_drift": float(td or ts),
                "catchable": c,
                "caught": caught,
                "false_flags_per_1000": a["ff"] / a["days"] * 1000 if a["days"] else np.nan,
                "pr_auc_vs_bound": float(np.mean(a["pr"])) if a["pr"] else np.nan,
            }
            for mode, (cc, kk) in sorted(a["modes"].items()):
                row[mode.split("_")[0]] = f"{kk}/{cc}"
            rows.append(row)
    return pd.DataFrame(rows)


def _show(df: pd.DataFrame) -> None:
    with pd.option_context("display.width", 250, "display.max_rows", 3000):
        print(df.round(3).to_string(index=False))


def pooled(out: Path, which: str, members: list[str] | None) -> pd.DataFrame:
    """Pool the per-fleet figures per (family, model, scores in a row, threshold) and print
    them; for ``choose``, the threshold the shipped rule gives each model."""
    from gpuwarden.models.make_default import pick_threshold

    df = _pool(out, which, members)
    df = df[df["threshold"] == df["t_drift"]].drop(columns="t_drift")
    df = df.sort_values(["model", "in_a_row", "threshold", "family"])
    _show(df)
    if which == "choose" and {"default", "family"} <= set(df["family"]):
        for model, g in df[df["in_a_row"] == 1].groupby("model"):
            d, f = (
                g[g["family"] == fam].sort_values("threshold").to_dict("records")
                for fam in ("default", "family")
            )
            print(f"{model}: the rule chooses {pick_threshold(d, f):g}")
    return df


def pick_pair(df: pd.DataFrame) -> tuple[float, float] | None:
    """``make_default``'s rule over pairs (one model's rows of ``_pool`` on ``choose``, one
    score): the most catches over the default and family fleets with default false flags
    <= ``VALIDATION_BUDGET`` and family pooled <= ``FAMILY_BUDGET``; ties: the higher t_still,
    then the higher t_drift. None within budget: None."""
    from gpuwarden.models.make_default import FAMILY_BUDGET, VALIDATION_BUDGET

    one = df[df["in_a_row"] == 1].set_index(["threshold", "t_drift", "family"])
    best = None
    for ts, td in sorted({(a, b) for a, b, _ in one.index}):
        d, f = one.loc[(ts, td, "default")], one.loc[(ts, td, "family")]
        if d["false_flags_per_1000"] <= VALIDATION_BUDGET and (
            f["false_flags_per_1000"] <= FAMILY_BUDGET
        ):
            best = max(best or (-1, 0.0, 0.0), (int(d["caught"] + f["caught"]), ts, td))
    return None if best is None else (best[1], best[2])


def pairs(out: Path, which: str, members: list[str] | None, named: dict[str, str]) -> None:
    """Print the pair each model's rule chooses and its figures there (``choose``), or each
    named model's figures at its pair (``named``: MODEL -> "TS/TD"), per family of fleets."""
    df = _pool(out, which, members)
    for model, g in df[df["in_a_row"] == 1].groupby("model"):
        if which == "choose":
            pick = pick_pair(g)
            print(f"{model}: the rule over pairs chooses {pick}")
            if pick is None:
                continue
        elif model in named:
            ts, _, td = named[model].partition("/")
            pick = (float(ts), float(td))
        else:
            continue
        sel = g[(g["threshold"] == pick[0]) & (g["t_drift"] == pick[1])]
        _show(sel.sort_values("family"))


def matched(base: pd.DataFrame, cand: pd.DataFrame) -> pd.DataFrame:
    """For each line of ``base`` (one model's rows of ``_pool`` in one family, one score), the
    line of ``cand`` with the most catches whose false flags are at most base's there (ties:
    fewer false flags); NaN where none is. Two models compared at matched false flags, so that
    a recipe is not judged by where its chooser's line fell."""
    rows = []
    for b in base.sort_values("threshold").itertuples():
        ok = cand[cand["false_flags_per_1000"] <= b.false_flags_per_1000 + 1e-9]
        best = (
            ok.sort_values(["caught", "false_flags_per_1000"], ascending=[False, True]).iloc[0]
            if len(ok)
            else None
        )
        rows.append(
            {
                "line": b.threshold,
                "caught": b.caught,
                "false_flags": b.false_flags_per_1000,
                "cand_caught": np.nan if best is None else best["caught"],
                "cand_line": np.nan if best is None else best["threshold"],
                "cand_false_flags": np.nan if best is None else best["false_flags_per_1000"],
                "more": np.nan if best is None else best["caught"] - b.caught,
            }
        )
    return pd.DataFrame(rows)


def versus(named: dict[str, Path], which: str, members: list[str] | None) -> None:
    """Print each later model's most catches at the first model's false flags, line by line,
    per family of fleets (each NAME=OUT: the model NAME's figures in OUT, which may be a run of
    its own on the same fleets)."""
    one = {}
    for name, out in named.items():
        df = _pool(out, which, members)
        df = df[(df["model"] == name) & (df["in_a_row"] == 1) & (df["threshold"] == df["t_drift"])]
        if df.empty:
            raise SystemExit(f"{out}: no figures of model {name!r} on {which}")
        one[name] = df
    (base_name, base), *others = one.items()
    for name, cand in others:
        for fam in sorted(set(base["family"]) & set(cand["family"])):
            print(f"{fam}: {name} at most {base_name}'s false flags, line by line")
            _show(matched(base[base["family"] == fam], cand[cand["family"] == fam]))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("fleets", choices=("choose", "judge", "fresh", "pooled", "pairs", "versus"))
    ap.add_argument(
        "models",
        help="NAME=DIR,... (DIR '-': the shipped model); for pooled and pairs: OUT; for versus: "
        "BASE=OUT,CAND=OUT,... (each model's figures in its own run's OUT)",
    )
    ap.add_argument("which", nargs="?", help="pooled: choose, judge or fresh")
    ap.add_argument("members", nargs="?", help="pooled: family members, comma-separated")
    ap.add_argument("--out", type=Path, default=Path("/tmp/gpuwarden-bench-candidates"))
    ap.add_argument("--fresh-default", type=int, default=5, help="fresh: the default seed")
    ap.add_argument(
        "--fresh-family",
        default=",".join(map(str, FRESH_SEEDS_2)),
        help="fresh: family members, comma-separated (never trained, chosen or judged on)",
    )
    ap.add_argument(
        "--without-drift",
        action="store_true",
        help="family members without their benign thermal drift (as drawn before wave 14); "
        "use another --out, the fleets' files do not say which",
    )
    ap.add_argument(
        "--counters",
        type=float,
        default=1.0,
        help="every fleet's error rates, failing and benign, x this: another generator's units, "
        "beyond the family's committed ranges (wave 23: 0.1 and 10); use another --out",
    )
    ap.add_argument(
        "--narrow-noise",
        action="store_true",
        help="family members with their benign noise as drawn before wave 24 (one level for "
        "SBE and PCIe, x0.2-x5); use another --out",
    )
    ap.add_argument("--pair", default="", help="pairs: MODEL=TS/TD,... to print")
    ap.add_argument(
        "--family-only", action="store_true", help="run the family's fleets, not the default's"
    )
    ap.add_argument(
        "--switch",
        default=None,
        help="STILL>DRIFTING: also the figures of model STILL on the fleet's still hours and "
        "DRIFTING on the others, at every pair of thresholds (model 'STILL>DRIFTING' in pairs)",
    )
    args = ap.parse_args()
    tuning.apply(load_settings())
    from gpuwarden.sim.family import HELD_OUT_SEEDS, TRAIN_SEEDS, VALIDATION_SEEDS

    if args.fleets in ("pooled", "pairs", "versus"):
        if args.which not in ("choose", "judge", "fresh"):
            ap.error(f"{args.fleets} OUT choose|judge|fresh [MEMBERS]")
        members = args.members.split(",") if args.members else None
        if args.fleets == "versus":
            runs = dict(x.split("=", 1) for x in args.models.split(","))
            if len(runs) < 2:
                ap.error("versus BASE=OUT,CAND=OUT,...: at least two models")
            versus({k: Path(v) for k, v in runs.items()}, args.which, members)
        elif args.fleets == "pooled":
            pooled(Path(args.models), args.which, members)
        else:
            named = dict(x.split("=", 1) for x in args.pair.split(",")) if args.pair else {}
            pairs(Path(args.models), args.which, members, named)
    else:
        family = tuple(int(x) for x in args.fresh_family.split(","))
        used = set(HELD_OUT_SEEDS) | set(VALIDATION_SEEDS) | set(TRAIN_SEEDS) | set(FRESH_SEEDS)
        if args.fleets == "fresh" and (set(family) & used or args.fresh_default in (1, 2, 3, 4)):
            ap.error("--fresh-*: a seed that trains, chooses or judges the model")
        if args.fleets == "fresh":
            for seed, members, wave in SPENT:
                again = sorted(set(family) & set(members)) + (
                    [f"default seed {seed}"] if args.fresh_default == seed else []
                )
                if again:
                    print(
                        f"note: {', '.join(map(str, again))} judged candidates in wave {wave}: "
                        "not fresh for a model designed after that"
                    )
        run(
            args.fleets,
            args.models,
            args.out,
            (args.fresh_default, family),
            drift=not args.without_drift,
            switch=tuple(args.switch.split(">")) if args.switch else None,  # type: ignore[arg-type]
            counters=args.counters,
            wide_noise=not args.narrow_noise,
            family_only=args.family_only,
        )


if __name__ == "__main__":
    main()
