"""A stand-in for the pynvml module that replays tests/data/nvml/*.json.

``FakeNvml`` has pynvml's function names and signatures for every call the collector makes
(tests/collectors/test_nvml.py checks them against the real module), pynvml's constants (copied
from it), returns pynvml's own ctypes structures, and fails by raising the real
``pynvml.NVMLError_*`` classes, built the way pynvml builds them: ``pynvml.NVMLError(code)``.

Fixture layout (one JSON file per node):

    devices[i]      what ``nvidia-smi -q`` shows for GPU i, in NVML's units (mW, bytes, ns).
                    Any value may be an NVML error name instead ("NOT_SUPPORTED"), which the
                    call raises. ``missing_functions`` raise FunctionNotFound (older driver);
                    ``per_step`` adds to a counter at each ``advance()``.
    faults          {"device", "error", "from_step", "until_step"?, "after_calls"?}: at
                    ``from_step`` the device reads fine for ``after_calls`` more calls, then every
                    call on it raises the error, until ``until_step`` (if any).
    xid_events      {"step", "device", "xid"}: queued for ``nvmlEventSetWait`` from that step on.
    devices[i].power_limit_constraints_mw  [min, max] the power limit may be set to (default:
                    half the enforced limit up to it); ``power_limit_mw`` the limit now.
    devices[i].supported_clocks_mhz  {"<memory MHz>": [graphics MHz, ...]} application clock
                    pairs (nvidia-smi -q -d SUPPORTED_CLOCKS); ``app_clocks_mhz`` {"mem", "sm"}.
    devices[i].set_error  an NVML error name every setter raises: "NO_PERMISSION" (not root),
                    "NOT_SUPPORTED" (a GPU without power or clock control).
    devices[i].gpm  {"graphics_util_pct", "any_tensor_util_pct"}: the GPM metrics between two
                    GPM samples (the later sample's values; a value may be an error name);
                    a device without ``gpm`` says GPM is not supported (pre-Hopper).

Time moves only when the test calls ``advance()``: one step is one collector poll.
"""

from __future__ import annotations

import copy
import ctypes
import json
from pathlib import Path
from typing import Any

import pynvml

DATA = Path(__file__).resolve().parents[1] / "data" / "nvml"

_CONSTANT_PREFIXES = ("NVML_", "nvmlEventType", "nvmlClocksEventReason", "nvmlClocksThrottleReason")
_NVLINK_COUNTERS = {
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY: "replay",
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: "recovery",
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: "crc_flit",
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: "crc_data",
}


