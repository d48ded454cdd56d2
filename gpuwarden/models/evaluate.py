"""Evaluate a model and the rule baseline on the same history, side by side.

    ev = evaluate_store(store, load_model(), out_dir="eval")   # hourly scoring times
    print(ev.render())

Per failure mode (sudden failures in their own rows, never dropped): failures, the share caught
at least 24 h ahead, the median lead time; then false flags per 1,000 GPU-days on GPUs that do
not fail within the horizon, and PR-AUC on (GPU, time) rows. Definitions are in ``_metrics``.
With simulator ground truth (``precursor_start_ts``) it also reports the ceiling: the share of
failures whose precursor began at least 24 h before the failure, the most any detector can catch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.models import _metrics as M
from gpuwarden.models import _plots
from gpuwarden.models.artifact import RiskModel
from gpuwarden.models.features import HISTORY_H
from gpuwarden.models.history import load_panel, newest_sample_ts
from gpuwarden.models.labels import Dataset, build_dataset, scoring_indices
from gpuwarden.models.panel import HOUR_S, HourlyPanel
from gpuwarden.models.rules import LinkRules, baseline_flag, hard_signal
from gpuwarden.store.base import Store

LEAD_S = 86400.0


def sudden_kinds() -> tuple[str, ...]:
    """Failure kinds with no precursor (the simulator's; a user's other kinds count as
    failures that may have one)."""
    from gpuwarden.sim import SUDDEN_KINDS

    return tuple(SUDDEN_KINDS)


@dataclass
class Evaluation:
    """Per-mode table (model and rules side by side) and the fleet-wide figures."""

    table: pd.DataFrame
    summary: dict[str, Any]
    plots: dict[str, Path] = field(default_factory=dict)
    failures: pd.DataFrame = field(default_factory=pd.DataFrame)

    def render(self) -> str:
        """A Markdown table and summary lines (what ``gpuwarden evaluate`` prints)."""
        t = self.table
        head = (
            "| mode | failures | model: caught >= 24 h | model: median lead h "
            "| rules: caught >= 24 h | rules: median lead h |"
        )
        lines = [head, "|---|---:|---:|---:|---:|---:|"]
        for r in t.itertuples(index=False):
            lines.append(
                f"| {r.mode} | {r.failures} | {r.model_caught} ({_pct(r.model_recall)}) | "
                f"{_h(r.model_lead_h)} | {r.rules_caught} ({_pct(r.rules_recall)}) | "
                f"{_h(r.rules_lead_h)} |"
            )
        s = self.summary
        lines += [
            "",
            "| fleet-wide | model | rules |",
            "|---|---:|---:|",
            "| false flags per 1,000 GPU-days, 7-day label (flag episodes on GPUs not failing "
            f"within it) | {_f(s['model_false_flags_per_1000'])} "
            f"({s['model_false_flags']}) | {_f(s['rules_false_flags_per_1000'])} "
            f"({s['rules_false_flags']}) |",
        ]
        if s.get("model_false_flags_healthy_per_1000") is not None:
            lines.append(
                "| ... of them on GPUs with no precursor under way | "
                f"{_f(s['model_false_flags_healthy_per_1000'])} | "
                f"{_f(s['rules_false_flags_healthy_per_1000'])} |"
            )
        lines.append(
            f"| PR-AUC, (GPU, time) rows, fails within horizon | {_f(s['model_pr_auc'], 3)} | "
            f"{_f(s['rules_pr_auc'], 3)} |"
        )
        if s.get("model_pr_auc_precursor") is not None:
            lines.append(
                f"| PR-AUC, rows inside a precursor vs healthy rows | "
                f"{_f(s['model_pr_auc_precursor'], 3)} | {_f(s['rules_pr_auc_precursor'], 3)} |"
            )
        if s.get("model_false_flag_days_30d_per_1000") is not None:
            lines.append(
                "| false flags per 1,000 GPU-days, 30-day outcome (flagged GPU-days of GPUs "
                f"not failing within 30 days; {s['false_flag_gpu_days_30d']:.0f} GPU-days) | "
                f"{_f(s['model_false_flag_days_30d_per_1000'])} | "
                f"{_f(s['rules_false_flag_days_30d_per_1000'])} |"
            )
        elif "false_flag_gpu_days_30d" in s:
            # the figure needs 30 days of outcome after a GPU-day: say why it is absent
            lines.append(
                "| false flags per 1,000 GPU-days, 30-day outcome | - (no GPU-day here has 30 "
                "days of history after it: evaluate a longer history) | - |"
            )
        if s.get("pr_auc_vs_bound") is not None:
            lines.append(
                f"| PR-AUC / ground-truth bound | {_f(s['pr_auc_vs_bound'])} | "
                f"{_f(s['rules_pr_auc_vs_bound'])} |"
            )
        lines += _render_curve(s)
        lines += [
            "",
            f"{s['gpu_days']:,.0f} GPU-days without a failure in the horizon; "
            f"{s['scoring_times']:,} scoring times, {s['rows']:,} (GPU, time) rows.",
        ]
        if s.get("ceiling_24h") is not None:
            lines.append(
                f"Ceiling: {_pct(s['ceiling_24h'])} of failures with precursors had "
                "one that began >= 24 h before the failure (simulator ground truth)."
            )
        if s.get("oracle_pr_auc") is not None:
            lines.append(
                "From the same ground truth: an oracle that flags every GPU from the hour its "
                f"precursor begins makes {_f(s['oracle_false_flags_per_1000'])} false flags per "
                "1,000 GPU-days (slow declines flagged more than a horizon ahead); ranking first "
                "exactly the rows inside a precursor and within the horizon gives PR-AUC "
                f"{_f(s['oracle_pr_auc'], 3)} on the horizon label "
                f"({_f(s['oracle_pr_auc_no_sudden'], 3)} without sudden failures' rows); a "
                "model passes it only by ranking rows of sudden failures, or from before a "
                "precursor began, above the healthy rows the oracle leaves tied."
            )
        if s.get("spread_drift_c") is not None:
            drift, limit = s["spread_drift_c"], s["spread_drift_limit_c"]
            lines.append(
                f"Temperature drift: the HBM-core spread moved {drift:.2f} C from day to day on "
                f"the median GPU (median over the period's days); the model was trained "
                f"on fleets reading up to {limit:g} C"
                + ("; above that its thermal reasons are untested." if drift > limit else ".")
            )
        if s.get("error_level"):
            from gpuwarden.models.score import level_text, levels_over

            level, limit = s["error_level"], s.get("error_level_limit") or {}
            said = ", ".join(
                f"{k} {level_text(v)}"
                + (f" (warns above {level_text(limit[k])})" if k in limit else "")
                for k, v in level.items()
            )
            lines.append(
                f"Error level (percentiles over GPUs, median over the period's days): {said}"
                + (
                    "; past the training fleets': expect more false flags at the card's line."
                    if levels_over(level, limit)
                    else "."
                )
            )
        for name, path in self.plots.items():
            lines.append(f"{name}: {path}")
        return "\n".join(lines)


def _render_curve(s: dict[str, Any]) -> list[str]:
    """The catchable shares, the operating curve and the lead times, as Markdown."""
    lines: list[str] = []
    by_mode = s.get("catchable_by_mode") or {}
    if by_mode:
        lines += [
            "",
            "| mode (precursor began >= 24 h before) | catchable | model: caught >= 24 h |",
            "|---|---:|---:|",
        ]
        for mode, (n, caught) in by_mode.items():
            lines.append(f"| {mode} | {n} | {caught} ({_pct(caught / n if n else None)}) |")
    curve = s.get("operating_curve") or []
    if curve:
        which = s.get("operating_curve_false_flags", "")
        lines += [
            "",
            f"Operating curve (false flags: {which}; recall: failures with precursors caught "
            ">= 24 h ahead):",
            "",
            "| false flags / 1,000 GPU-days at most | best recall at 24 h | catchable caught "
            "| threshold |",
            "|---:|---:|---:|---:|",
        ]
        for b in s.get("recall_at_false_flags", []):
            lines.append(
                f"| {b['budget']:g} | {_pct(b['recall_24h'])} | {_pct(b['catchable_share'])} "
                f"| {_f(b['threshold'])} |"
            )
    q = s.get("lead_h_quantiles") or {}
    if q:
        lines += [
            "",
            "Lead times of failures with precursors flagged within the horizon (h): "
            + ", ".join(f"{k} {_h(v)}" for k, v in q.items()),
        ]
    return lines


def _pct(v: float | None) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v:.0%}"


def _h(v: float) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v:.0f}"


def _f(v: float | None, digits: int = 2) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v:.{digits}f}"


def failures_of(panel: HourlyPanel) -> pd.DataFrame:
    """The panel's failures, one row per failed GPU life: key, fail_ts, fail_kind, ..."""
    keys = panel.keys
    return keys[keys["fail_ts"].notna()].reset_index(drop=True)


