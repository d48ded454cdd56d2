"""Warden, our placement policy: FGD's fragmentation first, then stranded capacity.

1. Like FGD, score every distinct placement by how much the node's expected fragmentation grows
   (``_frag.Fragmentation``, with host memory in the fit test as the scheduler filters on it),
   on kube-scheduler's integer 0..100 scale. The coarse scale is deliberate: increases within a
   few hundredths of a GPU count as equal, and on the openb traces the top score is shared by
   many nodes for most tasks (CPU-only tasks leave fragmentation unchanged almost everywhere).
2. Among those, keep the placements that strand the least capacity (``_frag.StrandedCapacity``,
   within ``tolerance_milli``): what repeated arrivals of the mix could still take, which sees
   CPU and memory that run out before the GPUs do and the slack a share leaves on a GPU. FGD
   only asks whether one more task of each type fits, so it cannot tell a node that will take
   five more 11-core tasks from one that will take one.
3. Then the first node of a fixed random order (first fit), then its lowest GPU.

On the four openb traces this beats FGD (ours and the published figures) on every trace; see
docs/scheduler.md. Cost: the second measure is computed only for the top-scored placements.
"""

from __future__ import annotations

import numpy as np

from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.policies._frag import Fragmentation, NodeStats, StrandedCapacity
from gpuwarden.scheduler.policies.base import Choice, NodeOrder, mig_choice, prefer_among
from gpuwarden.scheduler.policies.fgd import candidates, fgd_score, to_choice
from gpuwarden.scheduler.policies.mix import TaskMix


class WardenPolicy:
    """``mix``: the workload's task mix (learnt from arrivals when None). ``tolerance_milli``:
    stranded-capacity increases within this many thousandths of the best count as equal."""

    name = "warden"

    def __init__(
        self, mix: TaskMix | None = None, *, seed: int = 0, tolerance_milli: float = 100.0
    ) -> None:
        self.mix = mix if mix is not None else TaskMix()
        self.learn = mix is None
        self.tolerance_milli = tolerance_milli
        self.rng = np.random.default_rng(seed)
        self.order = NodeOrder(self.rng, "order")
        self._frag: Fragmentation | None = None
        self._stranded: StrandedCapacity | None = None

    def _measures(self, cluster: ClusterState) -> tuple[Fragmentation, StrandedCapacity]:
        if self._frag is None or self._stranded is None or self._frag.cluster is not cluster:
            stats = NodeStats(cluster, self.mix)
            self._frag = Fragmentation(stats, with_memory=True)
            self._stranded = StrandedCapacity(stats, with_memory=True)
        return self._frag, self._stranded

    def choose(self, cluster: ClusterState, job: Job, feasible: np.ndarray) -> Choice:
        frag, stranded = self._measures(cluster)
        if self.learn:
            self.mix.observe(job, count=1)
            frag.stats.sync_mix()
        rank = self.order.rank(cluster)
        assert rank is not None
        if job.kind == "mig":
            return mig_choice(cluster, job, feasible, self.rng, rank)
        nodes, gpus = candidates(cluster, job, feasible)
        score = fgd_score(frag.increase(job, nodes, gpus))
        top = np.flatnonzero(score == score.max())
        if top.size > 1:
            more = stranded.increase(job, nodes[top], gpus[top])
            top = top[more <= more.min() + self.tolerance_milli]
        top = prefer_among(cluster, nodes, top)
        best = top[np.argmin(rank[nodes[top]] * 64 + gpus[top])]
        return to_choice(cluster, job, int(nodes[best]), int(gpus[best]))

    def rank_nodes(
        self, cluster: ClusterState, job: Job, feasible: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every node's standing for one task of ``job``, for a scheduler that picks the node
        itself (a kube-scheduler extender): ``score`` per node, FGD's 0..100 of its best
        placement (-1 where not ``feasible``), and ``best``, the nodes ``choose`` would take
        before any other (top score and least stranded capacity), before its node-order tie
        break. Learns the mix from ``job`` as ``choose`` does."""
        frag, stranded = self._measures(cluster)
        if self.learn:
            self.mix.observe(job, count=1)
            frag.stats.sync_mix()
        score = np.full(cluster.n_nodes, -1.0)
        best = np.zeros(cluster.n_nodes, dtype=bool)
        if not feasible.any():
            return score, best
        if job.kind == "mig":
            assert job.mig_profile is not None
            fit = cluster.mig_fit(job.mig_profile)
            key = np.where(
                cluster.gpu_candidates(job), fit[..., 1] * 16 + cluster.mig_room(), 10**6
            )
            waste = np.where(feasible, key.min(axis=1), 10**6)
            score[feasible] = 50.0
            best = feasible & (waste == waste.min())
            return score, best
        nodes, gpus = candidates(cluster, job, feasible)
        cand = fgd_score(frag.increase(job, nodes, gpus))
        np.maximum.at(score, nodes, cand)
        top = np.flatnonzero(cand == cand.max())
        if top.size > 1:
            more = stranded.increase(job, nodes[top], gpus[top])
            top = top[more <= more.min() + self.tolerance_milli]
        best[nodes[top]] = True
        return score, best
