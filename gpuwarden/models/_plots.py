"""The evaluation's PNG plots: PR curve, reliability curve, lead-time histogram, and the
trade-off between failures caught a day ahead and false flags (matplotlib, Agg backend: no
display needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: Path) -> Path:
    """Write ``fig`` to ``path`` and free it (pyplot keeps every open figure otherwise)."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def pr_curve(
    path: Path, y: np.ndarray, risk: np.ndarray, rule_flag: np.ndarray, threshold: float
) -> Path:
    """Precision-recall of the model's risk over (GPU, time) rows; the rule baseline and the
    model at its threshold as points."""
    from sklearn.metrics import average_precision_score, precision_recall_curve

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    if np.unique(y).size == 2:
        p, r, _ = precision_recall_curve(y, risk)
        ax.plot(r, p, label=f"model (PR-AUC {average_precision_score(y, risk):.2f})")
        for name, flag, marker in (
            ("rule baseline", rule_flag, "s"),
            (f"model at {threshold:g}", risk >= threshold, "o"),
        ):
            if flag.any():
                ax.plot([y[flag].sum() / y.sum()], [y[flag].mean()], marker, label=name)
        ax.legend(loc="upper right", fontsize=8)
    else:  # a fleet with no failure in the horizon (or only failures) has no curve
        ax.text(0.5, 0.5, "no curve: the rows hold one class", ha="center", va="center")
    ax.set(
        xlabel="recall (rows failing within the horizon)",
        ylabel="precision",
        xlim=(0, 1),
        ylim=(0, 1.02),
        title="Precision-recall, (GPU, time) rows",
    )
    return _save(plt, fig, path)


def reliability(path: Path, y: np.ndarray, risk: np.ndarray, raw: np.ndarray | None) -> Path:
    """Observed failure share against predicted risk (ten equal-width bins; empty bins are
    left out): on the diagonal, a risk of 0.7 comes true 70% of the time."""
    from sklearn.calibration import calibration_curve

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ax.plot([0, 1], [0, 1], ":", color="grey", label="perfect")
    if np.unique(y).size == 2:
        for name, score in (("calibrated risk", risk), ("trees before calibration", raw)):
            if score is None:
                continue
            true, pred = calibration_curve(y, score, n_bins=10, strategy="uniform")
            ax.plot(pred, true, "o-", label=name, markersize=4)
    ax.set(
        xlabel="predicted risk",
        ylabel="observed share failing within the horizon",
        xlim=(0, 1),
        ylim=(0, 1),
        title="Reliability",
    )
    ax.legend(loc="upper left", fontsize=8)
    return _save(plt, fig, path)


def lead_times(path: Path, leads: dict[str, np.ndarray], horizon_h: float) -> Path:
    """Histogram of lead times (hours from the first flag to the failure), one series each."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    bins = np.linspace(0, horizon_h, 29)
    for name, values in leads.items():
        v = values[np.isfinite(values)]
        ax.hist(v, bins=bins, alpha=0.55, label=f"{name} ({v.size} flagged)")
    ax.axvline(24, color="black", linestyle="--", linewidth=1, label="24 h")
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # failures count whole
    ax.set(
        xlabel="lead time (h)",
        ylabel="failures with precursors",
        title="How early failures were flagged",
    )
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def _same_point(curve: list[tuple[float, float, float]]) -> dict[tuple[float, float], str]:
    """One label per point of the curve: thresholds that land on the same (caught, false
    flags) are said together, lowest to highest ("0.3-0.4"; printed one over another they
    read as neither)."""
    at: dict[tuple[float, float], list[float]] = {}
    for th, c, f in curve:
        at.setdefault((round(c, 9), round(f, 9)), []).append(th)
    return {p: f"{min(t):g}" if len(t) == 1 else f"{min(t):g}-{max(t):g}" for p, t in at.items()}


def tradeoff(
    path: Path,
    curve: list[tuple[float, float, float]],
    points: dict[str, tuple[float, float]],
    threshold: float,
) -> Path:
    """Failures with precursors caught >= 24 h ahead against false flags per 1,000 GPU-days:
    the model at each risk threshold in ``curve`` (threshold, caught, false flags), its own
    threshold marked, and other detectors (the rules; a ground-truth oracle) as points."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ths, caught, false = (np.asarray(v, dtype=float) for v in zip(*curve, strict=True))
    ax.plot(false, caught, "o-", markersize=4, label="model, by risk threshold")
    for (c, f), same in _same_point(curve).items():
        ax.annotate(same, (f, c), textcoords="offset points", xytext=(4, -10), fontsize=7)
    at = np.flatnonzero(np.isclose(ths, threshold))
    if at.size:
        i = int(at[0])
        ax.plot(
            [false[i]], [caught[i]], "o", markersize=9, mfc="none", label=f"at-risk ({threshold:g})"
        )
    for (name, (c, f)), marker in zip(points.items(), ("s", "*", "D"), strict=False):
        ax.plot([f], [c], marker, markersize=8, label=name)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set(
        xlabel="false flags per 1,000 GPU-days",
        ylabel="failures with precursors caught >= 24 h ahead",
        ylim=(0, 1.05),  # a detector that catches all (the oracle) is drawn whole
        title="Caught a day ahead vs false flags",
    )
    ax.legend(loc="lower right", fontsize=8)
    return _save(plt, fig, path)
