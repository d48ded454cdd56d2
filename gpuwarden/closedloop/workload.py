"""The workload the arms run: long-lived inference services and checkpointing training jobs.

Inference replicas (non-interruptible, priority ``inference``) hold ``inference_share`` of the
GPUs for the whole run. Training jobs (interruptible, priority ``training``) arrive as a Poisson
stream whose offered load fills the cluster to about ``target_busy``; each needs ``work_s`` of
running time, checkpoints every ``checkpoint_s`` and loses what it did since the last checkpoint
when a GPU under it fails. Every arm gets the same workload (same seed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.scheduler import CheckpointHook, Job, NodeSpec, PriorityClass

#: training gang sizes (GPUs) and their weights: mostly one node or less, a few multi-node
TRAINING_GPUS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
TRAINING_WEIGHTS: tuple[float, ...] = (0.15, 0.15, 0.2, 0.3, 0.15, 0.05)
INFERENCE_GPUS: tuple[int, ...] = (1, 2, 4)
INFERENCE_WEIGHTS: tuple[float, ...] = (0.5, 0.3, 0.2)
_CHECKPOINT = CheckpointHook("signal", "SIGUSR1")


@dataclass(frozen=True)
class WorkloadSpec:
    """Sizes and timings. ``restart_s``: an interrupted inference replica serves again this long
    after it is placed (process start, model weights loaded, warm-up)."""

    inference_share: float = 0.35
    target_busy: float = 0.78
    training_median_h: float = 8.0
    training_sigma: float = 1.0
    training_max_h: float = 7 * 24.0
    checkpoint_s: float = 3600.0
    restart_s: float = 900.0

    def __post_init__(self) -> None:
        if not 0 <= self.inference_share < self.target_busy <= 1:
            raise InputError(
                "need 0 <= inference_share < target_busy <= 1, got "
                f"{self.inference_share} and {self.target_busy}"
            )
        if self.checkpoint_s <= 0 or self.restart_s < 0 or self.training_median_h <= 0:
            raise InputError("checkpoint interval and training length must be > 0, restart >= 0")


@dataclass(frozen=True)
class TrainingArrival:
    """A training job submitted at ``ts`` that needs ``work_s`` of running time."""

    ts: float
    job: Job
    work_s: float


@dataclass(frozen=True)
class Workload:
    """Services placed when the loop starts, and the training stream."""

    services: tuple[Job, ...]
    training: tuple[TrainingArrival, ...]
    spec: WorkloadSpec


def cluster_nodes(nodes: list[tuple[str, str, int]]) -> list[NodeSpec]:
    """The scheduler's nodes for the fleet's (hostname, GPU model, GPUs); CPU and memory are
    ample, so GPUs are the only constraint."""
    return [NodeSpec.uniform(h, 256_000, 2_097_152, n, m) for h, m, n in nodes]


def _gang(job_id: str, gpus: int, **kw: object) -> Job:
    per_task = min(gpus, 8)
    return Job(job_id, tasks=max(1, gpus // 8), gpus_per_task=per_task, **kw)  # type: ignore[arg-type]


def make_workload(
    n_gpus: int, start_ts: float, end_ts: float, *, seed: int, spec: WorkloadSpec | None = None
) -> Workload:
    """Services sized to ``inference_share`` of ``n_gpus``; training arrivals from ``start_ts``
    (a little before, so the cluster is already busy when the evaluated period begins)."""
    spec = spec or WorkloadSpec()
    rng = np.random.default_rng([seed, 0xC105ED])
    services: list[Job] = []
    held = 0
    while True:
        g = int(rng.choice(INFERENCE_GPUS, p=INFERENCE_WEIGHTS))
        if held + g > spec.inference_share * n_gpus:
            break
        services.append(
            _gang(f"svc-{len(services):04d}", g, priority=PriorityClass.INFERENCE, tenant="serving")
        )
        held += g
    w = np.asarray(TRAINING_WEIGHTS) / sum(TRAINING_WEIGHTS)
    sizes = np.asarray(TRAINING_GPUS)
    sigma, median_s = spec.training_sigma, spec.training_median_h * 3600.0
    # mean of a lognormal capped at max_h is close to median * exp(sigma^2 / 2) for these values
    mean_gpu_s = float((sizes * w).sum()) * median_s * float(np.exp(sigma**2 / 2))
    load_gpus = max(0.0, (spec.target_busy - held / n_gpus) * n_gpus)
    rate_per_s = load_gpus / mean_gpu_s
    arrivals: list[TrainingArrival] = []
    t = start_ts
    while rate_per_s > 0:
        t += float(rng.exponential(1.0 / rate_per_s))
        if t >= end_ts:
            break
        g = int(rng.choice(sizes, p=w))
        work = min(spec.training_max_h * 3600.0, median_s * float(np.exp(sigma * rng.normal())))
        job = _gang(
            f"train-{len(arrivals):05d}",
            min(g, n_gpus),
            priority=PriorityClass.TRAINING,
            tenant="research",
            interruptible=True,
            checkpoint=_CHECKPOINT,
        )
        arrivals.append(TrainingArrival(t, job, max(60.0, work)))
    return Workload(tuple(services), tuple(arrivals), spec)
