"""Why a task does not fit: the one-line reasons a failed placement decision gives."""

from __future__ import annotations

import math

import numpy as np

from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.jobs import Job
from gpuwarden.wording import counted, figure


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
        if job.needs != NO_NEEDS:
            steps.append((_env_words(c, job, has_model), c.env_mask(job)))
        if job.gpu_memory_mib is not None and job.kind != "mig":
            steps.append(_memory_step(c, job, has_model))
    steps.append(("no node has the CPU free", c.cpu_free >= job.cpu_milli))
    steps.append(("no node has the memory free", c.mem_free >= job.memory_mib))
    if job.kind != "cpu":
        steps.append((_gpu_words(job), c.gpu_candidates(job).sum(axis=1) >= job.gpus_per_task))
    if room != math.inf:
        steps.append(("the tenant's GPU-memory quota is used up", c.memory_charge(job) <= room))
    ok = np.ones(c.n_nodes, dtype=bool)
    for reason, mask in steps:
        ok &= mask
        if not ok.any():
            return prefix + reason
    return prefix + "no node has all it needs free at once"


def why_too_few(
    c: ClusterState, job: Job, room: float, counts: tuple[np.ndarray, ...], fit: int
) -> str:
    """Why only ``fit`` (at least one, fewer than all) of a gang's tasks fit at once, from the
    per-node counts of ``ClusterState.fit_counts`` (CPU, memory, GPUs), without placing any:
    the first constraint, in ``why_not``'s order, under which the nodes together take fewer
    than all the tasks. What ``why_not`` would say once the first ``fit`` tasks were placed."""
    prefix = f"job {job.job_id}: only {fit} of {job.tasks} tasks fit at once; "
    cpu, mem, gpu = counts
    steps = [("no node has the CPU free", cpu), ("no node has the memory free", mem)]
    usable = np.ones(c.n_nodes, dtype=bool)
    if job.kind != "cpu":
        steps.append((_gpu_words(job), gpu))
        usable = c.model_mask(job.gpu_models) & (c.n_gpus > 0) & c.env_mask(job)
    left = np.where(usable, job.tasks, 0)
    for reason, count in steps:
        left = np.minimum(left, count)
        if left.sum() < job.tasks:
            return prefix + reason
    if room != math.inf:
        return prefix + "the tenant's GPU-memory quota is used up"
    return prefix + "no node has all it needs free at once"


NO_NEEDS: tuple[object, ...] = (None, None, frozenset(), False)


def _gpu_words(job: Job) -> str:
    health = "ok or at-risk" if job.interruptible else "ok"
    words = f"no node has {counted(job.gpus_per_task, f'fitting {health} GPU')} free"
    if job.kind == "fractional" and job.sharing != "any":
        other = "time-sliced" if job.sharing == "mps" else "MPS"
        words += f" for {job.sharing} sharing (GPUs running {other} shares excluded)"
    return words


def _memory_step(c: ClusterState, job: Job, candidates: np.ndarray) -> tuple[str, np.ndarray]:
    """The nodes with a GPU as large as the job asks for, and the words when none is."""
    cap = np.nan_to_num(np.asarray(c.gpu_mem_cap, dtype=np.float64)).max(axis=1)
    largest = cap[candidates].max() if candidates.any() else 0.0
    need = float(job.gpu_memory_mib or 0)
    words = (
        f"no node has a GPU with {figure(need / 1024)} GiB of memory "
        f"(the largest has {figure(largest / 1024)} GiB)"
    )
    return words, cap >= need


def _env_words(c: ClusterState, job: Job, candidates: np.ndarray) -> str:
    """Why no node can run the job's software, with one node's reason as the example."""
    for i in np.flatnonzero(candidates):
        reason = c.env_reason(job, int(i))
        if reason is not None:
            return f"no node can run its CUDA/driver needs (e.g. {c.names[int(i)]}: {reason})"
    return "no node can run its CUDA/driver needs"
