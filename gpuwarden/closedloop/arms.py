"""The arms, each driving the bundled scheduler through the real decision path.

    none    no prediction: a GPU is taken out only when it fails
    hard    hard signals only: what ``gpuwarden serve`` does with no model (a double-bit
            error, remap failure, lost GPU or fatal Xid makes a GPU unhealthy at once)
    rules   the rule baseline (``models.rules``): a rule firing counts as risk 1, else 0
    model   the risk model's calibrated risk, and the link rules beside it (a rule that holds
            marks the GPU at-risk, as in ``gpuwarden serve``)

Every arm feeds ``RiskAssessment`` records into a ``DecisionEngine`` (hysteresis: at-risk at
``enter_at``, ok again after ``hold_s`` below ``exit_below``; unhealthy at once on a hard
signal), and the engine's per-node states reach the scheduler through
``CircuitBreaker(BundledTagger(SchedulerTarget(scheduler)))``, as ``gpuwarden serve`` does.
A failed GPU is unhealthy whatever the engine says (the node agent sees it gone).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuwarden.alerts.base import RiskAssessment, Transition
from gpuwarden.alerts.decision import DecisionEngine
from gpuwarden.health import DEFAULT_AT_RISK, GpuState
from gpuwarden.scheduler import Eviction, Scheduler
from gpuwarden.scheduler_hooks import CircuitBreaker
from gpuwarden.scheduler_hooks.base import NodeHealth
from gpuwarden.scheduler_hooks.bundled import BundledTagger, SchedulerTarget
from gpuwarden.telemetry import GpuId

ARMS: tuple[str, ...] = ("none", "hard", "rules", "model")
ARM_TITLES = {
    "none": "no prediction",
    "hard": "hard signals only",
    "rules": "rule baseline",
    "model": "gpuwarden model",
}


@dataclass(frozen=True)
class HealthChange:
    """The tagger changed one GPU's health in the scheduler; ``evictions``: work it moved."""

    hostname: str
    index: int
    health: str
    evictions: tuple[Eviction, ...]


class RecordingTarget(SchedulerTarget):
    """``SchedulerTarget`` that also keeps the evictions as records, for the loop to count."""

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(scheduler)
        self.changes: list[HealthChange] = []

    def set_gpu_health(self, hostname: str, index: int, health: str, reason: str) -> list[str]:
        evictions = self.scheduler.set_health(hostname, index, health)
        self.changes.append(HealthChange(hostname, index, health, tuple(evictions)))
        return [f"job {e.job.job_id} told to checkpoint and leave ({e.reason})" for e in evictions]

    def drain(self) -> list[HealthChange]:
        out, self.changes = self.changes, []
        return out


