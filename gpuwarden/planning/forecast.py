"""Hourly GPU demand forecasts with prediction intervals: MSTL, then ETS on what is left.

statsmodels' ``MSTL`` splits the history into a daily and a weekly seasonal component and a
seasonally adjusted rest; an ``ETSModel`` (additive errors, no trend: simple exponential
smoothing with a likelihood) forecasts the rest and gives its prediction interval; each seasonal
component goes forward as its last cycle, the way MSTL forecasts are built (Bandara et al.,
2021; statsforecast's ``MSTL`` does the same). Growth is not extrapolated from a few weeks of
hourly noise: capacity planning applies the measured monthly growth on top (``capacity``).

Which seasonal periods to model, and how much wider than ETS's the interval must be, is
decided on the history itself: each candidate set (daily and
weekly, daily only) forecasts the last ``horizon`` hours of the training data from what came
before them, the lower error wins, and its misses on those hours widen the interval. A weekly component needs several weeks to settle; on a
month of data it mostly learns one-off bursts and forecasts them again next week, and the
holdout sees that without looking at the future.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden.errors import ConfigError, InputError

DAILY = 24
WEEKLY = 168
#: Seasonal period sets tried, richest first; a set needs two whole cycles of its longest.
CANDIDATES: tuple[tuple[int, ...], ...] = ((DAILY, WEEKLY), (DAILY,))


@dataclass(frozen=True)
class Forecast:
    """Hourly forecast of GPU demand (GPUs wanted on average in each hour) with the central
    ``level`` prediction interval; ``periods``: the seasonal periods (hours) modelled;
    ``widened_by``: GPUs added to each side of ETS's interval so that it covered ``level`` of
    a holdout (MSTL's smoothers absorb part of the noise, so ETS alone sees too little)."""

    mean: pd.Series
    lower: pd.Series
    upper: pd.Series
    level: float
    periods: tuple[int, ...]
    widened_by: float = 0.0

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({"mean": self.mean, "lower": self.lower, "upper": self.upper})


def _check(series: pd.Series, horizon: int, level: float) -> np.ndarray:
    if horizon < 1:
        raise InputError(f"forecast horizon must be at least 1 hour, got {horizon}")
    if not 0 < level < 1:
        raise InputError(f"interval level must be between 0 and 1, got {level}")
    values = series.to_numpy(dtype=float)
    if np.isnan(values).any():
        raise InputError("the demand history has missing hours; fill or cut them first")
    if len(values) < 2 * DAILY:
        raise InputError(
            f"the demand history has {len(values)} hours; a forecast needs at least {2 * DAILY}"
        )
    return values


def _fit(values: np.ndarray, periods: Sequence[int], horizon: int, level: float) -> tuple:
    try:
        from statsmodels.tsa.exponential_smoothing.ets import ETSModel
        from statsmodels.tsa.seasonal import MSTL
    except ImportError as exc:
        raise ConfigError("forecasts need statsmodels: pip install 'gpuwarden[planning]'") from exc

    with warnings.catch_warnings():
        # ETS's optimiser warns on flat stretches and converges anyway; the forecast is checked
        # by the backtest, not by the optimiser's opinion of itself
        warnings.simplefilter("ignore")
        seasonal = MSTL(values, periods=list(periods)).fit().seasonal
        seasonal = seasonal.reshape(len(values), -1)
        adjusted = values - seasonal.sum(axis=1)
        # a Series: statsmodels' prediction frame needs an index to label its rows
        fit = ETSModel(pd.Series(adjusted), error="add", trend=None).fit(disp=False)
        pred = fit.get_prediction(start=len(values), end=len(values) + horizon - 1)
        frame = pred.summary_frame(alpha=1 - level)
    ahead = np.zeros(horizon)
    for i, period in enumerate(periods):
        ahead += np.resize(seasonal[-period:, i], horizon)
    mean = frame["mean"].to_numpy() + ahead
    lower = frame["pi_lower"].to_numpy() + ahead
    upper = frame["pi_upper"].to_numpy() + ahead
    return mean, lower, upper


def _holdout_size(horizon: int) -> int:
    return max(DAILY, min(horizon, WEEKLY))


def choose_periods(
    values: np.ndarray,
    horizon: int,
    level: float = 0.8,
    candidates: Sequence[tuple[int, ...]] = CANDIDATES,
) -> tuple[tuple[int, ...], float]:
    """The candidate period set with the lowest error on the last hours of ``values`` (at most a
    week), forecast from the hours before them, and the widening its ``level`` interval needed
    there to cover that share of those hours (conformalized quantile regression, Romano et al.,
    2019: the ``level`` quantile of ``max(lower - y, y - upper)``). With too little history for
    a holdout: the richest set that fits, and no widening."""
    holdout = _holdout_size(horizon)
    train, test = values[:-holdout], values[-holdout:]
    usable = [p for p in candidates if len(train) >= 2 * max(p) + DAILY]
    if not usable:
        fits = [p for p in candidates if len(values) >= 2 * max(p)]
        return (fits[0] if fits else candidates[-1]), 0.0
    best: tuple[float, tuple[int, ...], float] | None = None
    for periods in usable:
        mean, lower, upper = _fit(train, periods, holdout, level)
        error = float(np.mean(np.abs(mean - test)))
        scores = np.maximum(lower - test, test - upper)
        rank = min(1.0, level * (1 + 1 / len(scores)))
        widen = max(0.0, float(np.quantile(scores, rank)))
        if best is None or error < best[0]:
            best = (error, periods, widen)
    assert best is not None
    return best[1], best[2]


def forecast(
    series: pd.Series,
    horizon: int,
    *,
    level: float = 0.8,
    periods: Sequence[int] | None = None,
) -> Forecast:
    """Forecast ``horizon`` hours after ``series`` (hourly, no gaps). ``periods``: seasonal
    periods in hours; None chooses between daily+weekly and daily on a holdout of the history
    (which also calibrates the interval, for given periods too).
    Demand cannot be negative, so the mean and bounds are cut at 0."""
    values = _check(series, horizon, level)
    if periods and any(p < 2 for p in periods):
        raise InputError(f"seasonal periods must be at least 2 hours, got {list(periods)}")
    if periods and len(values) < 2 * max(periods):
        raise InputError(
            f"a {max(periods)}-hour season needs {2 * max(periods)} hours of history, "
            f"the series has {len(values)}"
        )
    candidates = (tuple(periods),) if periods else CANDIDATES
    chosen, widen = choose_periods(values, horizon, level, candidates)
    mean, lower, upper = _fit(values, chosen, horizon, level)
    lower, upper = lower - widen, upper + widen
    start = series.index[-1] + pd.Timedelta(hours=1) if len(series.index) else 0
    index = pd.date_range(start, periods=horizon, freq="h")
    return Forecast(
        mean=pd.Series(np.clip(mean, 0, None), index=index, name="mean"),
        lower=pd.Series(np.clip(lower, 0, None), index=index, name="lower"),
        upper=pd.Series(np.clip(upper, 0, None), index=index, name="upper"),
        level=level,
        periods=chosen,
        widened_by=widen,
    )


def seasonal_naive(values: np.ndarray, horizon: int, period: int) -> np.ndarray:
    """The baseline: each hour ahead is the same hour one ``period`` earlier."""
    return np.resize(values[-period:], horizon)
