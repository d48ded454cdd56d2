"""What the scheduler places work on: nodes with CPU, memory and GPUs.

Units: CPU in milli-cores (``cpu_milli``, Kubernetes' ``1000m`` = one core), memory in MiB, GPU
shares in thousandths of a GPU (``gpu_milli``, as in Alibaba's openb trace and the
``alibabacloud.com/gpu-milli`` resource). A node's GPUs are of one model, as they are on every
real server; per-GPU state (health, sharing mode, MIG layout) may differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpuwarden.errors import InputError
from gpuwarden.health import GpuState
from gpuwarden.scheduler import mig

GPU_MILLI = 1000  # one whole GPU in thousandths


#: A GPU's scheduling health is the health vocabulary's state: ``at-risk`` GPUs take only
#: interruptible work, ``unhealthy`` ones nothing new.
Health = GpuState


class SharingMode(StrEnum):
    """How one GPU is shared.

    ``whole``: one task owns the GPU. ``fractional``: tasks take thousandths of it
    (time-slicing or MPS, like the openb trace's ``gpu_milli``); a fully free fractional GPU also
    takes a whole-GPU task. ``mig``: the GPU is partitioned into MIG instances and takes only
    MIG-profile requests (``nvidia-smi -mig 1``).
    """

    WHOLE = "whole"
    FRACTIONAL = "fractional"
    MIG = "mig"


#: Nominal framebuffer per GPU model, MiB (the product's GiB x 1024; ``nvidia-smi
#: --query-gpu=memory.total`` shows a little less). Models not listed (openb's undisclosed G2 and
#: G3) have unknown memory: never assumed to be zero, so a GPU-memory request or quota cannot be
#: proven to fit on them.
GPU_MEMORY_MIB: dict[str, int] = {
    "P100": 16 * 1024,
    "T4": 16 * 1024,
    "V100M16": 16 * 1024,
    "V100M32": 32 * 1024,
    "A10": 24 * 1024,
    "L4": 24 * 1024,
    "L40S": 48 * 1024,
    "A100-40GB": 40 * 1024,
    "A100-80GB": 80 * 1024,
    "H100-80GB": 80 * 1024,
    "H200": 141 * 1024,
}


@dataclass(frozen=True)
class GpuSpec:
    """One GPU slot on a node and its scheduling state; ``memory_mib`` None means unknown."""

    index: int
    health: Health = Health.OK
    mode: SharingMode = SharingMode.FRACTIONAL
    memory_mib: int | None = None


@dataclass(frozen=True)
class NodeSpec:
    """A node: ``name``, ``cpu_milli`` and ``memory_mib`` allocatable, and its GPUs.

    Build the usual uniform node with ``NodeSpec.uniform("n1", 64000, 262144, 8, "A100-80GB")``.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpu_model: str = ""
    gpus: tuple[GpuSpec, ...] = field(default_factory=tuple)
    #: what the node's agent reported from NVML (None: unknown, which meets no stated need):
    #: driver "550.54.15", the CUDA version it runs natively "12.4", and the CUDA version of
    #: an installed forward compatibility package (cuda-compat) "12.8"
    driver_version: str | None = None
    cuda_version: str | None = None
    cuda_compat: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise InputError("a node needs a name")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise InputError(f"node {self.name}: CPU and memory must be >= 0")
        if self.gpus and not self.gpu_model:
            raise InputError(f"node {self.name} has GPUs but no gpu_model")
        if [g.index for g in self.gpus] != list(range(len(self.gpus))):
            raise InputError(f"node {self.name}: GPU indices must be 0..{len(self.gpus) - 1}")
        for g in self.gpus:
            if g.mode is SharingMode.MIG and not mig.mig_capable(self.gpu_model):
                raise InputError(
                    f"node {self.name} GPU {g.index}: {self.gpu_model} does not support MIG"
                )

    @classmethod
    def uniform(
        cls,
        name: str,
        cpu_milli: int,
        memory_mib: int,
        gpus: int,
        gpu_model: str = "",
        *,
        mode: SharingMode = SharingMode.FRACTIONAL,
        gpu_memory_mib: int | None = None,
    ) -> NodeSpec:
        """A node whose ``gpus`` GPUs are alike; GPU memory from ``GPU_MEMORY_MIB`` if known."""
        model = mig.canonical_model(gpu_model) if gpu_model else ""
        mem = gpu_memory_mib if gpu_memory_mib is not None else GPU_MEMORY_MIB.get(model)
        specs = tuple(GpuSpec(i, mode=mode, memory_mib=mem) for i in range(gpus))
        return cls(name, cpu_milli, memory_mib, model, specs)
