"""The NVML boundary: gpuwarden's one wrapper of NVIDIA's management library (pynvml).

It is the only module that imports pynvml (ruff's banned-api rule TID251 enforces it); every
other piece of gpuwarden that reads NVIDIA GPUs goes through it: the ``nvml://`` collector
(``collectors/nvml.py``) today, the node agent for MIG and power caps later. Its public API:

    real_module() / init(nvml) / shutdown(nvml)   load and start NVML; count of GPUs
    DeviceQuery(nvml, handle).call(name, ...)      one NVML call, its errors sorted (below)
    DeviceQuery.field_value(field_id, label)       one nvmlDeviceGetFieldValues value
    XidEvents(nvml)                                 Xid errors through NVML's event set
    GpmMetrics(nvml)                                GPM ratios (Hopper and later)
    text(), handle_key(), sum_present()             small conversions of NVML's values
    GpuGone, NOT_AVAILABLE, GONE, NO_LIBRARY        what the errors become
    NVMLError                                       pynvml's error class, for callers that act on
                                                    NVML's codes (the agent's MIG calls)

Every NVML call goes through ``DeviceQuery.call``, which sorts NVML's errors three ways:

* "not available" (NotSupported, FunctionNotFound on an older driver, InvalidArgument for an
  NVLink index past the GPU's links, ...): the value is None and the field stays absent, never 0;
* GpuIsLost / GpuRequiresReset: raises ``GpuGone``, so the caller stops reading that GPU and
  records an event while the other GPUs keep being read;
* anything else (Unknown Error, Timeout, a corrupted InfoROM): the value is None and the call is
  named in ``DeviceQuery.problems`` for ``Batch.problems``.

Errors at start (no driver, driver/library mismatch) become ``CollectorUnavailable`` with one
readable line. The functions take the NVML module as an argument (the real pynvml, or the test
fake) and only use the function names and constants pynvml defines; the exception classes are
always pynvml's.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Iterable
from typing import Any

import pynvml

from gpuwarden.collectors._gpu_state import LOST, REQUIRES_RESET
from gpuwarden.errors import CollectorUnavailable
from gpuwarden.telemetry import GpuId

#: NVML return codes meaning "this GPU, driver or account does not offer that": absent, quietly.
NOT_AVAILABLE: frozenset[int] = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NOT_FOUND,
        pynvml.NVML_ERROR_INVALID_ARGUMENT,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_NO_DATA,
        pynvml.NVML_ERROR_DEPRECATED,
    }
)

#: NVML return codes meaning the GPU itself is gone until a reset or reboot.
GONE: dict[int, str] = {
    pynvml.NVML_ERROR_GPU_IS_LOST: LOST,
    pynvml.NVML_ERROR_RESET_REQUIRED: REQUIRES_RESET,
}

NO_LIBRARY = (
    "NVML not found: no NVIDIA driver on this host (libnvidia-ml.so.1); "
    "use smi://, dcgm+http://... or sim://"
)

_INIT_ERRORS: dict[int, str] = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: NO_LIBRARY,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: (
        "NVML: the NVIDIA kernel driver is not loaded (nvidia-smi would say it couldn't "
        "communicate with the driver); load it or use dcgm+http://... or sim://"
    ),
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "NVML: libnvidia-ml.so and the loaded kernel driver are different versions "
        "(a driver upgrade without a reboot); reboot or reload the nvidia module"
    ),
    pynvml.NVML_ERROR_NO_PERMISSION: (
        "NVML: no permission to open the GPUs (/dev/nvidia*); run as a user who can"
    ),
}

_VALUE_MEMBER: dict[int, str] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}

#: How many queued Xid events one ``collect()`` takes; the rest wait for the next one.
XID_DRAIN_LIMIT = 256


#: pynvml's error base class, for the node agent's MIG calls (``scheduler/mig_agent.py``), which
#: must tell InUse from NoPermission from InsufficientResources rather than read them as absent.
NVMLError = pynvml.NVMLError


class GpuGone(Exception):
    """NVML said GpuIsLost (``kind="gpu_lost"``) or GpuRequiresReset."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def real_module() -> Any:
    """The pynvml module ``NvmlCollector.from_url`` uses."""
    return pynvml


def init(nvml: Any) -> int:
    """``nvmlInit`` and ``nvmlDeviceGetCount``; returns the GPU count.

    Raises ``CollectorUnavailable`` with one line saying why when NVML cannot be used at all.
    """
    try:
        nvml.nvmlInit()
    except pynvml.NVMLError as exc:
        message = _INIT_ERRORS.get(exc.value, f"NVML could not start: {exc}")
        raise CollectorUnavailable(message) from exc
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as exc:
        shutdown(nvml)
        raise CollectorUnavailable(f"NVML started but could not count GPUs: {exc}") from exc
    if count == 0:
        shutdown(nvml)
        raise CollectorUnavailable("NVML started but sees no GPUs on this host")
    return count