#: Risk thresholds of the operating curve (the model's own is added), and the false-flag
#: budgets (per 1,000 GPU-days) it reports the best recall at.
CURVE_THRESHOLDS = tuple(round(x, 2) for x in np.arange(0.05, 0.96, 0.05))
CURVE_BUDGETS = (0.5, 1.0, 2.0, 5.0)


def evaluate_dataset(
    ds: Dataset,
    failures: pd.DataFrame,
    model: RiskModel,
    *,
    horizon_s: float,
    out_dir: str | Path | None = None,
    sudden: tuple[str, ...] | None = None,
    curve_thresholds: tuple[float, ...] = CURVE_THRESHOLDS,
) -> Evaluation:
    """Score ``ds`` (hourly rows, ``meta.known`` set) with the model and the rules; the
    operating curve is read at ``curve_thresholds`` and the model's own threshold."""
    sudden = sudden_kinds() if sudden is None else sudden
    known = ds.meta["known"].to_numpy(bool)
    risk = model.risk(ds.X)
    # the link rules flag beside the model, as they do in ``score``; PR-AUC stays the model's
    signals = hard_signal(ds.X)
    hard = signals | LinkRules.in_force().flag(ds.X)
    model_flag = (risk >= model.threshold) | hard
    rules_flag = baseline_flag(ds.X)
    model_score = np.where(signals, 1.0, risk)
    tables: dict[str, pd.DataFrame] = {}
    summary: dict[str, Any] = {}
    for name, flag, score in (
        ("model", model_flag, model_score),
        ("rules", rules_flag, rules_flag.astype(float)),
    ):
        ft = M.failure_table(ds.meta, flag, failures, horizon_s=horizon_s, lead_s=LEAD_S)
        onsets, gpu_days = M.false_flags(ds.meta, flag, ds.y, known)
        tables[name] = M.summarise(ft, onsets, gpu_days, sudden)
        summary[f"{name}_false_flags"] = onsets
        summary[f"{name}_false_flags_per_1000"] = onsets / gpu_days * 1000 if gpu_days else None
        summary[f"{name}_pr_auc"] = M.pr_auc(ds.y, score, known)
        summary[f"{name}_leads"] = ft
        summary["gpu_days"] = gpu_days
    ceiling = None
    if "precursor_start_ts" in failures and failures["precursor_start_ts"].notna().any():
        slow = failures[~failures["fail_kind"].isin(sudden)]
        lead = slow["fail_ts"] - slow["precursor_start_ts"]
        ceiling = float((lead >= LEAD_S).mean()) if len(slow) else None
        pre = failures.set_index("key")["precursor_start_ts"].reindex(ds.meta["key"]).to_numpy()
        inside = (
            (ds.y == 1)
            & (ds.meta["at"].to_numpy() >= pre)
            & ~ds.meta["fail_kind"].isin(sudden).to_numpy()
        )
        rows = known & (inside | (ds.y == 0))
        summary["model_pr_auc_precursor"] = M.pr_auc(inside, model_score, rows)
        summary["rules_pr_auc_precursor"] = M.pr_auc(inside, rules_flag.astype(float), rows)
        # flags on GPUs whose precursor has begun but that fail after the horizon (a slow
        # HBM decline over two weeks) are false by the definition; this splits them out
        degrading = ds.meta["at"].to_numpy() >= pre
        for name, flag in (("model", model_flag), ("rules", rules_flag)):
            on, days = M.false_flags(ds.meta, flag, ds.y | degrading, known)
            summary[f"{name}_false_flags_healthy_per_1000"] = on / days * 1000 if days else None
        summary.update(_oracle(ds, inside, pre, known, sudden))
    summary["threshold"] = model.threshold
    summary.update(
        _robust_figures(
            ds,
            failures,
            risk,
            hard,
            model_flag,
            rules_flag,
            summary,
            horizon_s,
            sudden,
            curve_thresholds,
        )
    )
    m, r = tables["model"], tables["rules"]
    table = pd.DataFrame(
        {
            "mode": m["mode"],
            "failures": m["failures"],
            "model_caught": m["caught_24h"],
            "model_recall": m["recall_24h"],
            "model_lead_h": m["median_lead_h"],
            "rules_caught": r["caught_24h"],
            "rules_recall": r["recall_24h"],
            "rules_lead_h": r["median_lead_h"],
        }
    )
    leads = summary.pop("model_leads"), summary.pop("rules_leads")
    summary.update(
        ceiling_24h=ceiling,
        rows=len(ds),
        scoring_times=int(ds.meta["at"].nunique()),
        threshold=model.threshold,
        horizon_s=horizon_s,
    )
    per_failure = leads[0][["key", "fail_kind", "fail_ts", "lead_h", "caught"]].merge(
        leads[1][["key", "lead_h", "caught"]], on="key", suffixes=("_model", "_rules")
    )
    ev = Evaluation(table, summary, failures=per_failure)
    if out_dir is not None:
        ev.plots = _write_plots(Path(out_dir), ds, known, risk, rules_flag, model, leads, sudden)
        curve = _tradeoff(ds, failures, risk, hard, known, horizon_s, sudden)
        slow = table.set_index("mode").loc["ALL with precursors"]
        points = {
            "rule baseline": (float(slow["rules_recall"]), summary["rules_false_flags_per_1000"])
        }
        if summary.get("oracle_false_flags_per_1000") is not None and ceiling is not None:
            points["oracle: flags from each precursor's start"] = (
                ceiling,
                float(summary["oracle_false_flags_per_1000"]),
            )
        ev.plots["trade-off"] = _plots.tradeoff(
            Path(out_dir) / "tradeoff.png", curve, points, model.threshold
        )
    return ev


