"""The records of the risk loop and the ``Notifier`` protocol.

    RiskAssessment   what a scorer says about one GPU at one time (the model, the hard-signal
                     assessor, or an Alertmanager alert turned into one)
    Transition       a GPU's state changed: old -> new, why, and who decided
    Notifier         something that tells people (Slack); ``notify`` queues, ``flush`` sends

States are ``gpuwarden.health.GpuState`` (re-exported here): ``ok``, ``at-risk`` (only
interruptible work) and ``unhealthy`` (nothing new; running work checkpoints and leaves).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gpuwarden.health import GpuState, RiskAssessment, worst
from gpuwarden.telemetry import GpuId


@dataclass(frozen=True)
class Transition:
    """A GPU's state changed at ``ts``.

    ``source``: what drove it, ``"model"`` (the scorer), ``"alertmanager"``, ``"hold"`` (the
    score stayed low for the hold time), ``"manual"`` (a person), ``"replaced"`` (a new UUID
    in the slot) or ``"moved"`` (a GPU renumbered at a boot took its state to its new index).
    ``actor``: ``"gpuwarden"`` or the person's name for a manual decision.
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
