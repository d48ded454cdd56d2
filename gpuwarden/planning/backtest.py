"""Rolling-origin backtest of the demand forecast against seasonal-naive baselines.

From each origin (every ``step`` hours after ``min_train`` hours of history) the forecaster
sees only the hours before it and forecasts the next ``horizon``; the error is measured on the
hours it did not see. MAPE skips hours with zero demand, where a percentage error has no
meaning; coverage is the share of actual hours inside the prediction interval.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.planning.forecast import DAILY, WEEKLY, forecast, seasonal_naive


def mape(actual: np.ndarray, predicted: np.ndarray) -> float:
    """Mean absolute percentage error over the hours with non-zero demand (NaN if none)."""
    keep = actual != 0
    if not keep.any():
        return float("nan")
    return float(np.mean(np.abs(predicted[keep] - actual[keep]) / np.abs(actual[keep])))


@dataclass
class Backtest:
    """Per-origin scores of one horizon; ``mape_*`` as fractions, ``coverage`` a fraction."""

    horizon: int
    level: float
    origins: list[pd.Timestamp] = field(default_factory=list)
    mape_model: list[float] = field(default_factory=list)
    coverage: list[float] = field(default_factory=list)
    mape_naive_day: list[float] = field(default_factory=list)
    mape_naive_week: list[float] = field(default_factory=list)
    weekly_chosen: int = 0
    #: how often each member was among those averaged
    methods: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, float]:
        def avg(xs: list[float]) -> float:
            return float(np.nanmean(xs)) if xs else float("nan")

        return {
            "origins": float(len(self.origins)),
            "mape_model": avg(self.mape_model),
            "coverage": avg(self.coverage),
            "mape_naive_day": avg(self.mape_naive_day),
            "mape_naive_week": avg(self.mape_naive_week),
            "weekly_share": self.weekly_chosen / len(self.origins) if self.origins else 0.0,
        }


def rolling_origin(
    series: pd.Series,
    horizon: int,
    *,
    min_train: int = 15 * DAILY,
    step: int = DAILY,
    level: float = 0.8,
    progress: bool = False,
    **options: Any,
) -> Backtest:
    """Backtest ``forecast`` on ``series`` (hourly, no gaps); ``options`` go to ``forecast``
    (``methods``, ``top``, ``periods``). The weekly baseline needs a week of history before the
    origin, which ``min_train`` >= 168 gives. Each forecast validates its methods on the hours
    before its origin only."""
    values = series.to_numpy(dtype=float)
    if min_train < WEEKLY:
        raise InputError(f"min_train must be at least {WEEKLY} hours (one week), got {min_train}")
    origins = list(range(min_train, len(values) - horizon + 1, step))
    if not origins:
        raise InputError(
            f"{len(values)} hours leave no origin for a {horizon}-hour horizon after "
            f"{min_train} hours of training"
        )
    out = Backtest(horizon=horizon, level=level)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(origins), desc=f"backtest {horizon}h", unit="origin", leave=False)
    for origin in origins:
        actual = values[origin : origin + horizon]
        history = values[:origin]
        fc = forecast(series.iloc[:origin], horizon, level=level, **options)
        out.origins.append(series.index[origin])
        out.mape_model.append(mape(actual, fc.mean.to_numpy()))
        inside = (actual >= fc.lower.to_numpy()) & (actual <= fc.upper.to_numpy())
        out.coverage.append(float(inside.mean()))
        out.mape_naive_day.append(mape(actual, seasonal_naive(history, horizon, DAILY)))
        out.mape_naive_week.append(mape(actual, seasonal_naive(history, horizon, WEEKLY)))
        out.weekly_chosen += WEEKLY in fc.periods
        out.methods.update(fc.methods)
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    return out