def _oracle(
    ds: Dataset,
    inside: np.ndarray,
    pre: np.ndarray,
    known: np.ndarray,
    sudden: tuple[str, ...],
) -> dict[str, Any]:
    """What detectors that read the simulator's ground truth score on the same rows.

    One flags every row inside a precursor: it knows when each precursor began but not when it
    will end, so its flags on slow declines (a board 8 days from failure) are false by the
    label; a model beats its false flags only by telling how far off a failure is. The other
    ranks the rows inside a precursor and within the horizon first: the PR-AUC no model passes
    (sudden failures and the days before a precursor begins show nothing to rank)."""
    at = ds.meta["at"].to_numpy()
    not_sudden = ~ds.meta["fail_kind"].isin(sudden).to_numpy()
    degrading = (at >= pre) & not_sudden
    on, days = M.false_flags(ds.meta, degrading, ds.y, known)
    ranked = inside.astype(float)
    # the acceptance's label counts sudden failures' rows; the second figure leaves them out
    quiet = known & ~((ds.y == 1) & ~not_sudden)
    return {
        "oracle_false_flags_per_1000": on / days * 1000 if days else None,
        "oracle_pr_auc": M.pr_auc(ds.y, ranked, known),
        "oracle_pr_auc_no_sudden": M.pr_auc(ds.y, ranked, quiet),
    }


