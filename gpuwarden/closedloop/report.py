"""Tables and plots of a closed-loop run: per arm, means over seeds, reductions with a 95% CI.

A reduction is ``1 - arm / no prediction`` for one seed; the table gives its mean over seeds and a
95% Student-t interval (a seed where no prediction had none of the thing is left out of that
mean). No reduction can pass 100% (an arm cannot have fewer than none), so the interval's top is
clipped there. Files written by ``write_report``:

    closed_loop.md      the tables (what the CLI prints)
    per_seed.csv        one row per (sudden share, seed, arm)
    interruptions.png   inference interruptions by failures, per arm and sudden share
    withheld.png        capacity withheld over time, per arm (default sudden share)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from gpuwarden.closedloop.arms import ARM_TITLES, ARMS
from gpuwarden.closedloop.run import ClosedLoopResult, run_closed_loop
from gpuwarden.wording import counted

DEFAULT_SUDDEN = 0.3
#: the issue's targets for the model arm at the default sudden share
TARGET_PRECURSOR_CUT = 0.90
TARGET_ALL_CUT = 0.60
TARGET_WITHHELD = 0.03
REDUCED = {
    "interruptions_with_precursor": "interruptions, failures with precursors",
    "interruptions": "interruptions, all failures",
    "inference_downtime_gpu_h": "inference downtime",
    "training_lost_gpu_h": "training work lost",
}


def per_seed(result: ClosedLoopResult) -> pd.DataFrame:
    rows = []
    for r in result.results:
        row = {k: v for k, v in asdict(r).items() if k != "withheld_per_hour"}
        row["withheld_share"] = r.withheld_share
        rows.append(row)
    return pd.DataFrame(rows)


def mean_ci(values: np.ndarray) -> tuple[float, float, float]:
    """Mean and a 95% Student-t interval (NaN bounds under two values)."""
    from scipy import stats

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan, math.nan
    m = float(v.mean())
    if v.size < 2:
        return m, math.nan, math.nan
    half = float(stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return m, m - half, m + half


def reductions(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (sudden share, arm, metric): mean reduction vs no prediction and its 95% CI."""
    base = frame[frame["arm"] == "none"].set_index(["sudden_fraction", "seed"])
    out = []
    for (sudden, arm), g in frame.groupby(["sudden_fraction", "arm"], sort=False):
        g = g.set_index(["sudden_fraction", "seed"])
        for col in REDUCED:
            b = base[col].reindex(g.index).to_numpy(float)
            with np.errstate(divide="ignore", invalid="ignore"):
                cut = np.where(b > 0, 1.0 - g[col].to_numpy(float) / b, np.nan)
            m, lo, hi = mean_ci(cut)
            hi = min(hi, 1.0)  # 1 - arm / no prediction is at most 1 on every seed
            out.append({"sudden_fraction": sudden, "arm": arm, "metric": col, "mean": m,
                        "lo": lo, "hi": hi})  # fmt: skip
    return pd.DataFrame(out)


def _pct(m: float, lo: float, hi: float) -> str:
    if not math.isfinite(m):
        return "-"
    if not math.isfinite(lo):
        return f"{m:.0%}"
    return f"{m:.0%} [{lo:.0%}, {hi:.0%}]"


def _line(result: ClosedLoopResult) -> str:
    """The model arm's at-risk line, and the one it would have had when ``--threshold`` moved
    it (the ``at_risk_threshold`` setting, else the model card's)."""
    from gpuwarden.health import at_risk_threshold

    own = at_risk_threshold(result.model_card)
    line = result.config.threshold
    if line is None or line == own:
        return f"; model line {own:.2f}"
    return f"; model line {line:.2f} (--threshold; otherwise {own:.2f})"


