"""From a demand forecast to GPUs: the plan (forecast x 1.3) and ``should_scale``.

Week ``k`` of the plan needs::

    (base x (1 + growth) ** (k x 7 / 30.44) + launches live in week k) x (1 - efficiency_gain) x buffer

``base`` is the forecast's mean demand over the week, or its peak hour (``basis``; for weeks
past the forecast, its last week's); ``growth`` the monthly growth of the last six months (``demand.monthly_growth``), or
what the user sets; ``launches`` the demand a user expects from planned launches (a TOML file);
``efficiency_gain`` the share of GPU time quantization or a new inference engine saves; the
buffer (default 1.3) the headroom for peaks, failures and maintenance.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.planning._toml import read_toml
from gpuwarden.planning.forecast import Forecast
from gpuwarden.planning.queuewait import QueueEvidence
from gpuwarden.wording import counted, plural

DAYS_PER_MONTH = 30.44
DEFAULT_BUFFER = 1.3
Basis = Literal["mean", "peak"]
_LAUNCH_KEYS = {"name", "gpu_model", "gpus", "start", "end", "tenant"}


@dataclass(frozen=True)
class Launch:
    """Demand a planned launch adds: ``gpus`` GPUs (average over an hour, like the forecast) of
    ``gpu_model`` from ``start`` until ``end`` (None: for good)."""

    name: str
    gpu_model: str
    gpus: float
    start: dt.date
    end: dt.date | None = None
    tenant: str = ""

    def live(self, day: dt.date) -> bool:
        return self.start <= day and (self.end is None or day < self.end)


def _date(value: Any, where: str) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    raise InputError(f"{where}: must be a date like 2027-03-01, got {value!r}")


def parse_launches(data: dict[str, Any], source: str = "launches") -> list[Launch]:
    """Launches from a parsed TOML document: ``[[launch]]`` tables with ``name``, ``gpu_model``,
    ``gpus``, ``start`` and optional ``end`` and ``tenant``."""
    unknown = set(data) - {"launch"}
    if unknown:
        raise InputError(f"{source}: unknown top-level {plural(len(unknown), 'key')} {', '.join(sorted(unknown))}; "
                         "write each launch as a [[launch]] table")  # fmt: skip
    tables = data.get("launch", [])
    if not isinstance(tables, list):
        raise InputError(f"{source}: 'launch' must be an array of tables ([[launch]])")
    out = []
    for i, table in enumerate(tables, start=1):
        where = f"{source}: launch {i}"
        if not isinstance(table, dict):
            raise InputError(f"{where}: must be a table")
        extra = set(table) - _LAUNCH_KEYS
        if extra:
            raise InputError(
                f"{where}: unknown {plural(len(extra), 'key')} {', '.join(sorted(extra))}"
            )
        for key in ("name", "gpu_model", "gpus", "start"):
            if key not in table:
                raise InputError(f"{where}: missing {key!r}")
        name = table["name"]
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"{where}: name must be a non-empty string")
        where = f"{source}: launch {name!r}"
        model = table["gpu_model"]
        if not isinstance(model, str) or not model.strip():
            raise InputError(f"{where}: gpu_model must be a non-empty string")
        gpus = table["gpus"]
        if isinstance(gpus, bool) or not isinstance(gpus, int | float) or not gpus > 0:
            raise InputError(f"{where}: gpus must be a number > 0, got {gpus!r}")
        if not math.isfinite(gpus):
            raise InputError(f"{where}: gpus must be finite, got {gpus!r}")
        start = _date(table["start"], f"{where}: start")
        end = _date(table["end"], f"{where}: end") if "end" in table else None
        if end is not None and end <= start:
            raise InputError(f"{where}: end {end} is not after start {start}")
        tenant = table.get("tenant", "")
        if not isinstance(tenant, str):
            raise InputError(f"{where}: tenant must be a string")
        out.append(Launch(name.strip(), model.strip(), float(gpus), start, end, tenant))
    return out


def load_launches(path: str | Path) -> list[Launch]:
    """The planned-launches TOML file; every mistake is an ``InputError`` naming the launch."""
    return parse_launches(read_toml(path), str(path))


def _require(*checks: tuple[bool, str]) -> None:
    """Raise the first failed check's message as an ``InputError``."""
    for ok, message in checks:
        if not ok:
            raise InputError(message)


