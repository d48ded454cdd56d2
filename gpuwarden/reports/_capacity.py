"""The capacity facts: the planner's forecast, should_scale decision and TCO break-even per GPU
model, from the scheduler database's demand history.

One forecast per GPU model (never per GPU), through ``capacity.plan_model``, the path
``gpuwarden plan should-scale`` takes with its default options, so the report and the command
say the same for the same database at the same hour. Demand the scheduler could not tie to a
model (``any``: jobs that allow every model and were never placed) has no fleet to compare with
and is left out.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass

import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.planning.capacity import DEFAULT_BUFFER, plan_model
from gpuwarden.planning.demand import ANY_MODEL, scheduler_demand
from gpuwarden.planning.forecast import WEEKLY
from gpuwarden.reports.model import Absent, Capacity, ModelCapacity, Utilisation
from gpuwarden.wording import counted

#: Two weeks: one to learn from and one held out to choose the seasons and calibrate the
#: interval, the least on which the forecast's interval means anything.
MIN_HISTORY_HOURS = 2 * WEEKLY
LEVEL = 0.8
PLAN_WEEKS = 12
LEAD_WEEKS = 4
RELEASE_MARGIN = 0.1
TRAIN_WEEKS = 12


@dataclass(frozen=True)
class CapacitySettings:
    buffer: float = DEFAULT_BUFFER
    prices: str = ""  # a price file; empty: the shipped defaults


def capacity(
    scheduler_db: str,
    now: float,
    gpus_by_model: dict[str, int],
    utilisation: Utilisation | None,
    settings: CapacitySettings = CapacitySettings(),
) -> tuple[Capacity | None, Absent | None]:
    """The capacity section, or why it is absent."""
    if importlib.util.find_spec("statsmodels") is None:
        return None, Absent(section="capacity", why="the demand forecast needs statsmodels: "
                            "pip install 'gpuwarden[planning]'")  # fmt: skip
    try:
        _, frame = scheduler_demand(scheduler_db, now_s=now)
    except InputError as exc:
        return None, Absent(section="capacity", why=str(exc))
    frame = frame.drop(columns=[c for c in frame.columns if c == ANY_MODEL])
    hours = len(frame)
    if hours < MIN_HISTORY_HOURS:
        return None, Absent(section="capacity", why=f"the scheduler database holds {counted(hours, 'hour')} "
                            f"of demand history; the forecast needs {MIN_HISTORY_HOURS} (two "
                            "weeks)")  # fmt: skip
    if frame.columns.empty:
        return None, Absent(section="capacity", why="no job in the scheduler database is tied "
                            "to a GPU model (placed on a node with one, or allowing only one)")  # fmt: skip
    prices, prices_name = price_file(settings.prices)
    util = {m.model: m.gpu_util_pct for m in utilisation.by_model} if utilisation else {}
    start = frame.index[-1] + pd.Timedelta(hours=1)
    rows = []
    for model in frame.columns:
        mp = plan_model(
            frame[model], model, gpus_by_model.get(model, 0), start=start,
            buffer=settings.buffer, weeks=PLAN_WEEKS, lead_weeks=LEAD_WEEKS,
            release_margin=RELEASE_MARGIN, level=LEVEL, train_weeks=TRAIN_WEEKS,
        )  # fmt: skip
        fc, d = mp.forecast, mp.decision
        assert fc is not None  # the model has a demand series
        week = fc.frame().iloc[:WEEKLY]
        price = match_prices(prices, model)
        rows.append(
            ModelCapacity(
                model=model,
                gpus=gpus_by_model.get(model, 0),
                forecast_mean_gpus=_r(week["mean"].mean()),
                forecast_peak_gpus=_r(week["mean"].max()),
                forecast_low_gpus=_r(week["lower"].min()),
                forecast_high_gpus=_r(week["upper"].max()),
                seasons="+".join(
                    "daily" if p == 24 else "weekly" if p == WEEKLY else f"{p}h" for p in fc.periods
                ),  # fmt: skip
                growth_monthly_pct=None if mp.growth is None else _r(100 * mp.growth),
                peak_need_gpus=_r(max(n.need_gpus for n in mp.needs)),
                action=d.action,
                change_gpus=d.gpus,
                in_weeks=d.in_weeks,
                reason=d.reason,
                break_even_own_pct=_pct(price.break_even("own")) if price else None,
                break_even_reserved_pct=_pct(price.break_even("cloud_reserved")) if price else None,
                gpu_util_pct=util.get(model),
            )
        )
    return Capacity(
        history_hours=hours,
        trained_hours=min(hours, TRAIN_WEEKS * WEEKLY),
        interval_level_pct=100 * LEVEL,
        buffer=settings.buffer,
        plan_weeks=PLAN_WEEKS,
        lead_weeks=LEAD_WEEKS,
        release_margin_pct=100 * RELEASE_MARGIN,
        prices=prices_name,
        fleet_gpu_util_pct=utilisation.fleet_gpu_util_pct if utilisation else None,
        by_model=rows,
    ), None


def price_file(path: str) -> tuple[dict, str]:
    from gpuwarden.planning.tco import load_prices

    return load_prices(path or None), path or "default prices (gpuwarden/planning/prices.toml)"


def match_prices(prices: dict, model: str):
    """The prices of ``model``: its own entry, else the one priced model named inside it
    ("NVIDIA H100 80GB HBM3" -> "H100")."""
    if model in prices:
        return prices[model]
    named = [p for name, p in prices.items()
             if re.search(rf"(?<![a-z0-9]){re.escape(name.lower())}(?![0-9])", model.lower())]  # fmt: skip
    return named[0] if len(named) == 1 else None


def _r(x: float) -> float:
    return round(float(x), 1)


def _pct(u: float | None) -> float | None:
    return None if u is None else round(100.0 * u, 1)