def _robust_figures(
    ds: Dataset,
    failures: pd.DataFrame,
    risk: np.ndarray,
    hard: np.ndarray,
    model_flag: np.ndarray,
    rules_flag: np.ndarray,
    summary: dict[str, Any],
    horizon_s: float,
    sudden: tuple[str, ...],
    curve_thresholds: tuple[float, ...],
) -> dict[str, Any]:
    """Issue 17's figures: false flags with a 30-day outcome, the share of catchable failures
    caught per mode, PR-AUC against the ground-truth bound, the operating curve and the lead
    times."""
    out: dict[str, Any] = {}
    on_m, days = M.false_flag_days(ds.meta, model_flag)
    on_r, _ = M.false_flag_days(ds.meta, rules_flag)
    out["false_flag_gpu_days_30d"] = days
    out["model_false_flag_days_30d"] = on_m
    out["model_false_flag_days_30d_per_1000"] = on_m / days * 1000 if days else None
    out["rules_false_flag_days_30d_per_1000"] = on_r / days * 1000 if days else None
    bound = summary.get("oracle_pr_auc")
    if bound:
        out["pr_auc_vs_bound"] = summary["model_pr_auc"] / bound
        out["rules_pr_auc_vs_bound"] = summary["rules_pr_auc"] / bound

    def caught_table(flag: np.ndarray) -> pd.DataFrame:
        ft = M.failure_table(ds.meta, flag, failures, horizon_s=horizon_s, lead_s=LEAD_S)
        return ft[~ft["fail_kind"].isin(sudden)].assign(
            catchable=M.catchable(ft)[~ft["fail_kind"].isin(sudden).to_numpy()]
        )

    slow = caught_table(model_flag)
    by_mode: dict[str, tuple[int, int]] = {}
    if "precursor_start_ts" in failures and len(slow):
        for kind in sorted(slow["fail_kind"].unique()):
            sel = slow[(slow["fail_kind"] == kind) & slow["catchable"]]
            by_mode[str(kind)] = (len(sel), int(sel["caught"].sum()))
        sel = slow[slow["catchable"]]
        by_mode["ALL with precursors"] = (len(sel), int(sel["caught"].sum()))
    out["catchable_by_mode"] = by_mode
    lead = slow["lead_h"].to_numpy(float) if len(slow) else np.array([])
    out["lead_h_quantiles"] = M.lead_quantiles(lead)
    use30 = days > 0
    out["operating_curve_false_flags"] = (
        "flagged GPU-days, 30-day outcome" if use30 else "flag episodes, 7-day label"
    )
    known = ds.meta["known"].to_numpy(bool)
    curve = []
    for th in sorted({*curve_thresholds, float(summary["threshold"])}):
        flag = (risk >= th) | hard
        ct = caught_table(flag)
        if use30:
            on, d = M.false_flag_days(ds.meta, flag)
        else:
            on, d = M.false_flags(ds.meta, flag, ds.y, known)
        n_c = int(ct["catchable"].sum()) if len(ct) else 0
        curve.append(
            {
                "threshold": th,
                "recall_24h": float(ct["caught"].mean()) if len(ct) else float("nan"),
                "catchable_share": float(ct.loc[ct["catchable"], "caught"].mean())
                if n_c
                else float("nan"),
                "false_flags_per_1000": on / d * 1000 if d else float("nan"),
            }
        )
    out["operating_curve"] = curve
    best = []
    for budget in CURVE_BUDGETS:
        ok = [c for c in curve if c["false_flags_per_1000"] <= budget]
        top = max(ok, key=lambda c: (c["recall_24h"], c["threshold"])) if ok else None
        best.append(
            {
                "budget": budget,
                "recall_24h": top["recall_24h"] if top else float("nan"),
                "catchable_share": top["catchable_share"] if top else float("nan"),
                "threshold": top["threshold"] if top else float("nan"),
            }
        )
    out["recall_at_false_flags"] = best
    return out