def render(result: ClosedLoopResult) -> str:
    """Markdown: one table per sudden share, then the check against the targets."""
    cfg = result.config
    frame = per_seed(result)
    cuts = reductions(frame).set_index(["sudden_fraction", "arm", "metric"])
    lines = [
        f"Closed loop: {counted(len(cfg.seeds), 'seed')} ({cfg.seeds[0]}"
        + (f"..{cfg.seeds[-1]}" if len(cfg.seeds) > 1 else "")
        + (", members of the randomized family, 8 GPUs a node" if cfg.family else "")
        + f"), {cfg.days:g} "
        f"simulated days, {cfg.gpus} GPUs, failure rate x{cfg.accel:g} (accelerated: Meta's "
        f"0.0003 failures per GPU-day x{cfg.accel:g})"
        + (
            f"; benign temperature drift {cfg.thermal_drift_c:g} C (sd per GPU on core and HBM "
            "and per node, daily knots)"
            if cfg.thermal_drift_c
            else ""
        )
        + _line(result)
        + f"; mean busy {frame['busy_share'].mean():.0%}; {result.seconds:.0f} s.",
        "Means over seeds; reductions vs no prediction with a 95% t interval.",
    ]
    for sudden, g in frame.groupby("sudden_fraction", sort=True):
        mean = g.groupby("arm")[frame.columns[3:]].mean(numeric_only=True)
        lines += [
            "",
            f"### Sudden share {sudden:.0%} (failures: {mean['failures'].iloc[0]:.0f}, of which "
            f"{mean['failures_with_precursor'].iloc[0]:.0f} with precursors)",
            "",
            "| arm | inference interruptions (precursor / sudden) | cut, precursor failures "
            "| cut, all failures | inference downtime GPU-h | training lost GPU-h (cut) "
            "| capacity withheld | preemptions inference / training | breaker refusals |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for arm in ARMS:
            m = mean.loc[arm]

            def cut(metric: str, arm: str = arm, sudden: float = sudden) -> str:
                if arm == "none":
                    return "-"
                return _pct(*cuts.loc[(sudden, arm, metric)][["mean", "lo", "hi"]])

            lines.append(
                f"| {ARM_TITLES[arm]} | {m['interruptions']:.1f} "
                f"({m['interruptions_with_precursor']:.1f} / {m['interruptions_sudden']:.1f}) "
                f"| {cut('interruptions_with_precursor')} | {cut('interruptions')} "
                f"| {m['inference_downtime_gpu_h']:.1f} "
                f"| {m['training_lost_gpu_h']:.0f} ({cut('training_lost_gpu_h')}) "
                f"| {m['withheld_share']:.2%} "
                f"| {m['preemptions_inference']:.1f} / {m['preemptions_training']:.1f} "
                f"| {m['breaker_refusals']:.1f} |"
            )
    lines += ["", *check(frame, cuts)]
    return "\n".join(lines) + "\n"


def check(frame: pd.DataFrame, cuts: pd.DataFrame) -> list[str]:
    """The issue's acceptance figures for the model arm at the default sudden share."""
    if DEFAULT_SUDDEN not in set(frame["sudden_fraction"]):
        return [f"(targets are checked at sudden share {DEFAULT_SUDDEN:.0%}, not run)"]
    pre = cuts.loc[(DEFAULT_SUDDEN, "model", "interruptions_with_precursor"), "mean"]
    every = cuts.loc[(DEFAULT_SUDDEN, "model", "interruptions"), "mean"]
    sel = (frame["sudden_fraction"] == DEFAULT_SUDDEN) & (frame["arm"] == "model")
    withheld = frame.loc[sel, "withheld_share"].mean()
    marks = [
        ("precursor-failure interruptions cut", pre, f">= {TARGET_PRECURSOR_CUT:.0%}",
         pre >= TARGET_PRECURSOR_CUT),
        ("all-failure interruptions cut", every, f">= {TARGET_ALL_CUT:.0%}",
         every >= TARGET_ALL_CUT),
        ("capacity withheld", withheld, f"< {TARGET_WITHHELD:.0%}", withheld < TARGET_WITHHELD),
    ]  # fmt: skip
    lines = [
        f"Target, model arm at {DEFAULT_SUDDEN:.0%} sudden: {name} {value:.1%} (want {want}): "
        f"{'met' if ok else 'NOT met'} on the mean over seeds"
        for name, value, want, ok in marks
    ]
    for name, metric in (("precursor", "interruptions_with_precursor"), ("all", "interruptions")):
        row = cuts.loc[(DEFAULT_SUDDEN, "model", metric)]
        if math.isnan(row["lo"]) or math.isnan(row["hi"]):  # one seed, or no interruption
            why = "needs 2 seeds or more" if frame["seed"].nunique() < 2 else "not defined here"
            lines.append(f"  95% interval of the {name}-failure cut: {why}")
        else:
            lines.append(
                f"  95% interval of the {name}-failure cut: [{row['lo']:.0%}, {row['hi']:.0%}]"
            )
    at = frame[frame["sudden_fraction"] == DEFAULT_SUDDEN].groupby("arm").mean(numeric_only=True)
    if {"hard", "model"} <= set(at.index):  # what the model adds to gpuwarden without one
        for name, metric in (
            ("precursor", "interruptions_with_precursor"),
            ("all", "interruptions"),
        ):
            hard, model = at.loc["hard", metric], at.loc["model", metric]
            said = f"{1 - model / hard:.0%} fewer" if hard else "none to cut"
            lines.append(
                f"Model vs hard signals only at {DEFAULT_SUDDEN:.0%} sudden: {name}-failure "
                f"interruptions {hard:.1f} -> {model:.1f} ({said})"
            )
    return lines


def render_short(result: ClosedLoopResult) -> list[str]:
    """A few lines per arm for ``gpuwarden demo`` (one seed, one sudden share)."""
    frame = per_seed(result)
    mean = frame.groupby("arm").mean(numeric_only=True)
    first = mean.iloc[0]
    lines = [
        f"{result.config.gpus} GPUs, {result.config.days:g} days, failure rate "
        f"x{result.config.accel:g}: {first['failures']:.0f} GPU failures "
        f"({first['failures_with_precursor']:.0f} with precursors), mean busy "
        f"{frame['busy_share'].mean():.0%}"
    ]
    width = max(len(ARM_TITLES[arm]) for arm in ARMS)
    for arm in ARMS:
        m = mean.loc[arm]
        lines.append(
            f"{ARM_TITLES[arm]:<{width}}  inference interrupted {m['interruptions']:>3.0f} "
            f"({m['interruptions_with_precursor']:.0f} by failures with precursors), "
            f"moved {m['preemptions_inference']:.0f}; training lost "
            f"{m['training_lost_gpu_h']:.0f} GPU-h; capacity withheld {m['withheld_share']:.1%}"
        )
    return lines


def write_report(result: ClosedLoopResult, out: str | Path) -> list[Path]:
    """Write the table, the per-seed CSV and both plots into ``out``; returns the paths."""
    from gpuwarden.closedloop import _plots

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    table = folder / "closed_loop.md"
    table.write_text(render(result))
    frame = per_seed(result)
    csv = folder / "per_seed.csv"
    frame.to_csv(csv, index=False)
    return [
        table,
        csv,
        _plots.interruptions(frame, folder / "interruptions.png"),
        _plots.withheld(result, folder / "withheld.png", sudden=DEFAULT_SUDDEN),
    ]


def demo_run(echo: Callable[[str], None] = print) -> ClosedLoopResult:
    """The short version ``gpuwarden demo`` shows: one seed, 256 GPUs, 14 days, 30% sudden."""
    result = run_closed_loop(seeds=1, days=14, gpus=256, sudden=(0.3,), jobs=1, progress=False)
    for line in render_short(result):
        echo(f"      {line}")
    echo(
        f"      ({result.seconds:.0f} s; the full evaluation: gpuwarden evaluate closed-loop, "
        "docs/closed-loop.md)"
    )
    return result