class ArmDriver:
    """One arm's decision path. ``risk_of(risk, rule)`` turns a row's model risk and rule flag
    into the risk the engine sees (NaN: the arm says nothing about that row)."""

    def __init__(
        self,
        name: str,
        scheduler: Scheduler,
        slots: list[tuple[str, int]],
        *,
        life_index: dict[str, int],
        clock: Callable[[], float],
        enter_at: float = DEFAULT_AT_RISK,
        breaker_share: float = 0.1,
    ) -> None:
        self.name = name
        self.engine = DecisionEngine(enter_at=enter_at, exit_below=min(0.5, enter_at))
        self.target = RecordingTarget(scheduler)
        nodes = len({h for h, _ in slots})
        self.tagger = CircuitBreaker(
            BundledTagger(self.target),
            fleet_nodes=lambda: nodes,
            max_share=breaker_share,
            clock=clock,
        )
        self.slots = slots
        self.enter_at = enter_at
        self._node_slots: dict[str, list[int]] = {}
        for s, (h, _) in enumerate(slots):
            self._node_slots.setdefault(h, []).append(s)
        self.failed = np.zeros(len(slots), dtype=bool)  # physically out (failed, in repair)
        self._slot_node = np.array([scheduler.node_index(h) for h, _ in slots], dtype=np.int64)
        self._slot_gpu = np.array([i for _, i in slots], dtype=np.int64)
        self._life_index = life_index  # engine identity (the panel's life key) -> column
        self._flagged = np.zeros(len(life_index), dtype=bool)  # lives not ok now
        self._dirty: set[str] = set()
        self.refusals = 0

    def risk_of(self, risk: np.ndarray, rule: np.ndarray) -> np.ndarray:
        if self.name == "model":
            return risk.astype(np.float64)
        if self.name == "rules":
            return np.where(rule, 1.0, 0.0)
        return np.full(risk.shape, np.nan)

    def rule_of(self, link: np.ndarray) -> np.ndarray:
        """The link rules that hold, as the engine sees them: the model arm's only."""
        return link if self.name == "model" else np.full(link.shape, "", dtype=object)

    def candidates(
        self, lives: np.ndarray, risk: np.ndarray, hard: np.ndarray, rule: np.ndarray
    ) -> np.ndarray:
        """Rows the engine must see: a high score, a hard signal, a link rule, or a GPU not ok
        now. An ok GPU with a low score stays ok whatever the engine is told: skipped."""
        mask = hard.copy() if self.name != "none" else np.zeros(hard.shape, dtype=bool)
        mask |= risk >= self.enter_at
        mask |= rule != ""
        mask |= self._flagged[lives]
        return np.flatnonzero(mask)

    def assess(
        self, gpu: GpuId, ts: float, risk: float, hard: str | None, rule: str | None = None
    ) -> None:
        a = RiskAssessment(gpu, ts, risk=risk, hard_signal=hard, rule=rule or None)
        self._note(self.engine.assess(a))

    def tick(self, ts: float) -> None:
        self._note(self.engine.tick(ts))

    def fail(self, slot: int, gpu: GpuId, ts: float, kind: str) -> list[Eviction]:
        """The GPU in ``slot`` failed: out of the scheduler at once; its hard signal reaches
        the engine too. Returns the work that was on it (interrupted, not moved)."""
        self.failed[slot] = True
        host, index = self.slots[slot]
        evicted = self.target.scheduler.set_health(host, index, GpuState.UNHEALTHY)
        self.assess(gpu, ts, math.nan, f"GPU failed ({kind})")
        return evicted

    def repair(self, slot: int, ts: float) -> None:
        """A new board fills ``slot``: a new identity, so the engine starts it ok."""
        self.failed[slot] = False
        host, index = self.slots[slot]
        self.assess(GpuId(host, index, f"{host}/{index}@{ts:.0f}"), ts, math.nan, None)
        self._dirty.add(host)

    def apply(self) -> list[HealthChange]:
        """Push the wanted health of every node that changed; a node the breaker refused stays
        pending and is tried again next time."""
        for host in sorted(self._dirty):
            states = self.engine.node_states(host)
            want = {
                self.slots[s][1]: GpuState.UNHEALTHY
                if self.failed[s]
                else states.get(self.slots[s][1], GpuState.OK)
                for s in self._node_slots[host]
            }
            result = self.tagger.apply(NodeHealth(host, want, reason=f"closed loop ({self.name})"))
            if result.blocked:
                self.refusals += 1
            else:
                self._dirty.discard(host)
        return self.target.drain()

    def withheld(self) -> int:
        """GPUs the scheduler keeps from critical work because of a flag, not a failure."""
        health = self.target.scheduler.cluster.health[self._slot_node, self._slot_gpu]
        return int(((health != 0) & ~self.failed).sum())

    def _note(self, transitions: list[Transition]) -> None:
        for tr in transitions:
            self._dirty.add(tr.gpu.hostname)
            life = self._life_index.get(tr.gpu.uuid)
            if life is not None:
                self._flagged[life] = tr.new is not GpuState.OK
