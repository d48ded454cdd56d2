"""MIG instances on a node: the agent creates a GPU instance and its compute instance for each
task the scheduler placed on a MIG profile, hands the task its MIG device UUID, and destroys
both when the task ends.

Command line equivalents: ``nvidia-smi mig -cgi PROFILE_ID:START -C`` (create, at a placement),
``nvidia-smi mig -dci -gi ID`` then ``nvidia-smi mig -dgi -gi ID`` (destroy), and
``nvidia-smi -L`` (the ``MIG-...`` UUIDs that go in ``CUDA_VISIBLE_DEVICES``).

The agent owns every GPU instance on the GPUs it partitions. What it created is written to
``WORKDIR/mig-instances.json`` before the task starts, so an agent restarted on the same workdir
adopts the instances of tasks still running (``reconcile``) and destroys the rest: instances of
tasks that ended while it was down, and any it never recorded (a crash between creating and
writing, or one made by hand), which would otherwise hold memory slices the scheduler counts free.

Privileges: creating and destroying instances, and turning MIG mode on, need root
(``NVML_ERROR_NO_PERMISSION`` otherwise). MIG mode changes only on an idle GPU
(``NVML_ERROR_IN_USE``); where the driver leaves the new mode pending until a GPU reset, the
agent says so and creates nothing (docs/sharing.md).
"""

from __future__ import annotations

import ctypes
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpuwarden.collectors import libnvml
from gpuwarden.errors import DeviceSetupError, InputError
from gpuwarden.scheduler import mig
from gpuwarden.scheduler._task_wrapper import write_atomic

logger = logging.getLogger("gpuwarden.scheduler.agent")


@dataclass(frozen=True)
class MigDevice:
    """One GPU instance with its compute instance, as the agent made it for one task."""

    gpu: int
    gi_id: int
    ci_id: int
    profile: str
    start: int
    uuid: str  # "MIG-...": what CUDA_VISIBLE_DEVICES names


@dataclass(frozen=True)
class Reconciled:
    """What ``reconcile`` found: task keys whose instances were adopted, and the (gpu, GPU
    instance id) pairs it destroyed."""

    adopted: tuple[str, ...]
    destroyed: tuple[tuple[int, int], ...]
    lost: tuple[str, ...]  # recorded for a running task, yet gone from the GPU


