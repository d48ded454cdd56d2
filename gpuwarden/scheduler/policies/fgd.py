"""FGD: place where the expected GPU fragmentation grows least (Weng et al., ATC '23).

For each feasible node, and for a share each distinct GPU it could go to, the policy computes
the node's fragmentation under the task mix after placement (``_frag.Fragmentation``) and picks
the smallest increase. As the paper's scheduler plugin (``fgd_score.go``) does, the increase is
mapped to kube-scheduler's integer scale, ``int(100 * sigmoid(-increase / 1000))``, and equal
scores go to the first node of a fixed random order (its simulator's tie rule, see
``base.NodeOrder``); ``quantize=False`` ranks by the exact increase instead.
"""

from __future__ import annotations

import numpy as np

from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.policies._frag import Fragmentation, NodeStats
from gpuwarden.scheduler.policies.base import (
    Choice,
    NodeOrder,
    default_choice,
    mig_choice,
    pick_max,
    prefer_among,
)
from gpuwarden.scheduler.policies.mix import TaskMix


def candidates(cluster: ClusterState, job: Job, feasible: np.ndarray) -> tuple[np.ndarray, ...]:
    """(nodes, gpus) of every placement of one task on ``feasible`` nodes: each GPU a share
    fits on, or each node (gpu -1) for whole-GPU and CPU-only tasks."""
    if job.kind == "fractional":
        return np.nonzero(cluster.gpu_candidates(job) & feasible[:, None])
    nodes = np.flatnonzero(feasible)
    return nodes, np.full(nodes.size, -1)


def fgd_score(delta: np.ndarray) -> np.ndarray:
    """FGD's plugin score: ``int(100 * sigmoid(-delta / 1000))``, higher is better."""
    return np.floor(100.0 / (1.0 + np.exp(np.clip(delta / 1000.0, -50, 50))))


def to_choice(cluster: ClusterState, job: Job, node: int, gpu: int) -> Choice:
    if gpu >= 0:
        return Choice(node, (gpu,))
    return default_choice(cluster, job, node)


class FgdPolicy:
    """Fragmentation Gradient Descent. ``mix``: the workload's task mix (learnt from arrivals
    when None)."""

    name = "fgd"

    def __init__(
        self,
        mix: TaskMix | None = None,
        *,
        seed: int = 0,
        quantize: bool = True,
        ties: str = "order",
    ) -> None:
        self.mix = mix if mix is not None else TaskMix()
        self.learn = mix is None
        self.quantize = quantize
        self.rng = np.random.default_rng(seed)
        self.order = NodeOrder(self.rng, ties)
        self._frag: Fragmentation | None = None

    def choose(self, cluster: ClusterState, job: Job, feasible: np.ndarray) -> Choice:
        if self._frag is None or self._frag.cluster is not cluster:
            self._frag = Fragmentation(NodeStats(cluster, self.mix))
        if self.learn:
            self.mix.observe(job, count=1)
            self._frag.stats.sync_mix()
        rank = self.order.rank(cluster)
        if job.kind == "mig":
            return mig_choice(cluster, job, feasible, self.rng, rank)
        nodes, gpus = candidates(cluster, job, feasible)
        delta = self._frag.increase(job, nodes, gpus)
        score = fgd_score(delta) if self.quantize else -delta
        # equal scores: the first node in the fixed order, then its lowest GPU (GPUs with the
        # same free share score alike, so this is also the paper's first-GPU rule)
        cand_rank = None if rank is None else rank[nodes] * 64 + gpus
        allowed = np.ones(score.size, dtype=bool)
        if cluster.prefer is not None:  # among the best, nodes caching the job's model first
            top = prefer_among(cluster, nodes, np.flatnonzero(score == score.max()))
            allowed = np.zeros(score.size, dtype=bool)
            allowed[top] = True
        i = pick_max(score, allowed, self.rng, cand_rank)
        return to_choice(cluster, job, int(nodes[i]), int(gpus[i]))