def list_gpus(nvml: Any, hostname: str) -> list[GpuId]:
    """This host's GPUs (index, UUID, PCI bus id, name), read once; for matching kernel-log
    lines to GPUs. A GPU that does not answer is left out. Raises ``CollectorUnavailable``
    when NVML cannot be used at all."""
    count = init(nvml)
    out: list[GpuId] = []
    try:
        for i in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                pci = nvml.nvmlDeviceGetPciInfo(handle)
                uuid = text(nvml.nvmlDeviceGetUUID(handle))
                name = text(nvml.nvmlDeviceGetName(handle))
            except pynvml.NVMLError:
                continue
            out.append(GpuId(hostname, i, uuid, pci_bus_id=text(pci.busId), model=name))
    finally:
        shutdown(nvml)
    return out


def shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except pynvml.NVMLError:
        pass  # closing must not fail: the driver may already be gone


def text(value: Any) -> str:
    """NVML strings as str (older pynvml returned bytes)."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return "" if value is None else str(value)


def handle_key(handle: Any) -> int:
    """A device handle's address, to match the handle in an NVML event to a GPU."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


class DeviceQuery:
    """Calls NVML for one GPU (``handle``), or for the whole host when ``handle`` is None."""

    def __init__(self, nvml: Any, handle: Any = None) -> None:
        self.nvml = nvml
        self.handle = handle
        self.problems: list[str] = []

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``nvml.<name>(handle, *args)``; None when the GPU does not offer it."""
        return self.attempt(name, *args, **kwargs)[1]

    def attempt(self, name: str, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        """Like ``call``, but also says whether the call succeeded (for calls returning None)."""
        fn = getattr(self.nvml, name, None)
        if fn is None:  # a pynvml older than the function
            return False, None
        head = () if self.handle is None else (self.handle,)
        try:
            return True, fn(*head, *args, **kwargs)
        except pynvml.NVMLError as exc:
            self.classify(exc.value, name, str(exc))
            return False, None

    def classify(self, code: int, what: str, message: str = "") -> None:
        """Sort a failed NVML return code: raise ``GpuGone``, ignore, or record a problem."""
        message = message or str(pynvml.NVMLError(code))
        if code in GONE:
            raise GpuGone(GONE[code], f"{what}: {message}")
        if code not in NOT_AVAILABLE:
            self.problems.append(f"{what}: {message}")

    def field_value(self, field_id: int, label: str) -> float | None:
        """One ``nvmlDeviceGetFieldValues`` entry; each entry carries its own return code."""
        values = self.call("nvmlDeviceGetFieldValues", [field_id])
        if values is None:
            return None
        entry = values[0]
        if entry.nvmlReturn != pynvml.NVML_SUCCESS:
            self.classify(int(entry.nvmlReturn), f"nvmlDeviceGetFieldValues({label})")
            return None
        member = _VALUE_MEMBER.get(int(entry.valueType))
        if member is None:
            self.problems.append(f"nvmlDeviceGetFieldValues({label}): value type {entry.valueType}")
            return None
        return float(getattr(entry.value, member))


def driver_versions(nvml: Any) -> tuple[str, str]:
    """This host's (driver version, CUDA driver version) as NVML says them, "" when unknown.

    Command line equivalent: the header of ``nvidia-smi`` ("Driver Version: 535.161.08  CUDA
    Version: 12.2"). NVML gives the CUDA version as 1000 x major + 10 x minor (12020)."""
    host = DeviceQuery(nvml)
    driver = host.call("nvmlSystemGetDriverVersion")
    cuda = host.call("nvmlSystemGetCudaDriverVersion_v2")
    if cuda is None:
        cuda = host.call("nvmlSystemGetCudaDriverVersion")
    cuda_text = f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}" if cuda else ""
    return (text(driver) if driver else ""), cuda_text


