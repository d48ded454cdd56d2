"""BestFit: the node left with the least free CPU and GPU after placement.

As in the FGD paper's simulator (``best_fit_score.go``): the score is
``0.5 * cpu_left / max_cpu + 0.5 * gpu_left / max_gpu`` after placement, lower is better, on
kube-scheduler's integer 0..100 scale with ties broken at random; a share goes to the fullest
GPU it fits on.
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


class BestFitPolicy:
    name = "bestfit"

    def __init__(self, seed: int = 0, *, ties: str = "order") -> None:
        self.rng = np.random.default_rng(seed)
        self.order = NodeOrder(self.rng, ties)

    def choose(self, cluster: ClusterState, job: Job, feasible: np.ndarray) -> Choice:
        if job.kind == "mig":
            return mig_choice(cluster, job, feasible, self.rng, self.order.rank(cluster))
        max_cpu = max(1, int(cluster.cpu_cap.max()))
        max_gpu = max(1, int(cluster.n_gpus.max()) * 1000)
        cpu_left = (cluster.cpu_free - job.cpu_milli) / max_cpu
        gpu_left = (cluster.free_total - job.task_gpu_milli) / max_gpu
        score = np.floor((1.0 - (0.5 * cpu_left + 0.5 * gpu_left)) * 100)
        return default_choice(cluster, job, self.order.pick(cluster, score, feasible))