#: Risk thresholds the trade-off plot draws the model at (its own is marked).
TRADEOFF_THRESHOLDS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def _caught_and_false(
    ds: Dataset,
    failures: pd.DataFrame,
    flag: np.ndarray,
    known: np.ndarray,
    horizon_s: float,
    sudden: tuple[str, ...],
) -> tuple[float, float]:
    """(share of failures with precursors caught >= 24 h ahead, false flags per 1,000
    GPU-days) of one flag column."""
    ft = M.failure_table(ds.meta, flag, failures, horizon_s=horizon_s, lead_s=LEAD_S)
    slow = ft[~ft["fail_kind"].isin(sudden)]
    on, days = M.false_flags(ds.meta, flag, ds.y, known)
    caught = float(slow["caught"].mean()) if len(slow) else float("nan")
    return caught, on / days * 1000 if days else float("nan")


def _tradeoff(
    ds: Dataset,
    failures: pd.DataFrame,
    risk: np.ndarray,
    hard: np.ndarray,
    known: np.ndarray,
    horizon_s: float,
    sudden: tuple[str, ...],
) -> list[tuple[float, float, float]]:
    """(threshold, caught share, false flags per 1,000 GPU-days) of the model at each of
    ``TRADEOFF_THRESHOLDS``, hard signals always flagging."""
    return [
        (th, *_caught_and_false(ds, failures, (risk >= th) | hard, known, horizon_s, sudden))
        for th in TRADEOFF_THRESHOLDS
    ]


