"""The closed loop's two PNG plots (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.closedloop.arms import ARM_TITLES, ARMS


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def interruptions(frame: pd.DataFrame, path: Path) -> Path:
    """Inference interruptions caused by failures, per arm, grouped by sudden share; the bar is
    the mean over seeds, split into failures with precursors and sudden ones, the whisker one
    standard deviation of the total."""
    plt = _pyplot()
    shares = sorted(frame["sudden_fraction"].unique())
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    width = 0.8 / len(ARMS)
    colors = {"none": "#9e9e9e", "hard": "#cc79a7", "rules": "#e69f00", "model": "#0072b2"}
    for i, arm in enumerate(ARMS):
        g = frame[frame["arm"] == arm].groupby("sudden_fraction")
        pre = g["interruptions_with_precursor"].mean().reindex(shares).to_numpy(float)
        sud = g["interruptions_sudden"].mean().reindex(shares).to_numpy(float)
        sd = g["interruptions"].std().reindex(shares).fillna(0).to_numpy(float)
        x = np.arange(len(shares)) + (i - (len(ARMS) - 1) / 2) * width
        ax.bar(x, pre, width, color=colors[arm], label=f"{ARM_TITLES[arm]}")
        ax.bar(x, sud, width, bottom=pre, color=colors[arm], alpha=0.45, hatch="//")
        ax.errorbar(x, pre + sud, yerr=sd, fmt="none", ecolor="black", capsize=3, lw=0.8)
    ax.set_xticks(np.arange(len(shares)), [f"{s:.0%} sudden" for s in shares])
    ax.set(ylabel="inference interruptions by GPU failures", title="Interruptions per arm")
    ax.set_ylim(0, max(1.0, float(frame["interruptions"].max())) * 1.35)  # room for the legend
    ax.legend(
        title="solid: failures with precursors; hatched: sudden",
        fontsize=8,
        title_fontsize=8,
        ncol=3,
        loc="upper center",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def withheld(result: Any, path: Path, *, sudden: float) -> Path:
    """Capacity withheld from critical work by flags, daily mean % of the fleet, mean over
    seeds, per arm; at ``sudden`` (or the first share run)."""
    plt = _pyplot()
    shares = sorted({r.sudden_fraction for r in result.results})
    share = sudden if sudden in shares else shares[0]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    n_gpus = result.config.gpus
    for arm in ARMS:
        series = [
            r.withheld_per_hour
            for r in result.results
            if r.arm == arm and r.sudden_fraction == share
        ]
        if not series:
            continue
        hours = min(len(s) for s in series)
        mean = np.mean([s[:hours] for s in series], axis=0) / n_gpus * 100.0
        days = hours // 24
        daily = mean[: days * 24].reshape(days, 24).mean(axis=1) if days else mean
        ax.plot(np.arange(daily.size) + (1 if days else 0), daily, label=ARM_TITLES[arm])
    ax.set(
        xlabel="simulated day",
        ylabel="% of GPUs withheld (not failed)",
        title=f"Capacity withheld by flags ({share:.0%} sudden, mean over seeds)",
    )
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