def load_fixture(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def _raise(code_name: str) -> None:
    raise pynvml.NVMLError(getattr(pynvml, "NVML_ERROR_" + code_name))


class FakeNvml:
    """One node's NVML, replayed. ``init_error`` makes nvmlInit fail with that NVML code."""

    nvmlMemory_v2 = pynvml.nvmlMemory_v2

    def __init__(self, fixture: str | dict[str, Any], *, init_error: int | None = None) -> None:
        for name in dir(pynvml):
            if name.startswith(_CONSTANT_PREFIXES):
                setattr(self, name, getattr(pynvml, name))
        self.fixture = copy.deepcopy(load_fixture(fixture) if isinstance(fixture, str) else fixture)
        self.devices: list[dict[str, Any]] = self.fixture["devices"]
        self.init_error = init_error
        self.step = 0
        self.initialized = False
        self.shutdowns = 0
        self.wait_timeouts: list[int] = []
        self.calls: list[str] = []
        self._structs = [pynvml.struct_c_nvmlDevice_t() for _ in self.devices]
        self._handles = [pynvml.c_nvmlDevice_t(s) for s in self._structs]
        self._by_address = {ctypes.addressof(s): i for i, s in enumerate(self._structs)}
        self._calls_this_step = [0] * len(self.devices)
        self._event_sets: dict[int, set[int]] = {}
        self._event_set_structs: list[Any] = []
        self._delivered: set[int] = set()
        self._gpm_samples: dict[int, Any] = {}  # address -> [struct, device index or None, values]
        self._tripped: set[int] = set()

    # --- test controls -------------------------------------------------------------------

    def advance(self, steps: int = 1) -> None:
        """Move the node on by ``steps`` polls: counters grow, faults and Xids come due."""
        for _ in range(steps):
            self.step += 1
            for dev in self.devices:
                for key, increase in dev.get("per_step", {}).items():
                    dev[key] += increase
        self._calls_this_step = [0] * len(self.devices)

    # --- internals -----------------------------------------------------------------------

    def _check_init(self) -> None:
        if not self.initialized:
            _raise("UNINITIALIZED")

    def _device(self, handle: Any, function: str) -> dict[str, Any]:
        """The fixture device behind ``handle``, after applying faults and missing functions."""
        self._check_init()
        self.calls.append(function)
        index = self._by_address.get(ctypes.addressof(handle.contents)) if handle else None
        if index is None:
            _raise("INVALID_ARGUMENT")
        assert index is not None
        return self._touch(index, function)

    def _touch(self, index: int, function: str) -> dict[str, Any]:
        self._calls_this_step[index] += 1
        for n, fault in enumerate(self.fixture.get("faults", [])):
            if fault["device"] != index or self.step < fault["from_step"]:
                continue
            if "until_step" in fault and self.step >= fault["until_step"]:
                continue
            # once a GPU has failed it keeps failing, whatever the call count
            if n in self._tripped or self._calls_this_step[index] > fault.get("after_calls", 0):
                self._tripped.add(n)
                _raise(fault["error"])
        dev = self.devices[index]
        if function in dev.get("missing_functions", []):
            _raise("FUNCTION_NOT_FOUND")
        return dev

    @staticmethod
    def _value(value: Any) -> Any:
        if isinstance(value, str) and hasattr(pynvml, "NVML_ERROR_" + value):
            _raise(value)
        return value

    def _get(self, handle: Any, function: str, key: str) -> Any:
        return self._value(self._device(handle, function)[key])

    # --- library -------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._check_init()
        self.initialized = False
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return self._value(self.fixture.get("driver_version", "NOT_SUPPORTED"))

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._check_init()
        return self._value(self.fixture.get("nvml_version", "NOT_SUPPORTED"))

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._check_init()
        return self._value(self.fixture.get("cuda_driver_version", "NOT_SUPPORTED"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.nvmlSystemGetCudaDriverVersion_v2()

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._check_init()
        if not 0 <= index < len(self.devices):
            _raise("INVALID_ARGUMENT")
        self._touch(index, "nvmlDeviceGetHandleByIndex")
        return self._handles[index]

    # --- identity ------------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._get(handle, "nvmlDeviceGetUUID", "uuid")

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._get(handle, "nvmlDeviceGetName", "name")

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        bus_id = self._get(handle, "nvmlDeviceGetPciInfo", "pci_bus_id")
        domain, bus, rest = bus_id.split(":")
        info = pynvml.nvmlPciInfo_t()
        info.busId = bus_id
        info.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{rest}"
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest[:2], 16)
        return info

    # --- thermals, power, clocks, memory -------------------------------------------------

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            _raise("INVALID_ARGUMENT")
        return self._get(handle, "nvmlDeviceGetTemperature", "temperature_gpu_c")

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[int]) -> Any:
        dev = self._device(handle, "nvmlDeviceGetFieldValues")
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for entry, field_id in zip(values, fieldIds, strict=True):
            entry.fieldId = field_id
            raw = dev.get("memory_temp_c") if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP else None
            if raw is None or isinstance(raw, str):
                # per-entry failures come back in nvmlReturn, not as an exception
                entry.nvmlReturn = getattr(pynvml, "NVML_ERROR_" + (raw or "NOT_SUPPORTED"))
            else:
                entry.nvmlReturn = pynvml.NVML_SUCCESS
                entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                entry.value.uiVal = raw
        return values

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._get(handle, "nvmlDeviceGetPowerUsage", "power_usage_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self._get(handle, "nvmlDeviceGetEnforcedPowerLimit", "enforced_power_limit_mw")

    # --- power limit and application clocks (the agent's DVFS) -------------------------

    def _limits(self, dev: dict[str, Any]) -> list[int]:
        enforced = self._value(dev["enforced_power_limit_mw"])
        return self._value(dev.get("power_limit_constraints_mw", [enforced // 2, enforced]))

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any) -> list[int]:
        dev = self._device(handle, "nvmlDeviceGetPowerManagementLimitConstraints")
        return list(self._limits(dev))

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        dev = self._device(handle, "nvmlDeviceGetPowerManagementLimit")
        return self._value(dev.get("power_limit_mw", dev["enforced_power_limit_mw"]))

    def nvmlDeviceSetPowerManagementLimit(self, handle: Any, limit: int) -> None:
        dev = self._device(handle, "nvmlDeviceSetPowerManagementLimit")
        if "set_error" in dev:
            _raise(dev["set_error"])
        low, high = self._limits(dev)
        if not isinstance(limit, int) or not low <= limit <= high:
            _raise("INVALID_ARGUMENT")
        dev["power_limit_mw"] = dev["enforced_power_limit_mw"] = limit

    def _clocks(self, dev: dict[str, Any]) -> dict[str, list[int]]:
        table = dev.get("supported_clocks_mhz")
        if table is None:
            _raise("NOT_SUPPORTED")
        return self._value(table)

    def _default_clocks(self, dev: dict[str, Any]) -> dict[str, int]:
        table = self._clocks(dev)
        mem = max(int(m) for m in table)
        return {"mem": mem, "sm": max(table[str(mem)])}

    def nvmlDeviceGetSupportedMemoryClocks(self, handle: Any) -> list[int]:
        dev = self._device(handle, "nvmlDeviceGetSupportedMemoryClocks")
        return sorted((int(m) for m in self._clocks(dev)), reverse=True)

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: Any, memoryClockMHz: int) -> list[int]:
        dev = self._device(handle, "nvmlDeviceGetSupportedGraphicsClocks")
        table = self._clocks(dev)
        if str(memoryClockMHz) not in table:
            _raise("INVALID_ARGUMENT")
        return sorted(table[str(memoryClockMHz)], reverse=True)

    def nvmlDeviceGetApplicationsClock(self, handle: Any, type: int) -> int:
        dev = self._device(handle, "nvmlDeviceGetApplicationsClock")
        now = dev.get("app_clocks_mhz") or self._default_clocks(dev)
        keys = {pynvml.NVML_CLOCK_SM: "sm", pynvml.NVML_CLOCK_GRAPHICS: "sm",
                pynvml.NVML_CLOCK_MEM: "mem"}  # fmt: skip
        if type not in keys:
            _raise("INVALID_ARGUMENT")
        return int(now[keys[type]])

    def nvmlDeviceSetApplicationsClocks(
        self, handle: Any, maxMemClockMHz: int, maxGraphicsClockMHz: int
    ) -> None:
        dev = self._device(handle, "nvmlDeviceSetApplicationsClocks")
        if "set_error" in dev:
            _raise(dev["set_error"])
        table = self._clocks(dev)
        if maxGraphicsClockMHz not in table.get(str(maxMemClockMHz), []):
            _raise("INVALID_ARGUMENT")
        dev["app_clocks_mhz"] = {"mem": maxMemClockMHz, "sm": maxGraphicsClockMHz}

    def nvmlDeviceResetApplicationsClocks(self, handle: Any) -> None:
        dev = self._device(handle, "nvmlDeviceResetApplicationsClocks")
        if "set_error" in dev:
            _raise(dev["set_error"])
        self._clocks(dev)
        dev.pop("app_clocks_mhz", None)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        return self._get(handle, "nvmlDeviceGetTotalEnergyConsumption", "total_energy_mj")

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        keys = {pynvml.NVML_CLOCK_SM: "clock_sm_mhz", pynvml.NVML_CLOCK_MEM: "clock_mem_mhz"}
        if type not in keys:
            _raise("INVALID_ARGUMENT")
        return self._get(handle, "nvmlDeviceGetClockInfo", keys[type])

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        util = self._get(handle, "nvmlDeviceGetUtilizationRates", "utilization_pct")
        return pynvml.c_nvmlUtilization_t(gpu=util["gpu"], memory=util["memory"])

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        if version:
            mem = self._get(handle, "nvmlDeviceGetMemoryInfo_v2", "memory_bytes")
            if version != pynvml.nvmlMemory_v2:
                _raise("ARGUMENT_VERSION_MISMATCH")
            return pynvml.c_nvmlMemory_v2_t(
                version, *(mem[k] for k in ("total", "reserved", "free", "used"))
            )
        mem = self._get(handle, "nvmlDeviceGetMemoryInfo", "memory_bytes")
        # v1 counts driver-reserved memory as used
        return pynvml.c_nvmlMemory_t(mem["total"], mem["free"], mem["used"] + mem["reserved"])

    # --- memory errors -------------------------------------------------------------------

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        ecc = self._get(handle, "nvmlDeviceGetTotalEccErrors", "ecc")
        kind = {
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected",
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected",
        }.get(errorType)
        scope = {pynvml.NVML_VOLATILE_ECC: "volatile", pynvml.NVML_AGGREGATE_ECC: "aggregate"}.get(
            counterType
        )
        if kind is None or scope is None:
            _raise("INVALID_ARGUMENT")
        return self._value(ecc[f"{kind}_{scope}"])

    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> list[int]:
        pages = self._get(device, "nvmlDeviceGetRetiredPages", "retired_pages")
        cause = {
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: "sbe",
            pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: "dbe",
        }.get(sourceFilter)
        if cause is None:
            _raise("INVALID_ARGUMENT")
        return [int(address, 16) for address in pages[cause]]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int:
        return self._get(device, "nvmlDeviceGetRetiredPagesPendingStatus", "retired_pages_pending")

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        rows = self._get(device, "nvmlDeviceGetRemappedRows", "remapped_rows")
        return (rows["correctable"], rows["uncorrectable"], rows["pending"], rows["failure"])

    # --- PCIe and NVLink -----------------------------------------------------------------

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        return self._get(handle, "nvmlDeviceGetPcieReplayCounter", "pcie_replay_counter")

    def _pcie(self, handle: Any, function: str, key: str) -> int:
        return self._value(self._get(handle, function, "pcie_link")[key])

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._pcie(handle, "nvmlDeviceGetCurrPcieLinkGeneration", "gen")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._pcie(handle, "nvmlDeviceGetMaxPcieLinkGeneration", "gen_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._pcie(handle, "nvmlDeviceGetCurrPcieLinkWidth", "width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._pcie(handle, "nvmlDeviceGetMaxPcieLinkWidth", "width_max")

    def _nvlink(self, device: Any, link: int, function: str) -> dict[str, Any]:
        nvlink = self._get(device, function, "nvlink")
        if not 0 <= link < nvlink["links"]:
            _raise("INVALID_ARGUMENT")  # what NVML answers for a link past the GPU's count
        return nvlink

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        nvlink = self._nvlink(device, link, "nvmlDeviceGetNvLinkState")
        return 0 if link in nvlink.get("down", []) else 1

    def nvmlDeviceGetNvLinkErrorCounter(self, device: Any, link: int, counter: int) -> int:
        nvlink = self._nvlink(device, link, "nvmlDeviceGetNvLinkErrorCounter")
        if counter not in _NVLINK_COUNTERS:
            _raise("INVALID_ARGUMENT")
        return int(nvlink["errors"].get(_NVLINK_COUNTERS[counter], {}).get(str(link), 0))

    # --- throttling ----------------------------------------------------------------------

    def nvmlDeviceGetViolationStatus(self, device: Any, perfPolicyType: int) -> Any:
        times = self._get(device, "nvmlDeviceGetViolationStatus", "violation_ns")
        policy = {
            pynvml.NVML_PERF_POLICY_POWER: "power",
            pynvml.NVML_PERF_POLICY_THERMAL: "thermal",
        }.get(perfPolicyType)
        if policy is None:
            _raise("NOT_SUPPORTED")
        return pynvml.c_nvmlViolationTime_t(
            referenceTime=times["reference"], violationTime=self._value(times[policy])
        )

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._get(handle, "nvmlDeviceGetCurrentClocksEventReasons", "clocks_event_reasons")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._get(
            handle, "nvmlDeviceGetCurrentClocksThrottleReasons", "clocks_event_reasons"
        )

    # --- events --------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> Any:
        self._check_init()
        struct = pynvml.struct_c_nvmlEventSet_t()
        self._event_set_structs.append(struct)
        self._event_sets[ctypes.addressof(struct)] = set()
        return pynvml.c_nvmlEventSet_t(struct)

    def _event_set(self, eventSet: Any) -> set[int]:
        self._check_init()
        registered = self._event_sets.get(ctypes.addressof(eventSet.contents))
        if registered is None:
            _raise("INVALID_ARGUMENT")
        assert registered is not None
        return registered

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        dev = self._device(handle, "nvmlDeviceRegisterEvents")
        registered = self._event_set(eventSet)
        if not dev.get("xid_events_supported", True):
            _raise("NOT_SUPPORTED")
        if eventTypes & pynvml.nvmlEventTypeXidCriticalError:
            registered.add(self.devices.index(dev))

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> Any:
        registered = self._event_set(eventSet)
        self.wait_timeouts.append(timeoutms)
        for n, event in enumerate(self.fixture.get("xid_events", [])):
            if n in self._delivered or event["step"] > self.step:
                continue
            if event["device"] not in registered:
                continue
            self._delivered.add(n)
            data = pynvml.c_nvmlEventData_t()
            data.device = self._handles[event["device"]]
            data.eventType = pynvml.nvmlEventTypeXidCriticalError
            data.eventData = event["xid"]
            return data
        _raise("TIMEOUT")  # nothing queued within timeoutms

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._event_set(eventSet)
        del self._event_sets[ctypes.addressof(eventSet.contents)]

    # --- GPM (profiling metrics) -----------------------------------------------------------

    @property
    def gpm_samples_alive(self) -> int:
        """GPM samples allocated and not freed yet (a leak shows here)."""
        return len(self._gpm_samples)

    def nvmlGpmQueryDeviceSupport(self, device: Any) -> Any:
        dev = self._device(device, "nvmlGpmQueryDeviceSupport")
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = 1 if "gpm" in dev else 0
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._check_init()
        struct = pynvml.struct_c_nvmlGpmSample_t()
        self._gpm_samples[ctypes.addressof(struct)] = [struct, None, None]
        return pynvml.c_nvmlGpmSample_t(struct)

    def _gpm_sample(self, gpmSample: Any) -> list[Any]:
        self._check_init()
        entry = self._gpm_samples.get(ctypes.addressof(gpmSample.contents)) if gpmSample else None
        if entry is None:
            _raise("INVALID_ARGUMENT")
        assert entry is not None
        return entry

    def nvmlGpmSampleGet(self, device: Any, gpmSample: Any) -> Any:
        dev = self._device(device, "nvmlGpmSampleGet")
        entry = self._gpm_sample(gpmSample)
        if "gpm" not in dev:
            _raise("NOT_SUPPORTED")
        entry[1], entry[2] = self.devices.index(dev), dict(dev["gpm"])
        return gpmSample

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._gpm_sample(gpmSample)
        del self._gpm_samples[ctypes.addressof(gpmSample.contents)]

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        first, second = self._gpm_sample(metricsGet.sample1), self._gpm_sample(metricsGet.sample2)
        if metricsGet.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            _raise("ARGUMENT_VERSION_MISMATCH")
        if first[1] is None or first[1] != second[1]:
            _raise("INVALID_ARGUMENT")  # unfilled samples, or samples of two GPUs
        keys = {
            pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: "graphics_util_pct",
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "any_tensor_util_pct",
        }
        for i in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[i]
            value = second[2].get(keys.get(metric.metricId, ""), "NOT_SUPPORTED")
            if isinstance(value, str):
                metric.nvmlReturn = getattr(pynvml, "NVML_ERROR_" + value)
            else:
                metric.nvmlReturn, metric.value = pynvml.NVML_SUCCESS, float(value)
        return metricsGet
