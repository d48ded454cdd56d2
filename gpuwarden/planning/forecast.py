"""Hourly GPU demand forecasts with prediction intervals: the best statsmodels forecasters on
the history's own recent past, averaged.

Five members (``_members``: MSTL + ETS with a daily or daily and weekly season, STL + AR(1),
Theta with a daily season, Theta on day means with a weekly season) each forecast the history's
last ``horizon`` hours (at most a week) from ``VALIDATION_ORIGINS`` origins a day apart, seeing
only the hours before each origin: a rolling-origin validation inside the history, never on the
hours being forecast. The ``TOP`` members with the lowest validation error are averaged, means
and interval bounds alike: a combination of a few good forecasts is more robust than the one
that happened to score best on three origins (Stock and Watson, 2004; the M4 competition's
combinations), and on the openb trace it is what beats the seasonal-naive baseline a week ahead
(docs/planning.md). The combination's errors on the validation origins then widen its interval
to cover ``level`` of those hours (conformalized quantile regression, Romano et al., 2019). Growth is not extrapolated from a few weeks of hourly noise: capacity planning applies
the measured monthly growth on top (``capacity``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.planning._members import DAILY, MEMBERS, WEEKLY, Member, mstl_ets, run
from gpuwarden.wording import plural

__all__ = ["DAILY", "WEEKLY", "Forecast", "forecast", "seasonal_naive", "choose_members"]

#: Rolling origins (a day apart) the members are ranked and the interval calibrated on.
VALIDATION_ORIGINS = 3
#: Members averaged: the best ``TOP`` on the validation.
TOP = 3


@dataclass(frozen=True)
class Forecast:
    """Hourly forecast of GPU demand (GPUs wanted on average in each hour) with the central
    ``level`` prediction interval; ``methods``: the members averaged (best first);
    ``periods``: the seasonal periods (hours) they model together; ``widened_by``: GPUs added
    to each side of the members' interval so that it covered ``level`` of the validation
    hours."""

    mean: pd.Series
    lower: pd.Series
    upper: pd.Series
    level: float
    periods: tuple[int, ...]
    widened_by: float = 0.0
    methods: tuple[str, ...] = ()

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


def validation_horizon(horizon: int) -> int:
    """Hours each validation origin forecasts: the horizon, within a day and a week."""
    return max(DAILY, min(horizon, WEEKLY))


def validation_origins(n: int, horizon: int, count: int = VALIDATION_ORIGINS) -> list[int]:
    """Up to ``count`` origins a day apart whose ``validation_horizon`` hours end inside a
    history of ``n`` hours, latest last."""
    h = validation_horizon(horizon)
    return [q for q in (n - h - DAILY * j for j in reversed(range(count))) if q > 0]


def choose_members(
    values: np.ndarray,
    horizon: int,
    level: float = 0.8,
    members: Sequence[Member] = MEMBERS,
    top: int = TOP,
) -> tuple[list[Member], float]:
    """The ``top`` members with the lowest mean absolute error on the rolling-origin
    validation of ``values`` (a member counts only if every origin leaves it the history it
    needs), and the widening their averaged ``level`` interval needed there to cover that share
    of the validation hours (the ``level`` quantile of ``max(lower - y, y - upper)``). With no
    member validated: every member the whole history fits, and no widening."""
    h = validation_horizon(horizon)
    origins = validation_origins(len(values), horizon)
    scored = [m for m in members if origins and origins[0] >= m.min_hours]
    if not scored:
        return [m for m in members if len(values) >= m.min_hours] or [members[0]], 0.0
    fits = {
        m.name: [run(m, values[:q], h, level) for q in origins] for m in scored
    }  # name -> per origin (mean, lower, upper)
    actual = np.concatenate([values[q : q + h] for q in origins])

    def stacked(name: str, k: int) -> np.ndarray:
        return np.concatenate([f[k] for f in fits[name]])

    errors = {m.name: float(np.mean(np.abs(stacked(m.name, 0) - actual))) for m in scored}
    best = sorted(scored, key=lambda m: errors[m.name])[:top]
    lower = np.mean([stacked(m.name, 1) for m in best], axis=0)
    upper = np.mean([stacked(m.name, 2) for m in best], axis=0)
    scores = np.maximum(lower - actual, actual - upper)
    rank = min(1.0, level * (1 + 1 / len(scores)))
    # widen only (never narrow): the validation origins are a day apart and share most of their
    # hours, too few to trust an interval tighter than the members' own
    return best, max(0.0, float(np.quantile(scores, rank)))


def forecast(
    series: pd.Series,
    horizon: int,
    *,
    level: float = 0.8,
    periods: Sequence[int] | None = None,
    methods: Sequence[str] | None = None,
    top: int = TOP,
) -> Forecast:
    """Forecast ``horizon`` hours after ``series`` (hourly, no gaps): the mean of the ``top``
    validated ``methods`` (member names, default all). ``periods``: MSTL + ETS on exactly these
    seasonal periods (hours) instead. The interval is calibrated on the validation either way.
    Demand cannot be negative, so the mean and bounds are cut at 0."""
    values = _check(series, horizon, level)
    if top < 1:
        raise InputError(f"top must be at least 1 member, got {top}")
    members: Sequence[Member] = MEMBERS
    if methods:
        unknown = set(methods) - {m.name for m in MEMBERS}
        if unknown:
            raise InputError(f"unknown forecast {plural(len(unknown), 'method')} {', '.join(sorted(unknown))}; "
                             f"there is {', '.join(m.name for m in MEMBERS)}")  # fmt: skip
        members = [m for m in MEMBERS if m.name in methods]
    if periods:
        if any(p < 2 for p in periods):
            raise InputError(f"seasonal periods must be at least 2 hours, got {list(periods)}")
        if len(values) < 2 * max(periods):
            raise InputError(
                f"a {max(periods)}-hour season needs {2 * max(periods)} hours of history, "
                f"the series has {len(values)}"
            )
        name = "mstl-" + "+".join(str(p) for p in periods)
        members = (Member(name, tuple(periods), 2 * max(periods), mstl_ets(tuple(periods))),)
    chosen, widen = choose_members(values, horizon, level, members, top)
    fits = [run(m, values, horizon, level) for m in chosen]
    mean = np.mean([f[0] for f in fits], axis=0)
    lower = np.mean([f[1] for f in fits], axis=0) - widen
    upper = np.mean([f[2] for f in fits], axis=0) + widen
    start = series.index[-1] + pd.Timedelta(hours=1) if len(series.index) else 0
    index = pd.date_range(start, periods=horizon, freq="h")
    return Forecast(
        mean=pd.Series(np.clip(mean, 0, None), index=index, name="mean"),
        lower=pd.Series(np.clip(lower, 0, None), index=index, name="lower"),
        upper=pd.Series(np.clip(upper, 0, None), index=index, name="upper"),
        level=level,
        periods=tuple(sorted({p for m in chosen for p in m.periods})),
        widened_by=widen,
        methods=tuple(m.name for m in chosen),
    )


def seasonal_naive(values: np.ndarray, horizon: int, period: int) -> np.ndarray:
    """The baseline: each hour ahead is the same hour one ``period`` earlier."""
    return np.resize(values[-period:], horizon)
