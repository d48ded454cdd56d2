"""Pictures of a demand forecast (matplotlib PNG, as the rest of gpuwarden's reports)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from gpuwarden.planning.forecast import Forecast

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: History shown before the forecast: two weeks, enough to see both seasons.
SHOWN_HOURS = 14 * 24


def forecast_png(
    history: pd.DataFrame, forecasts: Mapping[str, Forecast], path: str | Path
) -> Path:
    """Write `forecast_figure` as a PNG."""
    import matplotlib.pyplot as plt

    fig = forecast_figure(history, forecasts)
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def forecast_figure(history: pd.DataFrame, forecasts: Mapping[str, Forecast]) -> Figure:
    """One panel per group: the last two weeks of demand, the forecast mean and its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    n = max(1, len(forecasts))
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.8 * n), squeeze=False)
    for ax, (name, fc) in zip(axes[:, 0], forecasts.items(), strict=False):
        shown = history[name].iloc[-SHOWN_HOURS:]
        ax.plot(shown.index, shown.to_numpy(), color="black", lw=0.8, label="requested")
        ax.plot(fc.mean.index, fc.mean.to_numpy(), color="tab:blue", lw=1.0, label="forecast")
        ax.fill_between(fc.mean.index, fc.lower.to_numpy(), fc.upper.to_numpy(),
                        color="tab:blue", alpha=0.2, label=f"{fc.level:.0%} interval")  # fmt: skip
        if len(fc.mean):
            ax.axvline(fc.mean.index[0], color="grey", lw=0.8, ls="--")
        # Short labels ("19", "Jun") where full dates would run into each other at a month's turn.
        locator = mdates.AutoDateLocator(tz=shown.index.tz)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=shown.index.tz))
        ax.set_title(f"{name}: GPUs requested per hour", fontsize=10)
        ax.set_ylabel("GPUs")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig
