"""NVML's MIG API on top of the replaying ``FakeNvml``: GPU and compute instances that the node
agent creates and destroys, with the errors the real library returns.

Kept apart from ``fake_nvml.py`` (which replays telemetry) so the two grow independently. The
profile and placement tables are transcribed from NVIDIA's MIG user guide ("Supported MIG
Profiles", https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html),
in the form ``nvidia-smi mig -lgip`` / ``-lgipp`` print them; they are written out here rather
than taken from ``gpuwarden.scheduler.mig`` so a test can check that the scheduler's tables agree
with what a GPU says (``test_mig_agent.py``).

Semantics follow the NVML reference (nvml.h) for each call:

    nvmlDeviceGetMigMode            NotSupported on a GPU without MIG
    nvmlDeviceSetMigMode            NoPermission unless root; InUse while processes run on the
                                    GPU; a GPU marked ``mig_needs_reset`` only sets the pending
                                    mode (A100 on older drivers: a GPU reset applies it)
    nvmlDeviceCreateGpuInstanceWithPlacement
                                    NotSupported with MIG off; InvalidArgument for a placement
                                    the profile does not allow; InsufficientResources when the
                                    memory slices are taken or the profile's count is reached
    nvmlGpuInstanceDestroy          InUse while it has compute instances or processes
    nvmlComputeInstanceDestroy      InUse while processes run on it

Test controls: ``root`` (False: every change says NoPermission), ``busy_gpus`` (GPU indices with
processes), ``busy_instances`` ((gpu, gpu instance id) pairs with processes), ``gpu_instances(i)``.
"""

from __future__ import annotations

import ctypes
import uuid
from dataclasses import dataclass, field
from typing import Any

import pynvml
from fake_nvml import FakeNvml, _raise  # this directory's fake, imported by path

_ALL = (0, 1, 2, 3, 4, 5, 6)


@dataclass(frozen=True)
class Row:
    """One ``nvidia-smi mig -lgip`` row and its ``-lgipp`` placements."""

    enum: str  # the NVML_GPU_INSTANCE_PROFILE_* constant naming it
    profile_id: int
    name: str
    compute_slices: int
    memory_slices: int
    memory_gb: int
    starts: tuple[int, ...]
    max_count: int


def _seven(one: int, two: int, four: int, full: int) -> tuple[Row, ...]:
    p = "NVML_GPU_INSTANCE_PROFILE_"
    return (
        Row(p + "1_SLICE", 19, f"1g.{one}gb", 1, 1, one, _ALL, 7),
        Row(p + "1_SLICE_REV1", 20, f"1g.{one}gb+me", 1, 1, one, _ALL, 1),
        Row(p + "1_SLICE_REV2", 15, f"1g.{two}gb", 1, 2, two, (0, 2, 4, 6), 4),
        Row(p + "2_SLICE", 14, f"2g.{two}gb", 2, 2, two, (0, 2, 4), 3),
        Row(p + "3_SLICE", 9, f"3g.{four}gb", 3, 4, four, (0, 4), 2),
        Row(p + "4_SLICE", 5, f"4g.{four}gb", 4, 4, four, (0,), 1),
        Row(p + "7_SLICE", 0, f"7g.{full}gb", 7, 8, full, (0,), 1),
    )


#: NVML product name -> its MIG profiles (MIG user guide tables for A100, H100, H200).
MIG_TABLES: dict[str, tuple[Row, ...]] = {
    "NVIDIA A100-SXM4-40GB": _seven(5, 10, 20, 40),
    "NVIDIA A100-SXM4-80GB": _seven(10, 20, 40, 80),
    "NVIDIA H100 80GB HBM3": _seven(10, 20, 40, 80),
    "NVIDIA H200": _seven(18, 35, 71, 141),
}

#: compute-instance profile constant per compute slice count (a CI that spans its GI)
_CI_ENUM = {1: "1_SLICE", 2: "2_SLICE", 3: "3_SLICE", 4: "4_SLICE", 7: "7_SLICE"}


@dataclass
class _Gi:
    gpu: int
    gi_id: int
    row: Row
    start: int
    handle: Any
    cis: dict[int, Any] = field(default_factory=dict)  # ci id -> handle

    @property
    def mask(self) -> int:
        return ((1 << self.row.memory_slices) - 1) << self.start