def _write_plots(
    out: Path,
    ds: Dataset,
    known: np.ndarray,
    risk: np.ndarray,
    rules_flag: np.ndarray,
    model: RiskModel,
    leads: tuple,
    sudden,
) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    y, k = ds.y[known], known
    raw = None
    if hasattr(model.estimator, "uncalibrated_proba"):
        raw = model.estimator.uncalibrated_proba(ds.X[k])[:, 1]
    slow = [lt[~lt["fail_kind"].isin(sudden)]["lead_h"].to_numpy(float) for lt in leads]
    return {
        "PR curve": _plots.pr_curve(
            out / "pr_curve.png", y, risk[k], rules_flag[k], model.threshold
        ),
        "reliability curve": _plots.reliability(out / "reliability.png", y, risk[k], raw),
        "lead-time histogram": _plots.lead_times(
            out / "lead_time.png", {"model": slow[0], "rules": slow[1]}, model.horizon_s / HOUR_S
        ),
    }


def evaluate_store(
    store: Store,
    model: RiskModel,
    *,
    failures: pd.DataFrame | None = None,
    start: float | None = None,
    end: float | None = None,
    step_h: int = 1,
    out_dir: str | Path | None = None,
    progress: bool = False,
) -> Evaluation:
    """Hourly (``step_h``) scoring times over ``[start, end]`` (default: the whole history),
    labels from the store's failures or ``failures``."""
    newest = newest_sample_ts(store)
    if newest is None:
        raise InputError(f"{store.url} holds no telemetry to evaluate on")
    first = float(store.gpus()["first_ts"].min())
    lo = first if start is None else float(start)
    hi = float(np.floor((newest + 1.0) / HOUR_S) * HOUR_S) if end is None else float(end)
    if hi <= lo:
        raise InputError("the evaluation period is empty: --end is not after --start")
    panel = load_panel(
        store, start=lo - HISTORY_H * HOUR_S, end=hi, failures=failures, progress=progress
    )
    times = scoring_indices(panel, step_h=step_h, start=lo + HOUR_S, end=hi)
    ds = build_dataset(
        panel,
        times,
        horizon_s=model.horizon_s,
        labels_until=newest + 1.0,
        drop_unknown=False,
        progress=progress,
    )
    ev = evaluate_dataset(ds, failures_of(panel), model, horizon_s=model.horizon_s, out_dir=out_dir)
    ev.summary.update(_fleet_drift(panel, times, step_h, model))
    ev.summary.update(_fleet_level(ds.X, ds.meta["at"].to_numpy(np.float64), step_h, model))
    return ev


def _fleet_level(X: pd.DataFrame, at: np.ndarray, step_h: int, model: RiskModel) -> dict[str, Any]:
    """The fleet's error level (``score.error_level``) at one scoring time a day, its median
    per figure, beside the levels from which ``score`` warns (``score.level_limit``)."""
    from gpuwarden.models.score import error_level, level_limit

    times = np.unique(at)[:: max(1, 24 // step_h)]
    daily = pd.DataFrame([error_level(X[at == t]) for t in times])
    if daily.empty:
        return {}
    return {
        "error_level": {k: float(v) for k, v in daily.median().items()},
        "error_level_limit": level_limit(model.card),
    }


def _fleet_drift(
    panel: HourlyPanel, times: np.ndarray, step_h: int, model: RiskModel
) -> dict[str, Any]:
    """The fleet's HBM-core spread drift (``score.fleet_spread_drift``) at one scoring time a
    day, its median: how far the evaluated fleet is from what the model was trained on."""
    from gpuwarden.models.score import daily_spread_drift, drift_limit

    known = daily_spread_drift(panel, times, step_h)
    if known.size == 0:
        return {}
    return {
        "spread_drift_c": float(np.median(known)),
        "spread_drift_limit_c": drift_limit(model.card),
    }
