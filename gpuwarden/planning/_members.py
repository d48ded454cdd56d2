"""The statsmodels forecasters that ``forecast`` ranks and averages, each with its interval.

Each member takes an hourly history (no gaps) and returns the mean, lower and upper bound of
its ``level`` prediction interval for the next ``horizon`` hours:

- ``mstl``: STL's daily season carried forward, ETS (simple exponential smoothing with a
  likelihood) on the rest: follows the latest level;
- ``mstl-weekly``: the same with MSTL's daily and weekly seasons;
- ``stl-ar``: STL's daily season, an AR(1) with a mean on the rest (``STLForecast``): drifts
  back to the history's mean level, which a week ahead is often the better guess;
- ``theta``: the Theta method (``ThetaModel``) with a daily season: a damped drift;
- ``theta-weekly``: the daily season removed by STL, the rest averaged per day and forecast
  by Theta with a 7-day season: a weekly pattern from seven numbers, not 168, which a month of
  history can estimate.

A weekly member needs two weeks and a day of history; the daily ones three days.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden.errors import ConfigError

DAILY = 24
WEEKLY = 168

Bounds = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Member:
    """A forecaster: ``fit(values, horizon, level)`` -> (mean, lower, upper); ``periods`` the
    seasons it models (hours); ``min_hours`` the history it needs."""

    name: str
    periods: tuple[int, ...]
    min_hours: int
    fit: Callable[[np.ndarray, int, float], Bounds]


def _statsmodels() -> None:
    try:
        import statsmodels  # noqa: F401
    except ImportError as exc:
        raise ConfigError("forecasts need statsmodels: pip install 'gpuwarden[planning]'") from exc


def _seasons(values: np.ndarray, periods: Sequence[int], robust: bool = False) -> np.ndarray:
    """One column per period: MSTL's seasons (``robust``: STL's robust weights, which keep a
    burst of long jobs out of the seasonal shape)."""
    from statsmodels.tsa.seasonal import MSTL

    fit = MSTL(values, periods=list(periods), stl_kwargs={"robust": robust}).fit()
    return fit.seasonal.reshape(len(values), -1)


def _ahead(seasonal: np.ndarray, periods: Sequence[int], horizon: int) -> np.ndarray:
    """Each season's last cycle carried forward, summed."""
    out = np.zeros(horizon)
    for i, period in enumerate(periods):
        out += np.resize(seasonal[-period:, i], horizon)
    return out


def mstl_ets(periods: Sequence[int]) -> Callable[[np.ndarray, int, float], Bounds]:
    def fit(values: np.ndarray, horizon: int, level: float) -> Bounds:
        from statsmodels.tsa.exponential_smoothing.ets import ETSModel

        seasonal = _seasons(values, periods)
        adjusted = pd.Series(values - seasonal.sum(axis=1))
        model = ETSModel(adjusted, error="add", trend=None).fit(disp=False)
        frame = model.get_prediction(start=len(values), end=len(values) + horizon - 1)
        frame = frame.summary_frame(alpha=1 - level)
        ahead = _ahead(seasonal, periods, horizon)
        return tuple(frame[c].to_numpy() + ahead for c in ("mean", "pi_lower", "pi_upper"))  # type: ignore[return-value]

    return fit


def stl_ar(values: np.ndarray, horizon: int, level: float) -> Bounds:
    from statsmodels.tsa.arima.model import ARIMA
    from statsmodels.tsa.forecasting.stl import STLForecast

    model = STLForecast(
        values, ARIMA, model_kwargs={"order": (1, 0, 0), "trend": "c"}, period=DAILY, robust=True
    ).fit()
    frame = model.get_prediction(start=len(values), end=len(values) + horizon - 1)
    frame = frame.summary_frame(alpha=1 - level)
    return tuple(frame[c].to_numpy() for c in ("mean", "mean_ci_lower", "mean_ci_upper"))  # type: ignore[return-value]


def theta(values: np.ndarray, horizon: int, level: float) -> Bounds:
    from statsmodels.tsa.forecasting.theta import ThetaModel

    model = ThetaModel(values, period=DAILY).fit()
    bounds = model.prediction_intervals(horizon, alpha=1 - level)
    return (
        np.asarray(model.forecast(horizon)),
        bounds["lower"].to_numpy(),
        bounds["upper"].to_numpy(),
    )


def theta_weekly(values: np.ndarray, horizon: int, level: float) -> Bounds:
    from statsmodels.tsa.forecasting.theta import ThetaModel

    seasonal = _seasons(values, (DAILY,), robust=True)
    adjusted = values - seasonal[:, 0]
    whole = len(adjusted) // DAILY * DAILY  # days end with the history's last hour
    days = adjusted[-whole:].reshape(-1, DAILY).mean(axis=1)
    ahead_days = -(-horizon // DAILY)
    model = ThetaModel(days, period=7).fit()
    bounds = model.prediction_intervals(ahead_days, alpha=1 - level)
    daily = _ahead(seasonal, (DAILY,), horizon)

    def hourly(x: np.ndarray) -> np.ndarray:
        return np.repeat(np.asarray(x), DAILY)[:horizon] + daily

    return (
        hourly(np.asarray(model.forecast(ahead_days))),
        hourly(bounds["lower"].to_numpy()),
        hourly(bounds["upper"].to_numpy()),
    )


MEMBERS: tuple[Member, ...] = (
    Member("mstl", (DAILY,), 3 * DAILY, mstl_ets((DAILY,))),
    Member("mstl-weekly", (DAILY, WEEKLY), 2 * WEEKLY + DAILY, mstl_ets((DAILY, WEEKLY))),
    Member("stl-ar", (DAILY,), 3 * DAILY, stl_ar),
    Member("theta", (DAILY,), 3 * DAILY, theta),
    Member("theta-weekly", (DAILY, WEEKLY), 2 * WEEKLY + DAILY, theta_weekly),
)


def run(member: Member, values: np.ndarray, horizon: int, level: float) -> Bounds:
    """``member.fit`` with statsmodels' optimiser warnings silenced: they fire on flat
    stretches and converge anyway; the forecast is judged by its validation error instead."""
    _statsmodels()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mean, lower, upper = member.fit(values, horizon, level)
    return np.asarray(mean, float), np.asarray(lower, float), np.asarray(upper, float)