@dataclass(frozen=True)
class WeekNeed:
    """GPUs of one model needed in week ``week`` (0: the week starting ``start``)."""

    week: int
    start: dt.date
    base_gpus: float
    launch_gpus: float
    need_gpus: float


def plan(
    mean: pd.Series,
    gpu_model: str,
    *,
    weeks: int = 12,
    growth: float = 0.0,
    launches: Sequence[Launch] = (),
    efficiency_gain: float = 0.0,
    buffer: float = DEFAULT_BUFFER,
    basis: Basis = "mean",
) -> list[WeekNeed]:
    """Weekly GPUs needed for ``gpu_model`` from an hourly forecast mean (``Forecast.mean``).
    ``basis``: the week's ``mean`` hourly forecast (the guideline's "forecast x 1.3", the buffer
    absorbing the daily peaks) or its ``peak`` hour (the buffer on top of the peak)."""
    _require(
        (weeks >= 1, f"weeks must be at least 1, got {weeks}"),
        (buffer >= 1, f"buffer must be at least 1 (1.3 is 30% headroom), got {buffer}"),
        (0 <= efficiency_gain < 1, f"efficiency gain must be in [0, 1), got {efficiency_gain}"),
        (growth > -1, f"monthly growth must be above -100%, got {growth}"),
        (not mean.empty, "the forecast is empty"),
        (basis in ("mean", "peak"), f"basis must be mean or peak, got {basis!r}"),
    )
    first = mean.index[0]
    out = []
    base = float(mean.mean() if basis == "mean" else mean.max())
    for k in range(weeks):
        start = first + pd.Timedelta(days=7 * k)
        week = mean[(mean.index >= start) & (mean.index < start + pd.Timedelta(days=7))]
        if not week.empty:
            base = float(week.mean() if basis == "mean" else week.max())
        grown = base * (1 + growth) ** (k * 7 / DAYS_PER_MONTH)
        day = start.date()
        extra = sum(
            lc.gpus
            for lc in launches
            if lc.gpu_model == gpu_model and lc.live(day + dt.timedelta(days=3))
        )
        need = (grown + extra) * (1 - efficiency_gain) * buffer
        out.append(WeekNeed(k, day, grown, extra, need))
    return out


Action = Literal["add", "release", "hold"]


@dataclass(frozen=True)
class ScaleDecision:
    """What to do about one GPU model: ``add`` ``gpus`` in ``in_weeks`` weeks (0: now),
    ``release`` ``gpus``, or ``hold``; ``reason`` says why in a sentence."""

    gpu_model: str
    action: Action
    gpus: int
    in_weeks: int
    reason: str

    def __str__(self) -> str:
        if self.action == "add":
            when = "now" if self.in_weeks == 0 else f"in {counted(self.in_weeks, 'week')}"
            return f"{self.gpu_model}: add {counted(self.gpus, 'GPU')} {when}: {self.reason}"
        if self.action == "release":
            return f"{self.gpu_model}: release {counted(self.gpus, 'GPU')}: {self.reason}"
        return f"{self.gpu_model}: hold: {self.reason}"


def should_scale(
    needs: Sequence[WeekNeed],
    current_gpus: int,
    gpu_model: str,
    *,
    lead_weeks: int = 0,
    release_margin: float = 0.1,
    queue: QueueEvidence | None = None,
) -> ScaleDecision:
    """Add, release or hold ``gpu_model`` against the plan ``needs``, and the queue.

    Add when a week needs more than ``current_gpus``: as many as the plan's peak needs, ordered
    ``lead_weeks`` (delivery and installation) before the first short week, or now if that is
    already past. Release when even the peak leaves more than ``release_margin`` of the fleet
    idle: the GPUs above the peak, so the plan's buffer stays whole. ``queue``: when the
    replayed forecast says jobs will wait too long, add now at least the GPUs it asks for
    (jobs already wait: lead time cannot be planned around); a release stands only if the
    queue holds. Its sentence joins the reason either way."""
    plan_decision = _plan_decision(needs, current_gpus, gpu_model, lead_weeks, release_margin)
    if queue is None:
        return plan_decision
    reason = f"{plan_decision.reason}; {queue.sentence()}"
    if queue.add_gpus:
        gpus = max(queue.add_gpus, plan_decision.gpus if plan_decision.action == "add" else 0)
        return ScaleDecision(gpu_model, "add", gpus, 0, reason)
    if queue.add_gpus is None and plan_decision.action == "release":
        return ScaleDecision(gpu_model, "hold", 0, 0, reason)
    return replace(plan_decision, reason=reason)