class XidEvents:
    """NVML's event set for Xid critical errors, drained with a 0 ms wait.

    Polling from ``collect()`` rather than a background thread: Xids are rare, the driver queues
    them between waits, a 0 ms wait never blocks the sample loop, and a thread parked in
    ``nvmlEventSetWait`` could not be stopped cleanly before ``nvmlEventSetFree`` at close.
    The cost is timestamp resolution: an Xid carries the time of the ``collect()`` that saw it.
    """

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.problems: list[str] = []
        query = DeviceQuery(nvml)
        self._set = query.call("nvmlEventSetCreate")
        self.problems.extend(f"Xid events unavailable: {p}" for p in query.problems)

    def register(self, handle: Any) -> bool:
        """Ask for Xid events from one GPU; False when it cannot send them (GpuGone passes up)."""
        if self._set is None:
            return False
        query = DeviceQuery(self._nvml, handle)
        mask = self._nvml.nvmlEventTypeXidCriticalError
        ok, _ = query.attempt("nvmlDeviceRegisterEvents", mask, self._set)
        self.problems.extend(f"Xid events: {p}" for p in query.problems)
        return ok

    def drain(self) -> list[tuple[int, int]]:
        """Queued Xids as ``(handle_key, xid)``; never waits."""
        out: list[tuple[int, int]] = []
        if self._set is None:
            return out
        for _ in range(XID_DRAIN_LIMIT):
            try:
                data = self._nvml.nvmlEventSetWait(self._set, 0)
            except pynvml.NVMLError_Timeout:
                break  # the queue is empty
            except pynvml.NVMLError as exc:
                self.problems.append(f"Xid events: nvmlEventSetWait: {exc}")
                break
            if int(data.eventType) & self._nvml.nvmlEventTypeXidCriticalError:
                out.append((handle_key(data.device), int(data.eventData)))
        return out

    def close(self) -> None:
        if self._set is not None:
            DeviceQuery(self._nvml).call("nvmlEventSetFree", self._set)
            self._set = None


def sum_present(values: Iterable[float | None]) -> float | None:
    """Sum of the values that were read; None when none was."""
    present = [v for v in values if v is not None]
    return float(sum(present)) if present else None


#: Our field -> the GPM metric (percent) that matches DCGM's profiling field.
GPM_METRICS: tuple[tuple[str, str], ...] = (
    ("gr_engine_active", "NVML_GPM_METRIC_GRAPHICS_UTIL"),  # DCGM_FI_PROF_GR_ENGINE_ACTIVE
    ("tensor_active", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
)


class GpmMetrics:
    """DCGM's profiling ratios of one GPU through NVML's GPM (Hopper and later drivers >= r520).

    GPM metrics are rates between two snapshots of the GPU's counters, so each ``read`` takes a
    snapshot and compares it with the one before (the first is taken by ``start``): a value
    covers the time since the previous poll. A GPU without GPM (Ampere and older, an older
    driver, most vGPUs) leaves the fields absent, never 0.
    """

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.supported = False
        self._prev: Any = None

    def start(self, q: DeviceQuery) -> None:
        support = q.call("nvmlGpmQueryDeviceSupport")
        self.supported = bool(support is not None and support.isSupportedDevice)
        if self.supported:
            self._prev = self._snapshot(q)

    def read(self, q: DeviceQuery, out: dict[str, float]) -> None:
        """Put the ratios (0-1) since the previous snapshot in ``out``; GpuGone passes up."""
        if not self.supported:
            return
        prev, self._prev = self._prev, None
        try:
            self._prev = self._snapshot(q)
            if prev is not None and self._prev is not None:
                self._compare(q, prev, self._prev, out)
        finally:
            if prev is not None:
                self._free(prev)

    def close(self) -> None:
        if self._prev is not None:
            self._free(self._prev)
            self._prev = None

    def _snapshot(self, q: DeviceQuery) -> Any:
        host = DeviceQuery(self._nvml)
        sample = host.call("nvmlGpmSampleAlloc")
        q.problems.extend(host.problems)
        if sample is None:
            return None
        try:
            ok, _ = q.attempt("nvmlGpmSampleGet", sample)
        except GpuGone:
            self._free(sample)
            raise
        if ok:
            return sample
        self._free(sample)
        return None

    def _compare(self, q: DeviceQuery, first: Any, second: Any, out: dict[str, float]) -> None:
        nv = self._nvml
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = first, second
        for i, (_, metric) in enumerate(GPM_METRICS):
            request.metrics[i].metricId = getattr(nv, metric)
        host = DeviceQuery(nv)
        answer = host.call("nvmlGpmMetricsGet", request)
        q.problems.extend(host.problems)
        if answer is None:
            return
        for i, (name, metric) in enumerate(GPM_METRICS):
            entry = answer.metrics[i]
            if entry.nvmlReturn != pynvml.NVML_SUCCESS:
                q.classify(int(entry.nvmlReturn), f"nvmlGpmMetricsGet({metric})")
            elif math.isfinite(entry.value):
                out[name] = min(max(float(entry.value) / 100.0, 0.0), 1.0)  # percent -> ratio

    def _free(self, sample: Any) -> None:
        DeviceQuery(self._nvml).call("nvmlGpmSampleFree", sample)


__all__ = [
    "driver_versions",
    "GONE",
    "GPM_METRICS",
    "NOT_AVAILABLE",
    "NO_LIBRARY",
    "NVMLError",
    "XID_DRAIN_LIMIT",
    "DeviceQuery",
    "GpmMetrics",
    "GpuGone",
    "XidEvents",
    "handle_key",
    "init",
    "real_module",
    "shutdown",
    "sum_present",
    "text",
]
