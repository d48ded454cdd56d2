"""The workload's task types and how often each arrives: what fragmentation is measured against.

FGD (Weng et al., ATC '23) calls a node's free GPU capacity a fragment for a task type when that
type cannot use it, and weighs each type by its popularity. Following the paper's simulator, the
types are the most common request shapes (CPU, GPU share, GPU count, allowed models) that
together cover 95% of the tasks, renormalised; CPU-only types count too. A mix is given up front
(the trace, as in the paper) or learnt from arrivals with ``observe``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.scheduler.jobs import Job

TypeKey = tuple[int, int, int, frozenset[str]]  # cpu_milli, gpu_milli per GPU, gpus, models


@dataclass(frozen=True)
class TaskType:
    cpu_milli: int
    gpu_milli: int  # per GPU; 0 for a CPU-only type
    gpus: int
    models: frozenset[str]
    memory_mib: float  # mean over the tasks of this type
    weight: float  # popularity, the weights of a mix sum to 1


def _key(job: Job) -> TypeKey | None:
    if job.kind == "mig":
        return None  # MIG requests fragment MIG GPUs only, see cluster.default_gpus
    milli = job.gpu_milli if job.gpus_per_task else 0
    return (job.cpu_milli, milli, job.gpus_per_task, job.gpu_models)


class TaskMix:
    """Counts of task shapes; ``types()`` gives the popular ones with their weights."""

    def __init__(self, coverage: float = 0.95) -> None:
        if not 0 < coverage <= 1:
            raise InputError(f"coverage must be in (0, 1], got {coverage}")
        self.coverage = coverage
        self._count: dict[TypeKey, float] = {}
        self._mem: dict[TypeKey, float] = {}
        self.observed = 0

    @classmethod
    def from_jobs(cls, jobs: Iterable[Job], coverage: float = 0.95) -> TaskMix:
        mix = cls(coverage)
        for job in jobs:
            mix.observe(job)
        return mix

    def observe(self, job: Job, count: int | None = None) -> None:
        """Count one arrival of ``job`` (each of its tasks, or ``count`` of them)."""
        key = _key(job)
        if key is None:
            return
        n = float(job.tasks if count is None else count)
        self._count[key] = self._count.get(key, 0.0) + n
        self._mem[key] = self._mem.get(key, 0.0) + n * job.memory_mib
        self.observed += 1

    def types(self) -> list[TaskType]:
        """The most popular types covering ``coverage`` of the tasks, weights summing to 1."""
        total = sum(self._count.values())
        if total <= 0:
            return []
        ranked = sorted(self._count.items(), key=lambda kv: (-kv[1], _order(kv[0])))
        chosen: list[tuple[TypeKey, float]] = []
        covered = 0.0
        for key, n in ranked:
            if covered >= self.coverage * total:
                break
            chosen.append((key, n))
            covered += n
        return [TaskType(k[0], k[1], k[2], k[3], self._mem[k] / n, n / covered) for k, n in chosen]


def _order(key: TypeKey) -> tuple[int, int, int, tuple[str, ...]]:
    return (key[0], key[1], key[2], tuple(sorted(key[3])))


@dataclass(frozen=True)
class MixArrays:
    """A mix as arrays for the vectorised fragmentation measure (T types, K share levels)."""

    cpu: np.ndarray  # [T] milli-cores
    mem: np.ndarray  # [T] MiB
    gpus: np.ndarray  # [T]
    level: np.ndarray  # [T] index into thresholds; -1 for CPU-only types
    weight: np.ndarray  # [T]
    thresholds: np.ndarray  # [K] distinct per-GPU shares (thousandths) the types ask for
    models: tuple[frozenset[str], ...]

    @classmethod
    def build(cls, types: list[TaskType]) -> MixArrays:
        thresholds = np.array(sorted({t.gpu_milli for t in types if t.gpus}), dtype=np.int64)
        pos = {int(v): i for i, v in enumerate(thresholds)}
        return cls(
            cpu=np.array([t.cpu_milli for t in types], dtype=np.int64),
            mem=np.array([t.memory_mib for t in types], dtype=np.float64),
            gpus=np.array([t.gpus for t in types], dtype=np.int64),
            level=np.array([pos[t.gpu_milli] if t.gpus else -1 for t in types], dtype=np.int64),
            weight=np.array([t.weight for t in types], dtype=np.float64),
            thresholds=thresholds,
            models=tuple(t.models for t in types),
        )
