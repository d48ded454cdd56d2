"""How the node agent gives a task its GPU share: a MIG instance, an MPS client slot, or plain
GPUs (whole, or time-sliced with whoever else the scheduler placed there).

    start order            what the task gets
    mig=PROFILE            a GPU and compute instance at ``mig_start`` (``mig_agent``);
                           CUDA_VISIBLE_DEVICES=MIG-<uuid>
    sharing="mps"          the GPU's MPS control daemon, started if need be (``mps``);
                           CUDA_VISIBLE_DEVICES=<gpu> plus the MPS directories and limits
    anything else          CUDA_VISIBLE_DEVICES=<gpu>,<gpu>... (whole GPUs, time-slicing)

``release`` undoes it when the task has ended: the MIG instance is destroyed, and a GPU's MPS
daemon is stopped once no running task uses it. ``reconcile`` does the same for what an agent
that died left behind.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpuwarden.errors import DeviceSetupError
from gpuwarden.scheduler.mig_agent import MigManager
from gpuwarden.scheduler.mps import MPS_CONTROL, MpsControl, client_env
from gpuwarden.scheduler.resources import GPU_MILLI
from gpuwarden.wording import counted

logger = logging.getLogger("gpuwarden.scheduler.agent")

MPS, MIG, PLAIN = "mps", "mig", ""


def share_kind(order: Mapping[str, Any]) -> str:
    """``mig``, ``mps`` or "" (whole GPUs or time-slicing) for a start order."""
    if order.get("mig"):
        return MIG
    return MPS if order.get("sharing") == MPS else PLAIN


def nvml_for_mig() -> Any:
    """pynvml, for the agent's MIG calls (loaded lazily: NVML starts on the first MIG order)."""
    from gpuwarden.collectors import libnvml

    return libnvml.real_module()


class GpuSharing:
    """The node's MIG instances and MPS daemons. ``nvml``: pynvml (or the fake) for MIG, None
    where the node has no NVML (``--fake-gpus``: MIG orders then fail their task, clearly);
    ``gpu_memory_mib``: framebuffer per GPU index, for MPS memory limits."""

    def __init__(
        self,
        workdir: Path,
        *,
        nvml: Any = None,
        gpu_model: str = "",
        gpu_memory_mib: Mapping[int, int | None] | None = None,
        mps_control: str = MPS_CONTROL,
    ) -> None:
        self.mig = MigManager(nvml, gpu_model, workdir / "mig-instances.json") if nvml else None
        self.mps = MpsControl(workdir / "mps", mps_control)
        self.gpu_memory_mib = dict(gpu_memory_mib or {})

    def prepare(self, key: str, order: Mapping[str, Any]) -> dict[str, str]:
        """The environment that gives task ``key`` its share; ``DeviceSetupError`` saying why
        it cannot be had."""
        gpus = [int(g) for g in order.get("gpus", ())]
        kind = share_kind(order)
        if kind == MIG:
            if self.mig is None:
                raise DeviceSetupError(
                    "this agent has no NVML (--fake-gpus), so it cannot create MIG instances"
                )
            if order.get("mig_start") is None or len(gpus) != 1:
                raise DeviceSetupError("a MIG order needs one GPU and a mig_start slice")
            device = self.mig.create(key, gpus[0], str(order["mig"]), int(order["mig_start"]))
            return {"CUDA_VISIBLE_DEVICES": device.uuid}
        if kind == MPS:
            if len(gpus) != 1:
                raise DeviceSetupError(f"an MPS share is on one GPU, the order names {gpus}")
            (gpu,) = gpus
            self.mps.start(gpu)
            milli = int(order.get("gpu_milli") or GPU_MILLI)
            memory = order.get("gpu_memory_mib")
            if memory is None and self.gpu_memory_mib.get(gpu):
                memory = self.gpu_memory_mib[gpu] * milli / GPU_MILLI  # type: ignore[operator]
            return {"CUDA_VISIBLE_DEVICES": str(gpu), **self.mps.env(gpu),
                    **client_env(milli, memory)}  # fmt: skip
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus)}

    def release(self, key: str, kind: str, gpus: list[int], running_mps: Iterable[int]) -> None:
        """Undo ``prepare`` for ended task ``key``; ``running_mps``: GPUs of the MPS tasks still
        running. ``DeviceSetupError`` when NVML refuses (processes linger): call again later."""
        if kind == MIG and self.mig is not None:
            self.mig.destroy(key)
        elif kind == MPS:
            still = set(running_mps)
            for gpu in gpus:
                if gpu not in still:
                    self.mps.stop(gpu)

    def reconcile(self, live: set[str], running_mps: Iterable[int], n_gpus: int) -> None:
        """After a restart: adopt the MIG instances of running tasks and destroy the rest;
        stop MPS daemons no running task needs."""
        if self.mig is not None:
            try:
                got = self.mig.reconcile(live, range(n_gpus))
            except DeviceSetupError as exc:
                logger.warning("could not reconcile MIG instances: %s", exc)
            else:
                if got.adopted or got.destroyed:
                    logger.warning("MIG after restart: adopted %d, destroyed %s", len(got.adopted),
                                   counted(len(got.destroyed), "orphan"))  # fmt: skip
        still = set(running_mps)
        for gpu in range(n_gpus):
            if gpu not in still:
                try:
                    self.mps.stop(gpu)
                except DeviceSetupError as exc:
                    logger.warning("could not check the MPS daemon of GPU %d: %s", gpu, exc)

    def close(self) -> None:
        if self.mig is not None:
            self.mig.close()


__all__ = ["MIG", "MPS", "PLAIN", "GpuSharing", "nvml_for_mig", "share_kind"]