class MigManager:
    """Creates and destroys MIG instances through ``nvml`` (pynvml, or the test fake) for the
    GPUs of one ``gpu_model``; remembers them in ``state_path``."""

    def __init__(self, nvml: Any, gpu_model: str, state_path: Path) -> None:
        self.nvml = nvml
        self.model = mig.canonical_model(gpu_model)
        self.state_path = state_path
        self.devices: dict[str, MigDevice] = {}
        if state_path.exists():
            for key, entry in json.loads(state_path.read_text()).items():
                self.devices[key] = MigDevice(**entry)
        self._started = False

    # ---- what the agent calls ----------------------------------------------------------------

    def create(self, key: str, gpu: int, profile_name: str, start: int) -> MigDevice:
        """A GPU instance of ``profile_name`` at memory slice ``start`` of GPU ``gpu`` and a
        compute instance spanning it, for task ``key``; the same one again for a key that has
        one. ``DeviceSetupError`` saying what NVML refused, with nothing left behind."""
        if key in self.devices:
            return self.devices[key]
        try:
            p = mig.profile(self.model, profile_name)
        except InputError as exc:  # an order this node's GPUs cannot take: the task fails
            raise DeviceSetupError(str(exc)) from exc
        self._init()
        nv = self.nvml
        handle = self._call("nvmlDeviceGetHandleByIndex", gpu, what=f"GPU {gpu}")
        self._ensure_mig_mode(handle, gpu)
        info = self._call(
            "nvmlDeviceGetGpuInstanceProfileInfo", handle, getattr(nv, mig.NVML_GI_PROFILE[p.profile_id]),
            what=f"profile {p.name} on GPU {gpu}",
        )  # fmt: skip
        if int(info.id) != p.profile_id or int(info.sliceCount) != p.compute_slices:
            raise DeviceSetupError(
                f"GPU {gpu} reports profile id {info.id} with {info.sliceCount} compute slices "
                f"for {p.name}; gpuwarden's MIG table for {self.model} says {p.profile_id} "
                f"and {p.compute_slices}: is the GPU model right?"
            )
        legal = self._placements(handle, p.profile_id)
        if start not in legal:
            raise DeviceSetupError(
                f"{p.name} cannot start at memory slice {start} of GPU {gpu}; NVML allows {legal}"
            )
        placement = nv.c_nvmlGpuInstancePlacement_t(start, p.memory_slices)
        gi = self._call(
            "nvmlDeviceCreateGpuInstanceWithPlacement", handle, p.profile_id, placement,
            what=f"{p.name} GPU instance at slice {start} of GPU {gpu}",
        )  # fmt: skip
        try:
            ci_info = self._call(
                "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi,
                getattr(nv, mig.NVML_CI_PROFILE[p.compute_slices]),
                nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, what=f"{p.name} compute profile",
            )  # fmt: skip
            ci = self._call(
                "nvmlGpuInstanceCreateComputeInstance", gi, ci_info.id,
                what=f"compute instance in {p.name} on GPU {gpu}",
            )  # fmt: skip
            gi_id = int(self._call("nvmlGpuInstanceGetInfo", gi, what="GPU instance").id)
            ci_id = int(self._call("nvmlComputeInstanceGetInfo", ci, what="compute instance").id)
            uuid = self._mig_uuid(handle, gpu, gi_id, ci_id)
        except DeviceSetupError:
            self._destroy_gi(gi, gpu)  # leave no half-made instance holding slices
            raise
        device = MigDevice(gpu, gi_id, ci_id, p.name, start, uuid)
        self.devices[key] = device
        self._save()
        logger.info("MIG %s at slice %d of GPU %d for %s: %s", p.name, start, gpu, key, uuid)
        return device

    def destroy(self, key: str) -> None:
        """Destroy task ``key``'s instances (compute, then GPU). ``DeviceSetupError`` when NVML
        refuses (processes still on it: ``InUse``); the record stays, to retry later."""
        device = self.devices.get(key)
        if device is None:
            return
        self._init()
        handle = self._call("nvmlDeviceGetHandleByIndex", device.gpu, what=f"GPU {device.gpu}")
        gi = self._find_gi(handle, device.gi_id)
        if gi is not None:
            self._destroy_gi(gi, device.gpu, strict=True)
        del self.devices[key]
        self._save()
        logger.info("destroyed MIG %s on GPU %d (%s)", device.profile, device.gpu, key)

    def reconcile(self, live: set[str], gpus: range | list[int]) -> Reconciled:
        """After a restart: keep the instances recorded for the running tasks ``live``, destroy
        every other instance on the MIG-enabled GPUs among ``gpus``. Instances NVML refuses to
        destroy (processes still on them) stay, logged, and are tried again next time."""
        self._init()
        keep = {(d.gpu, d.gi_id): k for k, d in self.devices.items() if k in live}
        seen: set[tuple[int, int]] = set()
        destroyed: list[tuple[int, int]] = []
        for gpu in gpus:
            handle = self._call("nvmlDeviceGetHandleByIndex", gpu, what=f"GPU {gpu}")
            if not self._mig_enabled(handle):
                continue
            for gi_id, gi in self._gpu_instances(handle):
                seen.add((gpu, gi_id))
                if (gpu, gi_id) in keep:
                    continue
                try:
                    self._destroy_gi(gi, gpu, strict=True)
                    destroyed.append((gpu, gi_id))
                except DeviceSetupError as exc:
                    logger.warning("cannot destroy orphan MIG instance %d on GPU %d: %s",
                                   gi_id, gpu, exc)  # fmt: skip
        lost = tuple(k for pair, k in keep.items() if pair not in seen)
        adopted = tuple(k for pair, k in keep.items() if pair in seen)
        gone = set(self.devices) - set(adopted)
        for key in gone:
            del self.devices[key]
        if gone:
            self._save()
        for key in lost:
            logger.warning("the MIG instance of %s is gone from its GPU", key)
        return Reconciled(adopted, tuple(destroyed), lost)

    def close(self) -> None:
        if self._started:
            libnvml.shutdown(self.nvml)
            self._started = False

    # ---- NVML, the parts ----------------------------------------------------------------------

    def _init(self) -> None:
        if not self._started:
            try:
                self.nvml.nvmlInit()
            except libnvml.NVMLError as exc:
                raise DeviceSetupError(f"NVML could not start for MIG: {exc}") from exc
            self._started = True

    def _call(self, name: str, *args: Any, what: str) -> Any:
        try:
            return getattr(self.nvml, name)(*args)
        except libnvml.NVMLError as exc:
            raise DeviceSetupError(f"{name} ({what}): {_explain(self.nvml, exc)}") from exc

    def _ensure_mig_mode(self, handle: Any, gpu: int) -> None:
        """Turn MIG on if it is off; needs root and an idle GPU. A mode left pending (a GPU
        reset applies it) is an error naming the reset, not a silent wait."""
        nv = self.nvml
        current, pending = self._call("nvmlDeviceGetMigMode", handle, what=f"GPU {gpu}")
        if current == nv.NVML_DEVICE_MIG_ENABLE:
            return
        if pending != nv.NVML_DEVICE_MIG_ENABLE:
            self._call(
                "nvmlDeviceSetMigMode", handle, nv.NVML_DEVICE_MIG_ENABLE,
                what=f"turning MIG on for GPU {gpu}",
            )  # fmt: skip
            current, pending = self._call("nvmlDeviceGetMigMode", handle, what=f"GPU {gpu}")
            if current == nv.NVML_DEVICE_MIG_ENABLE:
                logger.warning("turned MIG mode on for GPU %d", gpu)
                return
        raise DeviceSetupError(
            f"MIG mode of GPU {gpu} is pending until the GPU is reset "
            f"(`nvidia-smi -i {gpu} -r` as root, with no processes on it)"
        )

    def _mig_enabled(self, handle: Any) -> bool:
        try:
            current, _ = self.nvml.nvmlDeviceGetMigMode(handle)
        except libnvml.NVMLError:
            return False  # no MIG on this GPU: nothing of ours can be on it
        return bool(current == self.nvml.NVML_DEVICE_MIG_ENABLE)

    def _placements(self, handle: Any, profile_id: int) -> list[int]:
        """Legal starts of ``profile_id`` (``nvidia-smi mig -lgipp``), the v2 call's two steps."""
        nv = self.nvml
        count = ctypes.c_uint(0)
        self._call("nvmlDeviceGetGpuInstancePossiblePlacements", handle, profile_id, None,
                   ctypes.byref(count), what="placements")  # fmt: skip
        array = (nv.c_nvmlGpuInstancePlacement_t * max(1, count.value))()
        self._call("nvmlDeviceGetGpuInstancePossiblePlacements", handle, profile_id, array,
                   ctypes.byref(count), what="placements")  # fmt: skip
        return [int(array[i].start) for i in range(count.value)]

    def _gpu_instances(self, handle: Any) -> list[tuple[int, Any]]:
        """(GPU instance id, handle) of every GPU instance on the GPU, whatever its profile."""
        nv, out = self.nvml, []
        for profile_id in sorted({p.profile_id for p in mig.MIG_PROFILES.get(self.model, ())}):
            array = (nv.c_nvmlGpuInstance_t * 8)()
            count = ctypes.c_uint(8)
            try:
                nv.nvmlDeviceGetGpuInstances(handle, profile_id, array, ctypes.byref(count))
            except libnvml.NVMLError:
                continue  # a profile this GPU does not offer
            for i in range(count.value):
                info = self._call("nvmlGpuInstanceGetInfo", array[i], what="GPU instance")
                out.append((int(info.id), array[i]))
        return out

    def _find_gi(self, handle: Any, gi_id: int) -> Any:
        return next((gi for i, gi in self._gpu_instances(handle) if i == gi_id), None)

    def _destroy_gi(self, gi: Any, gpu: int, *, strict: bool = False) -> None:
        """Destroy a GPU instance's compute instances, then it. ``strict``: raise when NVML
        refuses; otherwise (cleaning up after a failed create) log and go on."""
        nv = self.nvml
        try:
            array = (nv.c_nvmlComputeInstance_t * 8)()
            count = ctypes.c_uint(8)
            for ci_profile in sorted(set(mig.NVML_CI_PROFILE.values())):
                self._call("nvmlGpuInstanceGetComputeInstances", gi, getattr(nv, ci_profile),
                           array, ctypes.byref(count), what="compute instances")  # fmt: skip
                for i in range(count.value):
                    self._call("nvmlComputeInstanceDestroy", array[i],
                               what=f"compute instance on GPU {gpu}")  # fmt: skip
                count.value = 8
            self._call("nvmlGpuInstanceDestroy", gi, what=f"GPU instance on GPU {gpu}")
        except DeviceSetupError as exc:
            if strict:
                raise
            logger.warning("could not clean up a MIG instance on GPU %d: %s", gpu, exc)

    def _mig_uuid(self, handle: Any, gpu: int, gi_id: int, ci_id: int) -> str:
        """The ``MIG-...`` UUID of the MIG device backed by (``gi_id``, ``ci_id``)."""
        nv = self.nvml
        for index in range(int(self._call("nvmlDeviceGetMaxMigDeviceCount", handle, what="count"))):
            try:
                dev = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
            except libnvml.NVMLError:
                continue  # NotFound: no MIG device at this index
            if (self._call("nvmlDeviceGetGpuInstanceId", dev, what="MIG device") == gi_id
                    and self._call("nvmlDeviceGetComputeInstanceId", dev, what="MIG device") == ci_id):  # fmt: skip
                return libnvml.text(self._call("nvmlDeviceGetUUID", dev, what="MIG device"))
        raise DeviceSetupError(f"no MIG device for GPU instance {gi_id} on GPU {gpu}")

    def _save(self) -> None:
        write_atomic(
            str(self.state_path), json.dumps({k: asdict(d) for k, d in self.devices.items()})
        )


_HINTS = {
    "NVML_ERROR_NOT_SUPPORTED": "this GPU or driver does not support MIG (or MIG mode is off)",
    "NVML_ERROR_NO_PERMISSION": "the agent must run as root to change MIG instances",
    "NVML_ERROR_IN_USE": "processes still run on it; drain the GPU first",
    "NVML_ERROR_INSUFFICIENT_RESOURCES": "its memory slices are taken by another instance",
    "NVML_ERROR_INVALID_ARGUMENT": "NVML refused the profile or placement",
}


def _explain(nvml: Any, exc: Any) -> str:
    """pynvml's error class (``NVMLError_InUse``) plus what it means for MIG; the class name, as
    NVML's own message needs the library loaded to be more than a number."""
    for name, hint in _HINTS.items():
        if getattr(nvml, name, None) == exc.value:
            return f"{type(exc).__name__}: {hint}"
    return f"{type(exc).__name__}: {exc}"


__all__ = ["MigDevice", "MigManager", "Reconciled"]
