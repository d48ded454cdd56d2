"""The records of the risk loop and the ``Notifier`` protocol.

    RiskAssessment   what a scorer says about one GPU at one time (the model, the hard-signal
                     assessor, or an Alertmanager alert turned into one)
    Transition       a GPU's state changed: old -> new, why, and who decided
    Notifier         something that tells people (Slack); ``notify`` queues, ``flush`` sends

States are ``gpuwarden.health.GpuState`` (re-exported here): ``ok``, ``at-risk`` (only
interruptible work) and ``unhealthy`` (nothing new; running work checkpoints and leaves).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gpuwarden.errors import InputError
from gpuwarden.health import GpuState, worst
from gpuwarden.telemetry import GpuId


@dataclass(frozen=True)
class RiskAssessment:
    """One scorer's verdict on one GPU at ``ts`` (Unix s).

    ``risk``: calibrated probability of failing within the model's horizon, NaN when unknown
    (never 0 for "no data"). ``hard_signal``: set when a double-bit error, row-remap failure,
    lost GPU or fatal Xid was seen ("Xid 79 (GPU has fallen off the bus)"); it makes the GPU
    unhealthy at once. ``hard_signal_ts``: when that signal happened, if known; a person's
    override is broken only by a signal newer than the override. ``action``: what to do, for
    people ("drain and reset the GPU").
    """

    gpu: GpuId
    ts: float
    risk: float = math.nan
    hard_signal: str | None = None
    reasons: tuple[str, ...] = ()
    action: str = ""
    hard_signal_ts: float | None = None

    @classmethod
    def coerce(cls, obj: Any) -> RiskAssessment:
        """Accept any object with the same attribute names (the model's own record)."""
        if isinstance(obj, cls):
            return obj
        try:
            risk = getattr(obj, "risk", math.nan)
            return cls(
                gpu=obj.gpu,
                ts=float(obj.ts),
                risk=math.nan if risk is None else float(risk),
                hard_signal=getattr(obj, "hard_signal", None) or None,
                reasons=tuple(str(r) for r in getattr(obj, "reasons", ()) or ()),
                action=str(getattr(obj, "action", "") or ""),
                hard_signal_ts=getattr(obj, "hard_signal_ts", None),
            )
        except (AttributeError, TypeError, ValueError) as exc:
            raise InputError(f"not a risk assessment: {obj!r} ({exc})") from exc


@dataclass(frozen=True)
class Transition:
    """A GPU's state changed at ``ts``.

    ``source``: what drove it, ``"model"`` (the scorer), ``"alertmanager"``, ``"hold"`` (the
    score stayed low for the hold time), ``"manual"`` (a person) or ``"replaced"`` (a new UUID
    in the slot). ``actor``: ``"gpuwarden"`` or the person's name for a manual decision.
    """

    ts: float
    gpu: GpuId
    old: GpuState
    new: GpuState
    risk: float
    reasons: tuple[str, ...]
    action: str
    source: str
    actor: str = "gpuwarden"


@dataclass(frozen=True)
class Notice:
    """Something people should hear about: a transition, or a safety stop.

    ``kind``: ``"transition"`` or ``"breaker"`` (the circuit breaker refused a mass re-tag).
    """

    kind: str
    ts: float
    text: str
    transition: Transition | None = None
    extra: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class Notifier(Protocol):
    """Tells people. ``notify`` only queues; ``flush`` sends what is due (grouped, rate-limited)
    and never raises for a delivery failure: it logs, retries later and returns what it sent."""

    name: str

    def notify(self, notice: Notice) -> None: ...

    def flush(self, now: float) -> int:
        """Send what is due; returns the number of messages delivered."""
        ...


__all__ = ["GpuState", "Notice", "Notifier", "RiskAssessment", "Transition", "worst"]
