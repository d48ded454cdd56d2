"""Jobs the scheduler places, and the records of its decisions.

A job is a gang of ``tasks`` identical tasks: all start together or none do. Each task asks for
CPU (milli-cores), memory (MiB) and either whole GPUs (``gpus_per_task``), a share of one GPU
(``gpu_milli`` < 1000, time-slicing or MPS, as ``sharing`` allows) or one MIG instance
(``mig_profile``). It may also state what its software needs of a node: ``min_cuda``,
``min_driver``, ``gpu_arch`` and ``ptx_jit`` (``compat.py`` has NVIDIA's rules).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal
from urllib.parse import urlsplit

from gpuwarden.errors import InputError
from gpuwarden.outbound import name_refusal
from gpuwarden.scheduler import compat, mig
from gpuwarden.scheduler.mig import MigInstance
from gpuwarden.scheduler.resources import GPU_MILLI


class PriorityClass(StrEnum):
    """Priority classes, highest first; a placement round serves them in this order."""

    INFERENCE = "inference"
    TRAINING = "training"
    BATCH = "batch"
    DEV = "dev"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {p: i for i, p in enumerate(PriorityClass)}

HookKind = Literal["signal", "command", "url"]


@dataclass(frozen=True)
class CheckpointHook:
    """How to ask a job to checkpoint before it is moved: a signal (``SIGUSR1``) sent to the
    task, a command run in its container, or a URL POSTed to (only where the agent's
    ``hook_allow`` setting allows, ``gpuwarden.outbound``; never a cloud metadata address).
    Carried as data in this phase; the node agent runs it and waits the job's
    ``grace_period_s``."""

    kind: HookKind
    target: str

    def __post_init__(self) -> None:
        if self.kind not in ("signal", "command", "url"):
            raise InputError(f"checkpoint hook kind must be signal, command or url: {self.kind!r}")
        if not self.target.strip():
            raise InputError(f"checkpoint {self.kind} hook needs a target")
        if self.kind == "signal" and not (self.target.startswith("SIG") or self.target.isdigit()):
            raise InputError(f"checkpoint signal must be a name like SIGUSR1: {self.target!r}")
        if self.kind == "url" and not self.target.startswith(("http://", "https://")):
            raise InputError(f"checkpoint URL must be http(s): {self.target!r}")

    def check_new(self) -> None:
        """The checks for a hook being submitted, beyond those every stored hook passed (a job
        queued before them still loads; the agent refuses its URL when it connects): a URL
        naming a cloud metadata address, which no ``hook_allow`` allows."""
        if self.kind == "url":
            host = urlsplit(self.target).hostname or ""
            if why := name_refusal(host):
                raise InputError(f"checkpoint URL {self.target!r}: {why}, never allowed")


JobKind = Literal["cpu", "whole", "fractional", "mig"]

#: How a share of a GPU may be shared: ``mps`` (CUDA MPS, the agent runs the GPU's daemon and
#: sets the task's SM and memory limits), ``time-slice`` (plain CUDA contexts taking turns), or
#: ``any``. A GPU runs MPS shares or time-sliced shares, never both at once.
SHARING = ("any", "mps", "time-slice")


@dataclass(frozen=True)
class Job:
    """One job (a gang of ``tasks`` identical tasks); per-task requests, per-GPU GPU memory.

    ``gpu_models``: allowed GPU models (openb's ``gpu_spec``), empty for any.
    ``gpu_memory_mib``: framebuffer each GPU (or MIG instance) must offer, None for no need.
    """

    job_id: str
    tenant: str = "default"
    priority: PriorityClass = PriorityClass.BATCH
    interruptible: bool = False
    tasks: int = 1
    gpus_per_task: int = 1
    gpu_milli: int = GPU_MILLI
    mig_profile: str | None = None
    gpu_models: frozenset[str] = field(default_factory=frozenset)
    gpu_memory_mib: int | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    checkpoint: CheckpointHook | None = None
    grace_period_s: float = 30.0
    sharing: str = "any"
    min_cuda: str | None = None
    min_driver: str | None = None
    gpu_arch: frozenset[str] = field(default_factory=frozenset)
    ptx_jit: bool = False

    def __post_init__(self) -> None:
        name = self.job_id or "<unnamed>"
        if not self.job_id:
            raise InputError("a job needs a job_id")
        if not self.tenant:
            raise InputError(f"job {name}: tenant must not be empty")
        try:
            object.__setattr__(self, "priority", PriorityClass(self.priority))
        except ValueError:
            choices = ", ".join(p.value for p in PriorityClass)
            raise InputError(f"job {name}: priority must be one of {choices}") from None
        models = self.gpu_models
        if isinstance(models, str):
            models = [m for m in models.split("|") if m]
        object.__setattr__(self, "gpu_models", frozenset(mig.canonical_model(m) for m in models))
        for attr in ("tasks", "gpus_per_task", "gpu_milli", "cpu_milli", "memory_mib"):
            value = getattr(self, attr)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InputError(f"job {name}: {attr} must be a whole number >= 0, got {value!r}")
        if self.tasks < 1:
            raise InputError(f"job {name}: tasks must be >= 1")
        if self.gpu_memory_mib is not None and self.gpu_memory_mib <= 0:
            raise InputError(f"job {name}: gpu_memory_mib must be > 0 when given")
        if self.grace_period_s < 0:
            raise InputError(f"job {name}: grace_period_s must be >= 0")
        if self.mig_profile is not None:
            if self.mig_profile not in mig.profile_names():
                raise InputError(f"job {name}: unknown MIG profile {self.mig_profile!r}")
            if self.gpus_per_task != 1 or self.gpu_milli != GPU_MILLI:
                raise InputError(f"job {name}: a MIG job asks for one instance per task")
        elif self.gpus_per_task and not 0 < self.gpu_milli <= GPU_MILLI:
            raise InputError(f"job {name}: gpu_milli must be in 1..1000, got {self.gpu_milli}")
        elif self.gpus_per_task > 1 and self.gpu_milli != GPU_MILLI:
            raise InputError(f"job {name}: only a one-GPU task may take a share of a GPU")
        if self.sharing not in SHARING:
            raise InputError(f"job {name}: sharing must be one of {', '.join(SHARING)}")
        arch = self.gpu_arch
        if isinstance(arch, str):
            arch = [a for a in arch.split("|") if a]
        object.__setattr__(self, "gpu_arch", frozenset(a.lower() for a in arch))
        unknown = self.gpu_arch - compat.ARCHITECTURES
        if unknown:
            known = ", ".join(sorted(compat.ARCHITECTURES))
            raise InputError(f"job {name}: unknown gpu_arch {sorted(unknown)} (known: {known})")
        try:
            compat.parse_version(self.min_cuda, "min_cuda")
            compat.parse_version(self.min_driver, "min_driver")
        except InputError as exc:
            raise InputError(f"job {name}: {exc}") from None

    @property
    def shape(self) -> tuple[object, ...]:
        """Everything about the job that placement reads: on one cluster state, two jobs of
        one shape fit alike (the id, checkpoint hook and grace period play no part)."""
        return (
            self.tenant,
            self.priority,
            self.interruptible,
            self.tasks,
            self.gpus_per_task,
            self.gpu_milli,
            self.mig_profile,
            self.gpu_models,
            self.gpu_memory_mib,
            self.cpu_milli,
            self.memory_mib,
            self.sharing,
            self.needs,
        )

    @property
    def needs(self) -> tuple[str | None, str | None, frozenset[str], bool]:
        """What the job's software needs of a node's driver and GPUs (``compat.why_not_runs``)."""
        return (self.min_cuda, self.min_driver, self.gpu_arch, self.ptx_jit)

    @property
    def kind(self) -> JobKind:
        if self.mig_profile is not None:
            return "mig"
        if self.gpus_per_task == 0:
            return "cpu"
        return "fractional" if self.gpu_milli < GPU_MILLI else "whole"

    @property
    def task_gpu_milli(self) -> int:
        """GPU thousandths one task takes; a MIG instance counts its compute slices out of 7."""
        if self.mig_profile is not None:
            return _mig_milli(self.mig_profile)
        return self.gpus_per_task * self.gpu_milli if self.gpus_per_task else 0

    @property
    def total_gpu_milli(self) -> int:
        return self.tasks * self.task_gpu_milli


def _mig_milli(name: str) -> int:
    compute = int(name.split("g.", 1)[0])
    return round(GPU_MILLI * compute / mig.COMPUTE_SLICES)


@dataclass(frozen=True)
class TaskPlacement:
    """Where one task runs: GPU indices on ``node`` and the share taken of each."""

    node: str
    gpus: tuple[int, ...]
    gpu_milli: int
    mig: MigInstance | None = None
    sharing: str | None = None  # a share's "mps" or "time-slice"; None for whole GPUs and MIG


@dataclass(frozen=True)
class Placement:
    """A placed job. ``borrowed``: it runs on quota beyond its tenant's guarantee, so it is the
    first to be reclaimed. ``gpu_memory_mib``: framebuffer charged to the tenant's quota."""

    job: Job
    tasks: tuple[TaskPlacement, ...]
    borrowed: bool = False
    gpu_memory_mib: float = 0.0

    @property
    def gpu_milli(self) -> int:
        return self.job.total_gpu_milli


@dataclass(frozen=True)
class Decision:
    """The outcome of one placement attempt; ``reason`` says why a job was not placed.
    ``evictions``: the jobs preempted to make room (already released and queued again)."""

    job_id: str
    placement: Placement | None = None
    reason: str = ""
    evictions: tuple[Eviction, ...] = ()

    @property
    def placed(self) -> bool:
        return self.placement is not None


@dataclass(frozen=True)
class Eviction:
    """A placed job that must leave a GPU whose health changed. The scheduler has already
    released it and queued it again; the node agent runs ``job.checkpoint`` and stops it within
    ``job.grace_period_s``."""

    job: Job
    node: str
    gpu: int
    reason: str


@dataclass(frozen=True)
class Runtime:
    """When a placed job started (this attempt) and last saved a checkpoint, unix seconds.
    Work after ``last_checkpoint_at`` is what a preemption loses."""

    started_at: float
    last_checkpoint_at: float
