"""The ``Tagger`` protocol: make a scheduler see a node's GPU health.

A tagger gets the whole desired picture of one node (``NodeHealth``: every known GPU's state)
rather than one GPU's change, because Kubernetes and Slurm tag nodes: a node is as sick as its
sickest GPU, and its at-risk GPU indices go into an annotation. Every tagger is idempotent
(applying the same ``NodeHealth`` twice changes nothing the second time, and says so with
``changed=False``) and has a dry-run mode that prints what it would do and touches nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gpuwarden.health import GpuState, worst


@dataclass(frozen=True)
class NodeHealth:
    """How one node should look: GPU index -> state, and why (for drain reasons, logs).
    ``uuids``: GPU index -> UUID where known (``GPU-...``, as ``nvidia-smi -L`` prints it), so a
    backend can name the very GPUs at risk, not only their indices."""

    hostname: str
    gpus: Mapping[int, GpuState] = field(default_factory=dict)
    reason: str = ""
    uuids: Mapping[int, str] = field(default_factory=dict)

    @property
    def state(self) -> GpuState:
        return worst(list(self.gpus.values()))

    def indices(self, state: GpuState) -> list[int]:
        """Sorted indices of the GPUs in ``state``."""
        return sorted(i for i, s in self.gpus.items() if s is state)


@dataclass(frozen=True)
class TagResult:
    """What a tagger did. ``changed``: the backend differed from ``NodeHealth`` and was (or, in
    dry-run, would have been) changed. ``blocked``: the circuit breaker refused."""

    changed: bool
    detail: str
    dry_run: bool = False
    blocked: bool = False

    def summary(self) -> str:
        """One line for the audit table's ``result`` column."""
        if self.blocked:
            return f"blocked: {self.detail}"
        if self.dry_run:
            return f"dry-run: {self.detail}"
        return f"{'ok' if self.changed else 'unchanged'}: {self.detail}"


@runtime_checkable
class Tagger(Protocol):
    """One scheduler backend (bundled scheduler, Kubernetes, Slurm)."""

    #: short backend name, shown in the audit table's ``hook`` column
    name: str

    @property
    def dry_run(self) -> bool:
        """True: print what would be done, change nothing."""
        ...

    def apply(self, node: NodeHealth) -> TagResult:
        """Make the backend show ``node``; raises ``HookError`` when the backend fails."""
        ...


Echo = Callable[[str], None]


def default_echo(line: str) -> None:
    """Dry-run output: one line on stdout per action a tagger would take."""
    print(line, flush=True)


__all__ = ["Echo", "NodeHealth", "TagResult", "Tagger", "default_echo"]
