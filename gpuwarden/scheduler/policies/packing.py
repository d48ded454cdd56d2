"""GpuPacking: fill GPUs already in use, then nodes already in use, then empty nodes.

As in the FGD paper's simulator (``gpu_packing_score.go``), scores on kube-scheduler's 0..100
scale, ties broken at random:

- the task fits on partly used GPUs: ``100 - (their free share in %)/10``, at least 50;
- it needs idle GPUs of a node already in use: ``50 - idle GPUs it takes``, at least 33;
- the node is entirely idle: ``33 - its GPU count``.

CPU-only tasks score alike everywhere (a random feasible node).
"""

from __future__ import annotations

import numpy as np

from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.policies.base import (
    Choice,
    NodeOrder,
    default_choice,
    mig_choice,
)
from gpuwarden.scheduler.resources import GPU_MILLI


class GpuPackingPolicy:
    name = "gpupacking"

    def __init__(self, seed: int = 0, *, ties: str = "order") -> None:
        self.rng = np.random.default_rng(seed)
        self.order = NodeOrder(self.rng, ties)

    def choose(self, cluster: ClusterState, job: Job, feasible: np.ndarray) -> Choice:
        if job.kind == "mig":
            return mig_choice(cluster, job, feasible, self.rng, self.order.rank(cluster))
        if job.kind == "cpu":
            return Choice(self.order.pick(cluster, np.zeros(cluster.n_nodes), feasible), ())
        usable = cluster.usable(job.interruptible)
        idle = (cluster.free == GPU_MILLI) & usable
        n_idle = idle.sum(axis=1)
        all_idle = n_idle == cluster.n_gpus
        score = np.full(cluster.n_nodes, 0.0)
        score = np.where(all_idle, np.maximum(33 - cluster.n_gpus, cluster.n_gpus), score)
        if job.kind == "fractional":
            # fullest GPU that fits; a partly used one scores by its free share
            cand = cluster.gpu_candidates(job)
            fit_free = np.where(cand, cluster.free, GPU_MILLI + 1).min(axis=1)
            partly = fit_free < GPU_MILLI
            shared = np.maximum(100 - (fit_free * 100 // GPU_MILLI) // 10, 50)
            used_node = ~all_idle
            score = np.where(used_node & partly, shared, score)
            score = np.where(used_node & ~partly, np.maximum(50 - 1, 33), score)
        else:
            used_node = ~all_idle
            score = np.where(used_node, np.maximum(50 - job.gpus_per_task, 33), score)
        return default_choice(cluster, job, self.order.pick(cluster, score, feasible))
