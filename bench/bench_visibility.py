"""How many catchable failures show anything a day ahead: a detector that knows each fleet's
healthy range, against the shipped model (issue 17's overall target of 90%).

    .venv/bin/python bench/bench_visibility.py --default 22 --family 22001,22002 --out DIR
    .venv/bin/python bench/bench_visibility.py --pool DIR

"Catchable" is the simulator's ground truth: the precursor began 24 h or more before the
failure. It says nothing of how strong the precursor was by then against the fleet's benign
noise: the family draws precursors from x0.1 to x10 of the default's, benign noise from x0.1 to
x40, and lengths from x0.25 to x4, so some precursors a day ahead are smaller than what healthy
boards log every week.

The reference detector (``oracle``) reads, per row, the plain signals each mode shows
(``SIGNALS``). Each signal's value is turned into its rank among the healthy GPU-days' largest
values of the same fleet (the GPUs that do not fail within 30 days: the rows false flags are
counted on), a row scores the largest rank of its signals, and the threshold is the one that
flags at most 1 healthy GPU-day in 1,000 (the target's budget), with hard signals and the link
rules flagging as in ``gpuwarden score``. It is tuned on the fleet it judges and knows which
GPUs are healthy, which no deployed detector does; it is not a bound on what a model reading
many signals together can catch. A failure it catches 24 h ahead is *visible*: at some hour
from 7 days to 24 h before it, one of its signals stood above every healthy GPU-day but the
top 0.1%.

Per fleet, the figures go to ``DIR/<fleet>.json`` (a fleet already there is not run again);
``--pool`` prints them pooled by mode: catchable, visible, caught by the model (at its
threshold, one score, hard signals and link rules as in ``score``), and the model's catches
among the visible and among the rest. Fleets as ``bench_candidates.py fresh`` draws them.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: the plain signals of each mode the reference detector reads (features of the same name)
SIGNALS: dict[str, tuple[str, ...]] = {
    "hbm": ("sbe_per_day_24h", "sbe_per_day_7d", "remap_correctable_7d"),
    "pcie": ("pcie_replay_per_min_24h", "pcie_replay_per_min_7d"),
    "nvlink": ("nvlink_crc_per_min_24h", "nvlink_crc_per_min_7d"),
    "cooling": ("spread_rise_c", "spread_rise_vs_fleet", "hbm_load_rise_vs_fleet",
                "mem_temp_rise_c", "spread_c_24h_vs_node"),
}  # fmt: skip
#: flagged healthy GPU-days per 1,000 the reference detector is allowed (issue 17's target)
BUDGET_PER_1000 = 1.0


def healthy_days(meta: pd.DataFrame) -> np.ndarray:
    """Per row, the (key, day) group id of a healthy GPU-day as ``_metrics.false_flag_days``
    counts them, -1 on every other row."""
    from gpuwarden.models._metrics import OUTCOME_S

    at = meta["at"].to_numpy(np.float64)
    day = np.floor((at - 1.0) / 86400.0)
    end = (day + 1) * 86400.0
    fail = meta["fail_ts"].to_numpy(np.float64)
    keep = (end + OUTCOME_S <= at.max()) & ~((fail > day * 86400.0) & (fail <= end + OUTCOME_S))
    gid = pd.factorize(pd.Series(meta["key"].astype(str).to_numpy()) + "|" + day.astype(str))[0]
    return np.where(keep, gid, -1)


def oracle_flags(
    X: pd.DataFrame, meta: pd.DataFrame, hard: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The reference detector's flags (module docstring) and its score (1 on a hard signal or
    link rule), for its PR-AUC."""
    gid = healthy_days(meta)
    ok = gid >= 0
    score = np.zeros(len(X))
    for name in sorted({s for sig in SIGNALS.values() for s in sig}):
        v = X[name].to_numpy(np.float64)
        day_max = pd.Series(v[ok]).groupby(gid[ok]).max().dropna().to_numpy()
        if day_max.size == 0:
            continue
        ranks = np.searchsorted(np.sort(day_max), v, side="left") / day_max.size
        score = np.maximum(score, np.where(np.isnan(v), 0.0, ranks))
    day_score = pd.Series(score[ok]).groupby(gid[ok]).max().to_numpy()
    allowed = int(np.floor(day_score.size * BUDGET_PER_1000 / 1000))
    top = np.sort(day_score)[::-1]
    # flag rows above the (allowed + 1)-th highest healthy day: at most ``allowed`` days flag
    cut = top[allowed] if allowed < top.size else -np.inf
    return (score > cut) | hard, np.where(hard, 1.0, score)


