"""Random: any feasible node, any GPU that fits (the paper's ``Random`` baseline)."""

from __future__ import annotations

import numpy as np

from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.policies.base import Choice, default_choice


class RandomPolicy:
    """Uniformly random node; a share goes to a random GPU with room for it."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def choose(self, cluster: ClusterState, job: Job, feasible: np.ndarray) -> Choice:
        nodes = np.flatnonzero(feasible)
        node = int(nodes[self.rng.integers(nodes.size)])
        if job.kind == "fractional":
            gpus = np.flatnonzero(cluster.gpu_candidates(job, node))
            return Choice(node, (int(gpus[self.rng.integers(gpus.size)]),))
        return default_choice(cluster, job, node)