def _plan_decision(
    needs: Sequence[WeekNeed],
    current_gpus: int,
    gpu_model: str,
    lead_weeks: int,
    release_margin: float,
) -> ScaleDecision:
    _require(
        (bool(needs), "no plan to decide on"),
        (current_gpus >= 0, f"current GPUs must be >= 0, got {current_gpus}"),
        (lead_weeks >= 0, f"lead time must be >= 0 weeks, got {lead_weeks}"),
        (0 <= release_margin < 1, f"release margin must be in [0, 1), got {release_margin}"),
    )
    peak = max(needs, key=lambda n: n.need_gpus)
    short = [n for n in needs if n.need_gpus > current_gpus]
    if short:
        first = short[0]
        add = math.ceil(peak.need_gpus - current_gpus)
        when = max(0, first.week - lead_weeks)
        return ScaleDecision(
            gpu_model, "add", add, when,
            f"week {first.week} ({first.start}) needs {first.need_gpus:.1f} GPUs, the fleet has "
            f"{current_gpus}; the plan peaks at {peak.need_gpus:.1f} in week {peak.week}"
            + (f"; {counted(lead_weeks, 'week')} lead time" if lead_weeks else ""),
        )  # fmt: skip
    spare = current_gpus - math.ceil(peak.need_gpus)
    if current_gpus and spare > release_margin * current_gpus:
        return ScaleDecision(
            gpu_model, "release", spare, 0,
            f"the plan peaks at {peak.need_gpus:.1f} GPUs (week {peak.week}), "
            f"{spare} of {current_gpus} would stay idle",
        )  # fmt: skip
    return ScaleDecision(
        gpu_model, "hold", 0, 0,
        f"the plan peaks at {peak.need_gpus:.1f} GPUs (week {peak.week}) within the "
        f"{current_gpus} the fleet has",
    )  # fmt: skip


@dataclass(frozen=True)
class ModelPlan:
    """One GPU model's forecast (None: no demand history for it), the monthly growth applied
    (None: not measurable), the weekly plan and the decision."""

    gpu_model: str
    forecast: Forecast | None
    growth: float | None
    needs: list[WeekNeed]
    decision: ScaleDecision


#: Weeks the demand forecast itself covers; a longer plan carries the last one on, grown by
#: the monthly growth (a seasonal forecast says little past a month).
FORECAST_WEEKS = 4


def plan_model(
    series: pd.Series | None,
    gpu_model: str,
    current_gpus: int,
    *,
    start: pd.Timestamp,
    growth: float | None = None,
    launches: Sequence[Launch] = (),
    efficiency_gain: float = 0.0,
    buffer: float = DEFAULT_BUFFER,
    basis: Basis = "mean",
    weeks: int = 12,
    lead_weeks: int = 4,
    release_margin: float = 0.1,
    level: float = 0.8,
    train_weeks: int = 12,
) -> ModelPlan:
    """Forecast ``series`` (the model's hourly demand; None: none, a zero forecast from
    ``start``) for up to four weeks from its last ``train_weeks`` weeks, plan ``weeks`` weeks on
    it and decide: the one path ``gpuwarden plan should-scale`` and the report's capacity facts
    share, so that both say the same for the same history. ``growth`` None: measured."""
    from gpuwarden.planning.demand import monthly_growth
    from gpuwarden.planning.forecast import forecast

    horizon = min(weeks, FORECAST_WEEKS) * 168
    fc = None
    if series is not None:
        fc = forecast(series.iloc[-train_weeks * 168 :], horizon, level=level)
        mean = fc.mean
        rate = growth if growth is not None else monthly_growth(series)
    else:
        mean = pd.Series(0.0, index=pd.date_range(start, periods=horizon, freq="h"))
        rate = growth
    needs = plan(
        mean, gpu_model, weeks=weeks, growth=rate or 0.0, launches=launches,
        efficiency_gain=efficiency_gain, buffer=buffer, basis=basis,
    )  # fmt: skip
    decision = should_scale(
        needs, current_gpus, gpu_model, lead_weeks=lead_weeks, release_margin=release_margin
    )
    return ModelPlan(gpu_model, fc, rate, needs, decision)