def catchable_tables(
    ds: Any, fails: pd.DataFrame, flags: dict[str, np.ndarray], out: dict[str, Any]
) -> dict[str, pd.DataFrame]:
    """Per detector, its catchable failures (sudden kinds left out) by key with ``caught``
    (flagged 7 days to 24 h ahead); its false flags per 1,000 GPU-days go to ``out``."""
    from gpuwarden.models import _metrics as M
    from gpuwarden.models.evaluate import LEAD_S, sudden_kinds

    sudden = sudden_kinds()
    tables = {}
    for who, flag in flags.items():
        ft = M.failure_table(ds.meta, flag, fails, horizon_s=7 * 86400, lead_s=LEAD_S)
        keep = ~ft["fail_kind"].isin(sudden).to_numpy() & M.catchable(ft)
        tables[who] = ft[keep].set_index("key")
        on, days = M.false_flag_days(ds.meta, flag)
        out[f"{who}_ff_per_1000"] = on / days * 1000 if days else None
    return tables


def flag_counts(ds: Any, fails: pd.DataFrame, flags: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per detector: its catchable failures, those caught 24 h ahead, the cooling ones caught,
    its false-flag GPU-days (30-day outcome) and the GPU-days they are counted over."""
    from gpuwarden.models import _metrics as M

    tables = catchable_tables(ds, fails, flags, {})
    out = {}
    for who, flag in flags.items():
        t = tables[who]
        cooling = t["fail_kind"].astype(str).str.startswith("cool")
        on, days = M.false_flag_days(ds.meta, flag)
        out[who] = {
            "catchable": len(t),
            "caught": int(t["caught"].sum()),
            "cooling": int(t.loc[cooling, "caught"].sum()),
            "ff_days": int(on),
            "gpu_days": float(days),
        }
    return out


def pooled_counts(rows: list[dict[str, Any]], who: list[str]) -> pd.DataFrame:
    """``flag_counts`` of several fleets (``rows``, one dict per fleet), pooled per detector."""
    table = []
    for w in who:
        s = {k: sum(r[w][k] for r in rows) for k in rows[0][w]}
        table.append(
            {
                "flags": w,
                "caught": f"{s['caught']} of {s['catchable']}",
                "cooling": s["cooling"],
                "false-flag GPU-days": s["ff_days"],
                "per 1,000": round(1000 * s["ff_days"] / s["gpu_days"], 2),
            }
        )
    return pd.DataFrame(table)


def run_fleet(name: str, spec: Any, hides: list[Any], f0: float, model: Any) -> dict[str, Any]:
    from bench_candidates import judged_dataset

    from gpuwarden.models import _metrics as M
    from gpuwarden.models.evaluate import evaluate_dataset, failures_of
    from gpuwarden.models.rules import LinkRules, hard_signal

    sim, ds = judged_dataset(spec, hides, f0)
    fails = failures_of(sim.panel)
    hard = hard_signal(ds.X) | LinkRules.in_force().flag(ds.X)
    oracle, oracle_score = oracle_flags(ds.X, ds.meta, hard)
    flags = {"oracle": oracle, "model": (model.risk(ds.X) >= model.threshold) | hard}
    ev = evaluate_dataset(ds, fails, model, horizon_s=model.horizon_s)
    bound = ev.summary.get("oracle_pr_auc")  # the ground-truth timing bound
    known = ds.meta["known"].to_numpy(bool)
    out: dict[str, Any] = {
        "fleet": name,
        "model_pr_auc_vs_bound": ev.summary["model_pr_auc"] / bound if bound else None,
        "oracle_pr_auc_vs_bound": M.pr_auc(ds.y, oracle_score, known) / bound if bound else None,
    }
    tables = catchable_tables(ds, fails, flags, out)
    both = tables["oracle"][["fail_kind", "caught"]].rename(columns={"caught": "visible"})
    both["caught"] = tables["model"]["caught"].reindex(both.index).to_numpy()
    out["failures"] = [
        {"mode": str(kind).split("_")[0], "visible": bool(v), "caught": bool(c)}
        for kind, v, c in zip(both["fail_kind"], both["visible"], both["caught"], strict=True)
    ]
    return out


def pool(out: Path) -> pd.DataFrame:
    rows, ff = [], []
    for f in sorted(out.glob("*.json")):
        d = json.loads(f.read_text())
        fam = "default" if d["fleet"].startswith("seed") else "family"
        rows += [{**r, "family": fam} for r in d["failures"]]
        ff.append(
            (fam, d["fleet"], d["oracle_ff_per_1000"], d["model_ff_per_1000"],
             d["oracle_pr_auc_vs_bound"], d["model_pr_auc_vs_bound"])
        )  # fmt: skip
    df = pd.DataFrame(rows)
    table = []
    for (fam, mode), g in df.groupby(["family", "mode"]):
        table.append(_row(fam, mode, g))
    for fam, g in df.groupby("family"):
        table.append(_row(fam, "all", g))
    res = pd.DataFrame(table)
    with pd.option_context("display.width", 200):
        print(res.to_string(index=False))
        cols = ["family", "fleet", "oracle FF/1000", "model FF/1000", "oracle PR/bound",
                "model PR/bound"]  # fmt: skip
        per = pd.DataFrame(ff, columns=cols)
        print(per.round(2).to_string(index=False))
        print(per.groupby("family")[cols[2:]].mean().round(3).to_string())
    return res


def _row(fam: str, mode: str, g: pd.DataFrame) -> dict[str, Any]:
    vis = g["visible"]
    return {
        "family": fam,
        "mode": mode,
        "catchable": len(g),
        "visible": int(vis.sum()),
        "visible %": round(100 * vis.mean(), 1),
        "model caught": int(g["caught"].sum()),
        "caught of visible": f"{int(g['caught'][vis].sum())}/{int(vis.sum())}",
        "caught of the rest": f"{int(g['caught'][~vis].sum())}/{int((~vis).sum())}",
    }


def fleet_args(
    doc: str, family_help: str, *, link_focused: bool = False
) -> argparse.ArgumentParser:
    """The options the fleet benches take: which fleets, which model, where the figures go;
    ``link_focused``: also ``--link-focused`` (each member's link-focused variant too)."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--default", type=int, default=None, help="a default-simulator seed")
    ap.add_argument("--family", default="", help=family_help)
    ap.add_argument("--model", default=None, help="model directory (default: the shipped one)")
    ap.add_argument("--out", type=Path, default=None, help="per-fleet figures go here")
    ap.add_argument("--pool", type=Path, default=None, help="print a folder's figures pooled")
    if link_focused:
        ap.add_argument(
            "--link-focused", action="store_true", help="each member's link-focused variant too"
        )
    return ap


def run_members(
    ap: argparse.ArgumentParser,
    run_fleet: Callable[..., dict[str, Any]],
    pool_of: Callable[[Path], Any],
    option: str,
) -> None:
    """``run_fleets`` for a bench whose ``run_fleet`` takes one more argument, the value of
    its own option ``option`` (``ap`` from ``fleet_args(..., link_focused=True)``)."""
    args = ap.parse_args()

    def one(name: str, spec: Any, hides: list[Any], f0: float, model: Any) -> dict[str, Any]:
        return run_fleet(name, spec, hides, f0, model, getattr(args, option))

    run_fleets(ap, args, one, pool_of, as_drawn_only=not args.link_focused)


def run_fleets(
    ap: argparse.ArgumentParser,
    args: argparse.Namespace,
    one: Callable[[str, Any, list[Any], float, Any], dict[str, Any]],
    pool_of: Callable[[Path], Any],
    *,
    as_drawn_only: bool,
) -> None:
    """Each fleet ``--default`` and ``--family`` name (as ``bench_candidates.py fresh`` draws
    them) through ``one(name, spec, hides, first scoring time, model)`` into ``OUT/<fleet>.json``
    (a fleet already there is not run again), then ``pool_of(OUT)``; ``--pool`` only pools."""
    if args.pool is not None:
        pool_of(args.pool)
        return
    if args.out is None:
        ap.error("--out is needed to run fleets")
    from bench_candidates import _fleets, _own_columns
    from tqdm import tqdm

    from gpuwarden import tuning
    from gpuwarden.config import load_settings

    tuning.apply(load_settings())
    model = _own_columns(args.model)
    members = tuple(int(s) for s in args.family.split(",") if s)
    groups = _fleets("fresh", (args.default if args.default is not None else 0, members))
    todo = [f for f in groups["family"] if f[0].endswith("as-drawn") or not as_drawn_only]
    if args.default is not None:
        todo = groups["default"] + todo
    args.out.mkdir(parents=True, exist_ok=True)
    for name, spec, hides, f0 in tqdm(todo, desc="fleets", unit="fleet"):
        path = args.out / f"{name}.json"
        if path.exists():
            continue
        t0 = time.time()
        path.write_text(json.dumps(one(name, spec, hides, f0, model)))
        tqdm.write(f"{name}: {time.time() - t0:.0f} s")
    pool_of(args.out)


def main() -> None:
    ap = fleet_args(__doc__ or "", "family members, comma-separated (as drawn and link-focused)")
    run_fleets(ap, ap.parse_args(), run_fleet, pool, as_drawn_only=False)


if __name__ == "__main__":
    main()
