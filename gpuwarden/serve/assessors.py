"""Where ``gpuwarden serve`` gets its risk scores: the pluggable ``assess(store, at)``.

The default combines the trained model (``gpuwarden.models.assess(store, at)``, which returns
``health.RiskAssessment`` records) with the hard-signal assessor
(double-bit errors, remap failures, lost GPUs, fatal Xids), so hard signals act even without a
model and whatever the model does with them. ``--assess module:function`` picks another scorer
in place of the model; ``gpuwarden serve`` still combines it with the hard signals.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Iterable
from typing import Any

from gpuwarden.alerts.base import RiskAssessment
from gpuwarden.alerts.hard_signals import HardSignalAssessor
from gpuwarden.errors import ConfigError, GpuwardenError
from gpuwarden.health import DEFAULT_AT_RISK, worst, xids_said
from gpuwarden.plugins import load_object
from gpuwarden.store.base import Store

logger = logging.getLogger("gpuwarden.serve")

Assessor = Callable[[Store, float], Iterable[Any]]


def model_assessor() -> Assessor:
    """The trained model: ``gpuwarden.models.assess``, which returns ``RiskAssessment``."""
    from gpuwarden.models import assess

    return assess  # type: ignore[no-any-return]


def model_threshold() -> float:
    """The at-risk line of the model ``serve`` scores with: its card's threshold, or the
    default when the model cannot be loaded (serve then acts on hard signals alone)."""
    from gpuwarden.models import threshold

    try:
        return float(threshold())
    except GpuwardenError as exc:
        logger.info("no model card to read the at-risk threshold from (%s)", exc)
        return DEFAULT_AT_RISK


def decision_lines(
    enter_at: float | None = None, exit_below: float | None = None
) -> tuple[float, float]:
    """``serve``'s hysteresis lines: at-risk from ``enter_at`` (default: the model's line,
    ``model_threshold``), ok again under ``exit_below`` (default: 0.5, at most the line)."""
    enter = model_threshold() if enter_at is None else enter_at
    return enter, (min(0.5, enter) if exit_below is None else exit_below)


def model_spread_drift() -> float | None:
    """The fleet's HBM-core spread drift the model saw at its last scoring run (C), or None
    when serve does not score with the model (nothing is imported for it)."""
    scorer = sys.modules.get("gpuwarden.models._assess")
    return None if scorer is None else scorer.spread_drift()  # type: ignore[no-any-return]


def model_error_level() -> tuple[dict[str, float], dict[str, float]]:
    """The fleet's error level the model saw at its last scoring run, and the levels it warns
    above (``feature@quantile`` keys); empty when serve does not score with the model."""
    scorer = sys.modules.get("gpuwarden.models._assess")
    return ({}, {}) if scorer is None else scorer.error_level()  # type: ignore[no-any-return]


def combine(*assessors: Assessor) -> Assessor:
    """One assessor from several: per GPU the highest known risk, the first hard signal, and
    every reason (in order, without repeats)."""

    def assess(store: Store, at: float) -> list[RiskAssessment]:
        merged: dict[str, RiskAssessment] = {}
        for one in assessors:
            for raw in one(store, at):
                a = RiskAssessment.coerce(raw)
                prev = merged.get(a.gpu.uuid)
                merged[a.gpu.uuid] = a if prev is None else _merge(prev, a)
        return list(merged.values())

    return assess


def _merge(a: RiskAssessment, b: RiskAssessment) -> RiskAssessment:
    risks = [r for r in (a.risk, b.risk) if not math.isnan(r)]
    hard = a if a.hard_signal else b
    return RiskAssessment(
        gpu=a.gpu if len(a.gpu.model) >= len(b.gpu.model) else b.gpu,
        ts=max(a.ts, b.ts),
        risk=max(risks) if risks else math.nan,
        hard_signal=hard.hard_signal,
        reasons=_reasons(a.reasons, b.reasons),
        action=hard.action if hard.hard_signal else (a.action or b.action),
        hard_signal_ts=hard.hard_signal_ts,
        rule=", ".join(dict.fromkeys(r for r in (a.rule, b.rule) if r)) or None,
        state=worst([s for s in (a.state, b.state) if s is not None])
        if a.state or b.state
        else None,
    )


def _reasons(first: tuple[str, ...], then: tuple[str, ...]) -> tuple[str, ...]:
    """``first``'s reasons, then those of ``then`` that name an Xid ``first`` has not: the
    model's "1 double-bit ECC error in 24 h (Xid 48, ...): drain the GPU ..." already says what
    the hard-signal assessor's "Xid 48 (Double-bit ECC error)" would say again. A reason that
    names no Xid is kept, and a repeat of the same words is said once."""
    said = set().union(*map(xids_said, first))
    kept = []
    for r in then:
        codes = xids_said(r)
        if codes and codes <= said:
            continue
        kept.append(r)
        said |= codes
    return tuple(dict.fromkeys((*first, *kept)))


def default_assessor(lookback_s: float = 900.0) -> Assessor:
    """The model (if there is one) combined with the hard-signal assessor."""
    return combine(model_assessor(), HardSignalAssessor(lookback_s=lookback_s))


def load_assessor(spec: str) -> Assessor:
    """``"package.module:function"`` -> that callable (``--assess``)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--assess must look like package.module:function, not {spec!r}")
    try:
        obj: Any = load_object(spec)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load assessor {spec!r}: {exc}") from exc
    if not callable(obj):
        raise ConfigError(f"assessor {spec!r} is not callable")
    return obj  # type: ignore[no-any-return]


__all__ = ["Assessor", "combine", "default_assessor", "load_assessor", "model_assessor"]
