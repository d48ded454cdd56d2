"""Capacity planning and cost: how many GPUs the fleet will need, and the cheapest way to get them.

    from gpuwarden.planning import forecast, hourly_demand, records_from_scheduler
    demand = hourly_demand(records_from_scheduler("/var/lib/gpuwarden/scheduler.db"))
    fc = forecast(demand["H100"], horizon=24 * 7)

``demand`` reads what jobs asked for (scheduler database or openb trace), ``forecast`` projects
it with daily and weekly seasonality and prediction intervals, ``capacity`` turns a forecast into
a plan (x1.3 buffer, growth, planned launches, efficiency gains) and a ``should_scale`` decision,
``tco`` compares owning, renting bare metal and cloud per GPU-hour. statsmodels is imported only
when a forecast runs.
"""

from gpuwarden.planning.backtest import Backtest, mape, rolling_origin
from gpuwarden.planning.demand import (
    DemandRecord,
    hourly_demand,
    monthly_growth,
    openb_window,
    queue_wait_hourly,
    records_from_openb,
    records_from_scheduler,
)
from gpuwarden.planning.forecast import Forecast, forecast, seasonal_naive

__all__ = [
    "Backtest",
    "DemandRecord",
    "Forecast",
    "forecast",
    "hourly_demand",
    "mape",
    "monthly_growth",
    "openb_window",
    "queue_wait_hourly",
    "records_from_openb",
    "records_from_scheduler",
    "rolling_origin",
    "seasonal_naive",
]
