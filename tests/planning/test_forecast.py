"""The forecaster on series whose seasonality is known: it finds it, and its intervals cover."""

import numpy as np
import pandas as pd
import pytest

from gpuwarden.errors import InputError
from gpuwarden.planning.backtest import mape, rolling_origin
from gpuwarden.planning.forecast import DAILY, WEEKLY, forecast, seasonal_naive

WEEKDAY = np.array([0.0, 1.0, 2.0, 2.0, 1.0, -3.0, -3.0]) * 2  # weekends quieter


def truth(hours: int, start: int = 0) -> np.ndarray:
    t = np.arange(start, start + hours)
    return 50 + 10 * np.sin(2 * np.pi * t / DAILY) + WEEKDAY[(t // DAILY) % 7]


def series(hours: int, seed: int = 0, noise: float = 1.0) -> pd.Series:
    rng = np.random.default_rng(seed)
    values = truth(hours) + rng.normal(0, noise, hours)
    return pd.Series(values, index=pd.date_range("2026-01-05", periods=hours, freq="h", tz="UTC"))


def test_recovers_daily_and_weekly_seasonality():
    history = series(10 * WEEKLY)
    fc = forecast(history, WEEKLY)
    assert fc.periods == (DAILY, WEEKLY)
    expected = truth(WEEKLY, start=10 * WEEKLY)
    # the seasonal shape is found: the forecast follows the true pattern hour by hour
    assert np.corrcoef(fc.mean.to_numpy(), expected)[0, 1] > 0.97
    assert mape(expected, fc.mean.to_numpy()) < 0.04
    # and beats repeating yesterday, which misses the weekday pattern
    assert mape(expected, fc.mean.to_numpy()) < mape(
        expected, seasonal_naive(history.to_numpy(), WEEKLY, DAILY)
    )
    assert fc.mean.index[0] == history.index[-1] + pd.Timedelta(hours=1)


def test_intervals_cover_new_noise_at_their_level():
    history = series(8 * WEEKLY, seed=1)
    fc = forecast(history, 2 * DAILY, level=0.8)
    rng = np.random.default_rng(99)
    hits = []
    for _ in range(20):  # fresh futures drawn from the same process
        future = truth(2 * DAILY, start=8 * WEEKLY) + rng.normal(0, 1.0, 2 * DAILY)
        hits.append(np.mean((future >= fc.lower.to_numpy()) & (future <= fc.upper.to_numpy())))
    assert 0.65 <= float(np.mean(hits)) <= 0.97
    assert (fc.lower <= fc.mean).all() and (fc.mean <= fc.upper).all()


def test_short_history_models_the_daily_season_only():
    fc = forecast(series(10 * DAILY), DAILY)
    assert fc.periods == (DAILY,)


@pytest.mark.parametrize(
    "values, horizon, level, message",
    [
        (np.ones(30), 24, 0.8, "at least 48"),
        (np.r_[np.ones(100), np.nan], 24, 0.8, "missing hours"),
        (np.ones(100), 0, 0.8, "horizon"),
        (np.ones(100), 24, 1.5, "level"),
    ],
)
def test_bad_input_is_named(values, horizon, level, message):
    s = pd.Series(values, index=pd.date_range("2026-01-01", periods=len(values), freq="h"))
    with pytest.raises(InputError, match=message):
        forecast(s, horizon, level=level)


def test_weekly_period_needs_two_weeks():
    with pytest.raises(InputError, match="336 hours"):
        forecast(series(200), 24, periods=(DAILY, WEEKLY))


def test_rolling_origin_scores_unseen_hours():
    bt = rolling_origin(series(4 * WEEKLY, seed=2), DAILY, min_train=3 * WEEKLY, step=2 * DAILY)
    summary = bt.summary()
    assert summary["origins"] == 4
    assert summary["mape_model"] < summary["mape_naive_week"] or summary["mape_model"] < 0.05
    assert 0 <= summary["coverage"] <= 1
    assert sum(bt.methods.values()) == 4 * 3  # three members averaged at each origin


def test_rolling_origin_needs_room():
    with pytest.raises(InputError, match="no origin"):
        rolling_origin(series(400), WEEKLY, min_train=WEEKLY * 2)
    with pytest.raises(InputError, match="one week"):
        rolling_origin(series(400), DAILY, min_train=100)


def test_mape_skips_zero_demand():
    assert mape(np.array([0.0, 10.0]), np.array([5.0, 12.0])) == pytest.approx(0.2)
    assert np.isnan(mape(np.zeros(3), np.ones(3)))


def test_plot_labels_do_not_run_into_each_other_at_a_months_turn():
    """Two weeks of history ending on 31 May and two days of forecast: the date labels on the
    x axis stay apart (full dates ran into each other where the month turned)."""
    from gpuwarden.planning.plots import forecast_figure

    hours = 3 * WEEKLY
    values = truth(hours)
    index = pd.date_range("2023-05-10", periods=hours, freq="h", tz="UTC")
    history = pd.DataFrame({"any": values}, index=index)
    fig = forecast_figure(history, {"any": forecast(history["any"], 2 * DAILY)})
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    boxes = [
        t.get_window_extent(renderer)
        for t in fig.axes[0].get_xticklabels()
        if t.get_text() and t.get_visible()
    ]
    assert len(boxes) >= 4
    boxes.sort(key=lambda b: b.x0)
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False))