class FakeMigNvml(FakeNvml):
    """``FakeNvml`` plus NVML's MIG calls. Devices whose ``name`` is in ``MIG_TABLES`` can do MIG;
    a device's ``mig_enabled`` (default False) and ``mig_needs_reset`` set its starting state."""

    c_nvmlGpuInstancePlacement_t = pynvml.c_nvmlGpuInstancePlacement_t
    c_nvmlGpuInstance_t = pynvml.c_nvmlGpuInstance_t
    c_nvmlComputeInstance_t = pynvml.c_nvmlComputeInstance_t

    def __init__(self, fixture: str | dict[str, Any], **kwargs: Any) -> None:
        super().__init__(fixture, **kwargs)
        self.root = True
        self.busy_gpus: set[int] = set()
        self.busy_instances: set[tuple[int, int]] = set()
        self.mig_current = [int(d.get("mig_enabled", False)) for d in self.devices]
        self.mig_pending = list(self.mig_current)
        self._gis: dict[int, _Gi] = {}  # address of the handle's struct -> instance
        self._cis: dict[int, tuple[_Gi, int]] = {}
        self._mig_devices: dict[int, tuple[_Gi, int]] = {}  # MIG device handle -> (GI, CI id)
        self._keep: list[Any] = []  # ctypes objects NVML handles point into
        self._next_gi = [1] * len(self.devices)

    # --- test controls -------------------------------------------------------------------

    def gpu_instances(self, gpu: int) -> list[tuple[str, int, int]]:
        """(profile name, start, compute instances) of each GPU instance on GPU ``gpu``."""
        gis = sorted((g for g in self._gis.values() if g.gpu == gpu), key=lambda g: g.start)
        return [(g.row.name, g.start, len(g.cis)) for g in gis]

    # --- internals -----------------------------------------------------------------------

    def _table(self, handle: Any, function: str) -> tuple[int, tuple[Row, ...]]:
        dev = self._device(handle, function)
        rows = MIG_TABLES.get(dev["name"])
        if rows is None:
            _raise("NOT_SUPPORTED")
        assert rows is not None
        return self.devices.index(dev), rows

    def _need_root(self) -> None:
        if not self.root:
            _raise("NO_PERMISSION")

    def _gi(self, handle: Any) -> _Gi:
        self._check_init()
        gi = self._gis.get(ctypes.addressof(handle.contents)) if handle else None
        if gi is None:
            _raise("INVALID_ARGUMENT")
        assert gi is not None
        return gi

    def _new_handle(self, struct_type: Any, pointer_type: Any) -> Any:
        s = struct_type()
        self._keep.append(s)
        return pointer_type(s)

    # --- MIG mode ------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        index, _ = self._table(device, "nvmlDeviceGetMigMode")
        return [self.mig_current[index], self.mig_pending[index]]

    def nvmlDeviceSetMigMode(self, device: Any, mode: int) -> int:
        index, _ = self._table(device, "nvmlDeviceSetMigMode")
        self._need_root()
        if mode not in (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE):
            _raise("INVALID_ARGUMENT")
        if index in self.busy_gpus or any(g.gpu == index for g in self._gis.values()):
            _raise("IN_USE")
        self.mig_pending[index] = mode
        if not self.devices[index].get("mig_needs_reset"):
            self.mig_current[index] = mode
        return pynvml.NVML_SUCCESS

    # --- GPU instances -------------------------------------------------------------------

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Any, profile: int, version: int = 2
    ) -> Any:
        _, rows = self._table(device, "nvmlDeviceGetGpuInstanceProfileInfo")
        row = next((r for r in rows if getattr(pynvml, r.enum) == profile), None)
        if row is None:
            _raise("NOT_SUPPORTED")
        assert row is not None
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id, info.sliceCount, info.instanceCount = (
            row.profile_id,
            row.compute_slices,
            row.max_count,
        )
        info.memorySizeMB = row.memory_gb * 1000  # -lgip reports a little under the name's GB
        info.multiprocessorCount = 16 * row.compute_slices
        info.name = f"MIG {row.name}".encode()
        return info

    def _row(self, device: Any, profile_id: int, function: str) -> tuple[int, Row]:
        index, rows = self._table(device, function)
        row = next((r for r in rows if r.profile_id == profile_id), None)
        if row is None:
            _raise("INVALID_ARGUMENT")
        assert row is not None
        return index, row

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, device: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        _, row = self._row(device, profileId, "nvmlDeviceGetGpuInstancePossiblePlacements_v2")
        count = countRef._obj
        if placementsRef is None:  # the v2 call's size query
            count.value = len(row.starts)
            return pynvml.NVML_SUCCESS
        if count.value < len(row.starts):
            count.value = len(row.starts)
            _raise("INSUFFICIENT_SIZE")
        for i, start in enumerate(row.starts):
            placementsRef[i].start, placementsRef[i].size = start, row.memory_slices
        count.value = len(row.starts)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, device: Any, profileId: int, placement: Any
    ) -> Any:
        index, row = self._row(device, profileId, "nvmlDeviceCreateGpuInstanceWithPlacement")
        if not self.mig_current[index]:
            _raise("NOT_SUPPORTED")
        self._need_root()
        if placement.start not in row.starts or placement.size != row.memory_slices:
            _raise("INVALID_ARGUMENT")
        mine = [g for g in self._gis.values() if g.gpu == index]
        mask = ((1 << row.memory_slices) - 1) << placement.start
        same = sum(g.row.profile_id == profileId for g in mine)
        if any(g.mask & mask for g in mine) or same >= row.max_count:
            _raise("INSUFFICIENT_RESOURCES")
        handle = self._new_handle(pynvml.struct_c_nvmlGpuInstance_t, pynvml.c_nvmlGpuInstance_t)
        gi = _Gi(index, self._next_gi[index], row, placement.start, handle)
        self._next_gi[index] += 1
        self._gis[ctypes.addressof(handle.contents)] = gi
        return handle

    def nvmlDeviceGetGpuInstances(
        self, device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int:
        index, _ = self._row(device, profileId, "nvmlDeviceGetGpuInstances")
        found = [g for g in self._gis.values() if g.gpu == index and g.row.profile_id == profileId]
        for i, g in enumerate(sorted(found, key=lambda g: g.gi_id)):
            gpuInstancesRef[i] = g.handle
        countRef._obj.value = len(found)
        return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        gi = self._gi(gpuInstance)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.device = self._handles[gi.gpu]
        info.id, info.profileId = gi.gi_id, gi.row.profile_id
        info.placement.start, info.placement.size = gi.start, gi.row.memory_slices
        return info

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        gi = self._gi(gpuInstance)
        self._need_root()
        if gi.cis or (gi.gpu, gi.gi_id) in self.busy_instances:
            _raise("IN_USE")
        del self._gis[ctypes.addressof(gpuInstance.contents)]
        return pynvml.NVML_SUCCESS

    # --- compute instances ---------------------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        gi = self._gi(device)  # NVML names the GPU instance handle "device" here
        wanted = getattr(pynvml, "NVML_COMPUTE_INSTANCE_PROFILE_" + _CI_ENUM[gi.row.compute_slices])
        if profile != wanted or engProfile != pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            _raise("NOT_SUPPORTED")  # only the CI spanning the whole GI is offered here
        info = pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
        info.id, info.sliceCount, info.instanceCount = profile, gi.row.compute_slices, 1
        return info

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> Any:
        gi = self._gi(gpuInstance)
        self._need_root()
        if gi.cis:
            _raise("INSUFFICIENT_RESOURCES")
        handle = self._new_handle(
            pynvml.struct_c_nvmlComputeInstance_t, pynvml.c_nvmlComputeInstance_t
        )
        gi.cis[0] = handle
        self._cis[ctypes.addressof(handle.contents)] = (gi, 0)
        return handle

    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        gi = self._gi(gpuInstance)
        spanning = getattr(
            pynvml, "NVML_COMPUTE_INSTANCE_PROFILE_" + _CI_ENUM[gi.row.compute_slices]
        )
        found = list(gi.cis.values()) if profileId == spanning else []
        for i, h in enumerate(found):
            computeInstancesRef[i] = h
        countRef._obj.value = len(found)
        return pynvml.NVML_SUCCESS

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        self._check_init()
        got = self._cis.get(ctypes.addressof(computeInstance.contents))
        if got is None:
            _raise("INVALID_ARGUMENT")
        assert got is not None
        gi, ci_id = got
        info = pynvml.c_nvmlComputeInstanceInfo_t()
        info.device, info.gpuInstance = self._handles[gi.gpu], gi.handle
        info.id = ci_id
        return info

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        self._check_init()
        address = ctypes.addressof(computeInstance.contents)
        got = self._cis.get(address)
        if got is None:
            _raise("INVALID_ARGUMENT")
        assert got is not None
        self._need_root()
        gi, ci_id = got
        if (gi.gpu, gi.gi_id) in self.busy_instances:
            _raise("IN_USE")
        del gi.cis[ci_id], self._cis[address]
        return pynvml.NVML_SUCCESS

    # --- MIG devices (what CUDA sees) ------------------------------------------------------

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        self._table(device, "nvmlDeviceGetMaxMigDeviceCount")
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        gpu, _ = self._table(device, "nvmlDeviceGetMigDeviceHandleByIndex")
        live = sorted(
            ((g, ci) for g in self._gis.values() if g.gpu == gpu for ci in g.cis),
            key=lambda p: (p[0].gi_id, p[1]),
        )
        if not self.mig_current[gpu] or index >= len(live):
            _raise("NOT_FOUND")
        handle = self._new_handle(pynvml.struct_c_nvmlDevice_t, pynvml.c_nvmlDevice_t)
        self._mig_devices[ctypes.addressof(handle.contents)] = live[index]
        return handle

    def _mig_device(self, handle: Any) -> tuple[_Gi, int] | None:
        return self._mig_devices.get(ctypes.addressof(handle.contents)) if handle else None

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        got = self._mig_device(device)
        if got is None:
            _raise("INVALID_ARGUMENT")  # a whole-GPU handle has no GPU instance
        assert got is not None
        return got[0].gi_id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        got = self._mig_device(device)
        if got is None:
            _raise("INVALID_ARGUMENT")
        assert got is not None
        return got[1]

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        got = self._mig_device(handle)
        if got is None:
            return super().nvmlDeviceGetUUID(handle)
        gi, ci = got
        parent = self.devices[gi.gpu]["uuid"]
        return "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_OID, f"{parent}/{gi.gi_id}/{ci}"))
