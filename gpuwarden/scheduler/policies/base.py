"""The placement-policy protocol: pick a node (and its GPUs) for one task.

The scheduler has already filtered the nodes (health, model, CPU, memory, GPU capacity, quota)
into a boolean mask; a policy only ranks them. Gangs call ``choose`` once per task on the state
that already holds the gang's earlier tasks, so a policy needs no notion of gangs. A policy may
keep per-node caches keyed by ``ClusterState.version``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.jobs import Job


@dataclass(frozen=True)
class Choice:
    """Where one task goes: a node index, its GPU slots, and a MIG start slice if MIG."""

    node: int
    gpus: tuple[int, ...]
    mig_start: int | None = None


@runtime_checkable
class PlacementPolicy(Protocol):
    name: str

    def choose(self, cluster: ClusterState, job: Job, feasible: np.ndarray) -> Choice:
        """Place one task of ``job`` on one of the ``feasible`` nodes (at least one is True)."""
        ...


def prefer_among(cluster: ClusterState, nodes: np.ndarray, top: np.ndarray) -> np.ndarray:
    """The placements of ``top`` (indices into ``nodes``) on nodes ``cluster.prefer`` marks
    (a job's model weights in the node's cache), or all of ``top`` when none is. Policies
    call it on placements they already rank equal, so a preference costs no fragmentation."""
    if cluster.prefer is None or top.size < 2:
        return top
    hit = cluster.prefer[nodes[top]]
    return top[hit] if hit.any() else top


def pick_max(
    scores: np.ndarray,
    feasible: np.ndarray,
    rng: np.random.Generator,
    rank: np.ndarray | None = None,
) -> int:
    """Index of the best feasible score. Ties go to the lowest ``rank`` when given (a fixed
    random order of the nodes, as the FGD paper's simulator breaks them), else uniformly at
    random (kube-scheduler's ``selectHost``)."""
    masked = np.where(feasible, scores, -np.inf)
    top = np.flatnonzero(masked == masked.max())
    if top.size == 1:
        return int(top[0])
    if rank is not None:
        return int(top[np.argmin(rank[top])])
    return int(top[rng.integers(top.size)])


class NodeOrder:
    """A fixed random order of the nodes, drawn once per cluster from ``rng``, to break ties.

    The FGD paper's simulator names nodes with a random prefix and its scheduler takes the
    first of equally scored nodes, so ties always go the same way within a run: repeated
    ties fill one node before the next, which packs. ``ties="random"`` draws anew instead.
    """

    def __init__(self, rng: np.random.Generator, ties: str = "order") -> None:
        if ties not in ("order", "random"):
            raise ValueError("ties must be 'order' or 'random'")
        self.rng, self.ties = rng, ties
        self._rank: np.ndarray | None = None

    def rank(self, cluster: ClusterState) -> np.ndarray | None:
        if self.ties == "random":
            return None
        if self._rank is None or self._rank.size != cluster.n_nodes:
            self._rank = self.rng.permutation(cluster.n_nodes)
        return self._rank

    def pick(self, cluster: ClusterState, scores: np.ndarray, feasible: np.ndarray) -> int:
        return pick_max(scores, feasible, self.rng, self.rank(cluster))


def default_choice(cluster: ClusterState, job: Job, node: int) -> Choice:
    gpus, start = cluster.default_gpus(job, node)
    return Choice(node, gpus, start)


def mig_choice(
    cluster: ClusterState,
    job: Job,
    feasible: np.ndarray,
    rng: np.random.Generator,
    rank: np.ndarray | None = None,
) -> Choice:
    """A MIG task goes where its best slot wastes the fewest compute slices, then to the GPU
    with the least room left (best fit keeps empty GPUs whole for 7g instances)."""
    assert job.mig_profile is not None
    fit = cluster.mig_fit(job.mig_profile)
    key = np.where(cluster.gpu_candidates(job), fit[..., 1] * 16 + cluster.mig_room(), 10**6)
    node = pick_max(-key.min(axis=1).astype(np.float64), feasible, rng, rank)
    return default_choice(cluster, job, node)
