"""nvml:// — this host's GPUs through NVML (nvidia-ml-py).

    open_collector("nvml://")                     every GPU NVML sees, hostname from socket
    open_collector("nvml://?hostname=node7")      the same, filed under another hostname

One ``Sample`` per GPU per ``collect()`` with every catalogue field NVML offers on that GPU
(command line equivalent: ``nvidia-smi -q``); a field the GPU does not support is absent, never
0. A GPU that answers GpuIsLost or GpuRequiresReset gives one ``gpu_lost`` /
``gpu_requires_reset`` event when it goes down and one ``gpu_recovered`` event if it reads again,
while the other GPUs keep being read. Xid errors arrive through NVML's event set as
``Event(kind="xid", code=<Xid>)``. On GPUs with GPM (Hopper and later) ``gr_engine_active`` and
``tensor_active`` (DCGM's profiling ratios) cover the time since the previous poll.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gpuwarden.collectors import libnvml
from gpuwarden.collectors._gpu_state import OK, GpuStates
from gpuwarden.collectors.base import url_options
from gpuwarden.errors import CollectorError, ConfigError
from gpuwarden.readings import screen
from gpuwarden.telemetry import DCGM_EXTRA_FIELDS, Batch, Event, GpuId, NodeInfo, Sample

_MIB = 1024 * 1024

#: (field, NVML memory error type, NVML ECC counter type)
_ECC = (
    ("ecc_sbe_volatile_total", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
    ("ecc_dbe_volatile_total", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
    ("ecc_sbe_aggregate_total", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC"),
    ("ecc_dbe_aggregate_total", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC"),
)
_RETIRED = (
    ("retired_pages_sbe", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
    ("retired_pages_dbe", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
)
#: nvmlDeviceGetRemappedRows returns (correctable, uncorrectable, pending, failure).
_REMAPPED = (
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "remapped_rows_pending",
    "remapped_rows_failure",
)
_PCIE = (
    ("pcie_link_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
    ("pcie_link_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
    ("pcie_link_width", "nvmlDeviceGetCurrPcieLinkWidth"),
    ("pcie_link_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
)
_NVLINK = (
    ("nvlink_crc_flit_errors_total", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
    ("nvlink_crc_data_errors_total", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
    ("nvlink_replay_errors_total", "NVML_NVLINK_ERROR_DL_REPLAY"),
    ("nvlink_recovery_errors_total", "NVML_NVLINK_ERROR_DL_RECOVERY"),
)
_VIOLATIONS = (
    ("thermal_violation_us", "NVML_PERF_POLICY_THERMAL"),
    ("power_violation_us", "NVML_PERF_POLICY_POWER"),
)


#: Catalogue fields nvml:// does not read yet (dcgm-exporter 4.x's extra default counters;
#: their NVML calls are named in the catalogue). Absent from its samples, never 0.
NOT_READ = DCGM_EXTRA_FIELDS


def discover_nvlinks(q: libnvml.DeviceQuery) -> tuple[int, ...]:
    """The NVLink indices this GPU answers for (``nvidia-smi nvlink -s``); () without NVLink.

    Links past the GPU's count answer InvalidArgument and GPUs without NVLink NotSupported;
    both are skipped. Links do not appear at runtime, so the collector asks once per GPU.
    """
    nv = q.nvml
    return tuple(
        link
        for link in range(nv.NVML_NVLINK_MAX_LINKS)
        if q.call("nvmlDeviceGetNvLinkState", link) is not None
    )


def read_values(q: libnvml.DeviceQuery, nvlinks: tuple[int, ...], out: dict[str, float]) -> None:
    """Fill ``out`` with every catalogue field NVML offers on this GPU, in catalogue units.

    ``out`` is filled as the reads go, so when the GPU falls off the bus halfway (``GpuGone``)
    the values read before it are kept.
    """
    nv = q.nvml

    def put(name: str, value: Any, divisor: float = 1.0) -> None:
        if value is not None:
            out[name] = float(value) / divisor

    put("gpu_temp_c", q.call("nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU))
    put("mem_temp_c", q.field_value(nv.NVML_FI_DEV_MEMORY_TEMP, "NVML_FI_DEV_MEMORY_TEMP"))
    put("power_w", q.call("nvmlDeviceGetPowerUsage"), 1000)  # mW
    put("power_limit_w", q.call("nvmlDeviceGetEnforcedPowerLimit"), 1000)  # mW
    put("energy_mj", q.call("nvmlDeviceGetTotalEnergyConsumption"))
    put("sm_clock_mhz", q.call("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM))
    put("mem_clock_mhz", q.call("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_MEM))
    util = q.call("nvmlDeviceGetUtilizationRates")
    if util is not None:
        put("gpu_util_pct", util.gpu)
        put("mem_copy_util_pct", util.memory)
    mem = _memory_info(q)
    if mem is not None:
        put("fb_used_mib", mem.used, _MIB)
        put("fb_free_mib", mem.free, _MIB)
        put("fb_total_mib", mem.total, _MIB)
    for name, error_type, counter_type in _ECC:
        count = q.call(
            "nvmlDeviceGetTotalEccErrors", getattr(nv, error_type), getattr(nv, counter_type)
        )
        put(name, count)
    for name, cause in _RETIRED:
        pages = q.call("nvmlDeviceGetRetiredPages", getattr(nv, cause))
        put(name, None if pages is None else len(pages))
    put("retired_pages_pending", q.call("nvmlDeviceGetRetiredPagesPendingStatus"))
    rows = q.call("nvmlDeviceGetRemappedRows")
    if rows is not None:
        for name, value in zip(_REMAPPED, rows, strict=True):
            put(name, value)
    put("pcie_replay_total", q.call("nvmlDeviceGetPcieReplayCounter"))
    for name, function in _PCIE:
        put(name, q.call(function))
    for name, counter in _NVLINK:
        code = getattr(nv, counter)
        per_link = (q.call("nvmlDeviceGetNvLinkErrorCounter", link, code) for link in nvlinks)
        put(name, libnvml.sum_present(per_link))
    for name, policy in _VIOLATIONS:
        violation = q.call("nvmlDeviceGetViolationStatus", getattr(nv, policy))
        put(name, None if violation is None else violation.violationTime, 1000)  # ns
    # nvmlDeviceGetCurrentClocksEventReasons is the r535 name of the same bitmask.
    reasons = q.call("nvmlDeviceGetCurrentClocksEventReasons")
    if reasons is None:
        reasons = q.call("nvmlDeviceGetCurrentClocksThrottleReasons")
    put("clock_event_reasons", reasons)


def _memory_info(q: libnvml.DeviceQuery) -> Any:
    # The v2 struct leaves driver-reserved memory out of "used", as nvidia-smi shows it;
    # drivers before r510 only have v1, where "used" includes the reserved part.
    version = getattr(q.nvml, "nvmlMemory_v2", None)
    mem = None if version is None else q.call("nvmlDeviceGetMemoryInfo", version=version)
    return mem if mem is not None else q.call("nvmlDeviceGetMemoryInfo")


@dataclass
class _Slot:
    """One NVML device index; ``handle`` is None until NVML hands one out."""

    index: int
    gpu: GpuId
    handle: Any = None
    nvlinks: tuple[int, ...] | None = None
    gpm: libnvml.GpmMetrics | None = None

    @property
    def key(self) -> str:
        return str(self.index)

    @property
    def label(self) -> str:
        return f"gpu {self.index} ({self.gpu.uuid})" if self.gpu.uuid else f"gpu {self.index}"


class NvmlCollector:
    """This host's GPUs through NVML. ``nvml`` is the pynvml module, or a stand-in for tests.

    Raises ``CollectorUnavailable`` when NVML cannot start (no driver, driver/library mismatch).
    """

    def __init__(
        self,
        *,
        nvml: Any = None,
        hostname: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = "nvml://"
        self.hostname = hostname or socket.gethostname()
        self._nvml = nvml if nvml is not None else libnvml.real_module()
        self._clock = clock
        self._states = GpuStates()
        self._closed = False
        count = libnvml.init(self._nvml)
        self._versions = libnvml.driver_versions(self._nvml)  # placement needs both
        self._by_handle: dict[int, _Slot] = {}
        self._slots = [_Slot(i, GpuId(self.hostname, i, "")) for i in range(count)]
        self._open_problems: list[str] = []
        try:
            self._xids = libnvml.XidEvents(self._nvml)
            for slot in self._slots:
                try:
                    self._open(slot, self._open_problems)
                except libnvml.GpuGone:
                    pass  # the first collect() reports it
        except BaseException:
            libnvml.shutdown(self._nvml)  # do not leave NVML initialised behind a failed start
            raise

    @classmethod
    def from_url(cls, url: str) -> NvmlCollector:
        """``nvml://`` or ``nvml://?hostname=NAME``."""
        if urlsplit(url).scheme != "nvml":
            raise ConfigError(f"not an nvml:// URL: {url!r}")
        parts, params = url_options(url, ("hostname",))
        if parts.netloc or parts.path not in ("", "/"):
            raise ConfigError(
                f"{url!r}: nvml:// reads this host's GPUs and takes no host or path; "
                "for another node use dcgm+http://HOST:9400/metrics"
            )
        return cls(hostname=params.get("hostname") or None)

    def collect(self) -> Batch:
        """Read every GPU once, then take the Xids queued since the last call."""
        if self._closed:
            raise CollectorError("this nvml:// collector is closed")
        ts = float(self._clock())
        samples: list[Sample] = []
        events: list[Event] = []
        problems, self._open_problems = self._open_problems, []
        for slot in self._slots:
            self._read(slot, ts, samples, events, problems)
        for key, xid in self._xids.drain():
            events.append(self._xid_event(key, xid, ts))
        problems.extend(self._xids.problems)
        self._xids.problems.clear()
        driver, cuda = self._versions
        node = NodeInfo(ts, self.hostname, driver_version=driver, cuda_driver_version=cuda)
        return screen(
            Batch(
                ts=ts,
                samples=tuple(samples),
                events=tuple(events),
                problems=tuple(problems),
                nodes=(node,) if driver or cuda else (),
            )
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for slot in self._slots:
            if slot.gpm is not None:
                slot.gpm.close()
        self._xids.close()
        libnvml.shutdown(self._nvml)

    def __enter__(self) -> NvmlCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self, slot: _Slot, problems: list[str]) -> None:
        """Get the handle and identity of ``slot``; raises ``GpuGone`` for a lost GPU."""
        query = libnvml.DeviceQuery(self._nvml)
        handle = query.call("nvmlDeviceGetHandleByIndex", slot.index)
        problems.extend(f"{slot.label}: {p}" for p in query.problems)
        if handle is None:
            return
        device = libnvml.DeviceQuery(self._nvml, handle)
        pci = device.call("nvmlDeviceGetPciInfo")
        slot.gpu = GpuId(
            hostname=self.hostname,
            index=slot.index,
            uuid=libnvml.text(device.call("nvmlDeviceGetUUID")),
            pci_bus_id=libnvml.text(None if pci is None else pci.busId),
            model=libnvml.text(device.call("nvmlDeviceGetName")),
        )
        slot.handle = handle
        self._by_handle[libnvml.handle_key(handle)] = slot
        if slot.gpm is None:
            slot.gpm = libnvml.GpmMetrics(self._nvml)
            slot.gpm.start(device)
        problems.extend(f"{slot.label}: {p}" for p in device.problems)
        if not self._xids.register(handle):
            problems.append(f"{slot.label}: Xid events not available from this GPU")

    def _read(
        self,
        slot: _Slot,
        ts: float,
        samples: list[Sample],
        events: list[Event],
        problems: list[str],
    ) -> None:
        values: dict[str, float] = {}
        query: libnvml.DeviceQuery | None = None
        state, detail = OK, ""
        try:
            if slot.handle is None:
                self._open(slot, problems)
            if slot.handle is not None:
                query = libnvml.DeviceQuery(self._nvml, slot.handle)
                if slot.nvlinks is None:
                    slot.nvlinks = discover_nvlinks(query)
                read_values(query, slot.nvlinks, values)
                if slot.gpm is not None:
                    slot.gpm.read(query, values)
        except libnvml.GpuGone as gone:
            state, detail = gone.kind, gone.detail
            problems.append(f"{slot.label}: {gone.detail}")
        if slot.handle is None and state == OK:
            return  # could not open it for another reason, already named in problems
        event = self._states.observe(slot.key, slot.gpu, state, ts, detail)
        if event is not None:
            events.append(event)
        if values:
            samples.append(Sample(ts=ts, gpu=slot.gpu, values=values))
        if query is not None:
            problems.extend(f"{slot.label}: {p}" for p in query.problems)

    def _xid_event(self, key: int, xid: int, ts: float) -> Event:
        slot = self._by_handle.get(key)
        if slot is None:
            gpu = GpuId(self.hostname, -1, "")
            return Event(ts=ts, gpu=gpu, kind="xid", code=xid, detail="from an unknown device")
        return Event(ts=ts, gpu=slot.gpu, kind="xid", code=xid)
