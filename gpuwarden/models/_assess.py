"""The model as ``gpuwarden serve``'s scorer: ``assess(store, at)``.

``serve`` calls this every interval and combines it with its own hard-signal assessor, so a
double-bit error or a fatal Xid acts at once whatever the model says. The records are
``health.RiskAssessment``, the type serve decides on: nothing is re-parsed on the way.
When the fleet's temperatures drift more, or its GPUs log more errors, than on the fleets the
model was trained on, it logs ``score.drift_warnings`` and ``score.level_warnings`` once a day.
``spread_drift()`` gives serve's ``/metrics`` the drift
(``gpuwarden_fleet_spread_drift_celsius``), and ``error_level()`` the error level and its
limits (``gpuwarden_fleet_error_level``, ``gpuwarden_fleet_error_level_limit``).
"""

from __future__ import annotations

import functools
import logging
import os

from gpuwarden.health import RiskAssessment
from gpuwarden.store.base import Store

logger = logging.getLogger("gpuwarden.models")

#: how often a long-running scorer repeats the drift warning (``score.drift_warnings``)
DRIFT_WARNING_EVERY_S = 86_400.0
#: the fleet's HBM-core spread drift at the last scoring run, and when it last warned of it
_drift: dict[str, float | None] = {"spread_drift_c": None, "warned_at": None}
#: the fleet's error level at the last scoring run and the levels it warns above
#: (``score.error_level``, ``score.level_limit``)
_level: dict[str, dict[str, float]] = {"level": {}, "limit": {}}


@functools.lru_cache(maxsize=1)
def _model(path: str | None):  # -> RiskModel
    from gpuwarden.models.artifact import load_model

    return load_model(path)


def threshold() -> float:
    """The at-risk line of the model ``assess`` uses (its card's, or the default)."""
    return float(_model(os.environ.get("GPUWARDEN_MODEL") or None).threshold)


def spread_drift() -> float | None:
    """The fleet's HBM-core spread drift (``score.fleet_spread_drift``, C) at the last run of
    ``assess``; None before one, or without a week of HBM temperatures."""
    return _drift["spread_drift_c"]


def error_level() -> tuple[dict[str, float], dict[str, float]]:
    """The fleet's error level at the last run of ``assess`` and the levels the model warns
    above (``feature@quantile`` keys; empty before a run, or where the card has no record)."""
    return _level["level"], _level["limit"]


def _note_drift(drift: float | None, lines: list[str], at: float) -> None:
    """Keep the figure; log the warning at most once per ``DRIFT_WARNING_EVERY_S``."""
    _drift["spread_drift_c"] = drift
    last = _drift["warned_at"]
    if lines and (last is None or not 0 <= at - last < DRIFT_WARNING_EVERY_S):
        for line in lines:
            logger.warning(line)
        _drift["warned_at"] = at


def assess(store: Store, at: float) -> list[RiskAssessment]:
    """Risk for every GPU reporting at ``at``, from the model in ``$GPUWARDEN_MODEL`` (a folder
    written by ``gpuwarden train``) or the shipped one: typed records with the model's own
    state and its reasons with the features behind them."""
    from gpuwarden.models.score import assessments, drift_warnings, level_warnings, score_store

    model = _model(os.environ.get("GPUWARDEN_MODEL") or None)
    frame = score_store(store, model, at=at)
    _level["level"] = dict(frame.attrs.get("error_level") or {})
    _level["limit"] = dict(frame.attrs.get("error_level_limit") or {})
    warnings = drift_warnings(frame) + level_warnings(frame)
    _note_drift(frame.attrs.get("spread_drift_c"), warnings, at)
    return assessments(frame)
