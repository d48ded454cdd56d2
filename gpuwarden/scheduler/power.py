"""Power caps and clocks per job class, applied by the node agent and reverted at job end.

``planning.energy.advise`` turns a class's measured power and utilisation into a cap; a
``PowerPlan`` per class (``inference``: cap 70% of board power, core clock -20%) is what the
agent is told to apply. ``PowerGovernor.apply`` remembers each GPU's power limit and
application clocks before changing them, and ``revert`` puts them back when the task ends, so
a GPU leaves a job as it came. A refusal (not root, a GPU without the control, a value out of
range) is logged and the task runs uncapped: a cap saves energy, it must never stop work.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuwarden.collectors.libnvml import GpuControl
from gpuwarden.errors import GpuControlRefused, InputError

logger = logging.getLogger("gpuwarden.scheduler.power")

TaskKey = tuple[str, int, int]  # job id, attempt, task


@dataclass(frozen=True)
class PowerPlan:
    """``cap_share``: power limit as a share of the GPU's maximum limit (None: leave it).
    ``clock_cut``: application (core) clock this much below the highest supported (0: leave)."""

    cap_share: float | None = None
    clock_cut: float = 0.0

    def __post_init__(self) -> None:
        if self.cap_share is not None and not 0 < self.cap_share <= 1:
            raise InputError(f"power plan: cap_share must be in (0, 1], got {self.cap_share}")
        if not 0 <= self.clock_cut < 1:
            raise InputError(f"power plan: clock_cut must be in [0, 1), got {self.clock_cut}")


#: The guideline's advice as defaults: inference is memory-bound, so a 20% clock cut costs it ~5%
#: latency for ~30% power (``planning.energy.clock_cut_effect``); training keeps full clocks.
DEFAULT_PLANS: dict[str, PowerPlan] = {"inference": PowerPlan(cap_share=0.7, clock_cut=0.2)}


@dataclass
class _Saved:
    limit_w: float | None
    clocks: tuple[int, int] | None


class PowerGovernor:
    """Applies ``plans`` (job class -> ``PowerPlan``) to the GPUs of starting tasks through
    ``control`` and reverts them when the tasks end. A GPU shared by several tasks is changed
    by the first and restored after the last."""

    def __init__(self, control: GpuControl, plans: Mapping[str, PowerPlan] | None = None) -> None:
        self.control = control
        self.plans = dict(DEFAULT_PLANS if plans is None else plans)
        self._saved: dict[int, _Saved] = {}
        self._holders: dict[int, set[TaskKey]] = {}

    def apply(self, key: TaskKey, gpus: Iterable[int], job_class: str) -> list[str]:
        """Cap ``gpus`` for task ``key`` by its class's plan; returns what was refused."""
        plan = self.plans.get(job_class)
        if plan is None:
            return []
        refused = []
        for g in gpus:
            holders = self._holders.setdefault(g, set())
            holders.add(key)
            if g in self._saved:
                continue
            try:
                self._saved[g] = self._apply_one(g, plan)
            except GpuControlRefused as exc:
                refused.append(str(exc))
                logger.warning("power plan for %s not applied: %s", job_class, exc)
        return refused

    def _apply_one(self, g: int, plan: PowerPlan) -> _Saved:
        c, saved = self.control, _Saved(None, None)
        if plan.cap_share is not None:
            before = c.power_limit_w(g)
            low, high = c.power_limit_range_w(g)
            c.set_power_limit_w(g, max(low, min(high, plan.cap_share * high)))
            saved.limit_w = before
        if plan.clock_cut:
            mem, sm = c.app_clocks_mhz(g)
            choices = c.supported_graphics_mhz(g, mem)
            target = max(choices) * (1 - plan.clock_cut)
            pick = min(choices, key=lambda mhz: (abs(mhz - target), mhz))
            try:
                c.set_app_clocks_mhz(g, mem, pick)
            except GpuControlRefused:
                if saved.limit_w is not None:  # leave the GPU as it was found
                    c.set_power_limit_w(g, saved.limit_w)
                raise
            saved.clocks = (mem, sm)
        return saved

    def revert(self, key: TaskKey) -> list[str]:
        """Task ``key`` ended: restore the GPUs it was the last holder of."""
        refused = []
        for g, holders in list(self._holders.items()):
            if key not in holders:
                continue
            holders.discard(key)
            if holders:
                continue
            del self._holders[g]
            saved = self._saved.pop(g, None)
            if saved is None:
                continue
            try:
                if saved.clocks is not None:
                    self.control.reset_app_clocks(g)
                    if self.control.app_clocks_mhz(g) != saved.clocks:  # it had its own before
                        self.control.set_app_clocks_mhz(g, *saved.clocks)
                if saved.limit_w is not None:
                    self.control.set_power_limit_w(g, saved.limit_w)
            except GpuControlRefused as exc:
                refused.append(str(exc))
                logger.warning("could not restore GPU %d: %s", g, exc)
        return refused

    def settle(self, running: Iterable[TaskKey]) -> None:
        """Revert every task not in ``running`` (the agent calls it after each poll)."""
        live = set(running)
        for key in {k for hs in self._holders.values() for k in hs} - live:
            self.revert(key)

    def applied(self) -> dict[int, Any]:
        """GPU -> the tasks holding its changed settings (for status and tests)."""
        return {g: sorted(h) for g, h in self._holders.items() if g in self._saved}


__all__ = ["DEFAULT_PLANS", "PowerGovernor", "PowerPlan"]
