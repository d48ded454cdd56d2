"""Why a task does not fit: the one-line reasons a failed placement decision gives."""

from __future__ import annotations

import math

import numpy as np

from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.jobs import Job


def why_not(c: ClusterState, job: Job, room: float, placed_tasks: int) -> str:
    """One line naming the first constraint that leaves no node for a task of ``job``."""
    prefix = f"job {job.job_id}: "
    if placed_tasks:
        prefix += f"only {placed_tasks} of {job.tasks} tasks fit at once; "
    steps: list[tuple[str, np.ndarray]] = []
    if job.kind != "cpu":
        wanted = "|".join(sorted(job.gpu_models)) or "any"
        has_model = c.model_mask(job.gpu_models) & (c.n_gpus > 0)
        steps.append((f"no node has GPUs of model {wanted}", has_model))
    steps.append(("no node has the CPU free", c.cpu_free >= job.cpu_milli))
    steps.append(("no node has the memory free", c.mem_free >= job.memory_mib))
    if job.kind != "cpu":
        health = "ok or at-risk" if job.interruptible else "ok"
        steps.append(
            (
                f"no node has {job.gpus_per_task} fitting {health} GPU(s) free",
                c.gpu_candidates(job).sum(axis=1) >= job.gpus_per_task,
            )
        )
    if room != math.inf:
        steps.append(("the tenant's GPU-memory quota is used up", c.memory_charge(job) <= room))
    ok = np.ones(c.n_nodes, dtype=bool)
    for reason, mask in steps:
        ok &= mask
        if not ok.any():
            return prefix + reason
    return prefix + "no node has all it needs free at once"
