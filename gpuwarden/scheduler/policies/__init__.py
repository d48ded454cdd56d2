"""Placement policies, one per module, all behind ``base.PlacementPolicy``.

random       any feasible node                          (baseline)
bestfit      least CPU and GPU left after placement     (baseline)
gpupacking   used GPUs, then used nodes, then empty     (baseline)
fgd          Fragmentation Gradient Descent, ATC '23    (baseline, the paper's method)
warden       ours: FGD's measure, exact, with host memory and a packing tie-break
"""

from __future__ import annotations

from collections.abc import Callable

from gpuwarden.errors import InputError
from gpuwarden.scheduler.policies.base import Choice, PlacementPolicy
from gpuwarden.scheduler.policies.bestfit import BestFitPolicy
from gpuwarden.scheduler.policies.fgd import FgdPolicy
from gpuwarden.scheduler.policies.mix import TaskMix
from gpuwarden.scheduler.policies.packing import GpuPackingPolicy
from gpuwarden.scheduler.policies.random_pick import RandomPolicy
from gpuwarden.scheduler.policies.warden import WardenPolicy

#: name -> factory(mix, seed)
POLICIES: dict[str, Callable[[TaskMix | None, int], PlacementPolicy]] = {
    "random": lambda mix, seed: RandomPolicy(seed),
    "bestfit": lambda mix, seed: BestFitPolicy(seed),
    "gpupacking": lambda mix, seed: GpuPackingPolicy(seed),
    "fgd": lambda mix, seed: FgdPolicy(mix, seed=seed),
    "warden": lambda mix, seed: WardenPolicy(mix, seed=seed),
}


def make_policy(name: str, *, mix: TaskMix | None = None, seed: int = 0) -> PlacementPolicy:
    """The policy called ``name``; ``mix`` is the workload's task mix for the fragmentation-
    aware ones (learnt from arrivals when None)."""
    try:
        factory = POLICIES[name.lower()]
    except KeyError:
        raise InputError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}") from None
    return factory(mix, seed)


__all__ = [
    "POLICIES",
    "BestFitPolicy",
    "Choice",
    "FgdPolicy",
    "GpuPackingPolicy",
    "PlacementPolicy",
    "RandomPolicy",
    "TaskMix",
    "WardenPolicy",
    "make_policy",
]
