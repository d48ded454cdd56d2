"""The field catalogue and the records every layer passes around.

Each telemetry field is declared once in ``FIELDS``: our name (unit in the name), the
dcgm-exporter metric it maps to (plus older names some exporters still use), where NVML and
``nvidia-smi --query-gpu`` read it, whether it is a cumulative counter or a gauge, and its unit.
Collectors, the store schema, the exporter and ingest all derive from this list, so adding a
field here is the whole change.

Missing is never zero: a field a GPU does not support, or a sample that did not arrive, is simply
absent from ``Sample.values`` (NaN in a frame). Each field also declares what a reading of it can
physically be: its DCGM value type (which blank sentinels apply), the sensor it needs and its
plausible range (``Bounds``); ``gpuwarden.readings`` turns anything else into missing, counted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

Kind = Literal["counter", "gauge"]
#: A DCGM field's value type, which says which blank sentinels it can carry: DCGM_FT_INT64 and
#: DCGM_FT_DOUBLE in ``dcgm_fields.cpp``; int32 is the family of DCGM's 32-bit struct members.
DcgmType = Literal["int32", "int64", "fp64"]
#: A board part a field needs: "hbm" is an HBM memory temperature sensor (GDDR boards have none).
Sensor = Literal["", "hbm"]


@dataclass(frozen=True)
class Bounds:
    """The readings a field can physically take; any other reading is missing (out of range).

    ``lo``..``hi`` inclusive; ``allowed``, when not empty, lists the only values possible (PCIe
    link widths); ``per_tdp``, when set, makes ``hi`` that many times the board's TDP in W
    (``gpuwarden.readings.tdp_w``).
    """

    lo: float = 0.0
    hi: float = math.inf
    allowed: frozenset[float] = frozenset()
    per_tdp: float | None = None


#: Counters, sizes and bitmasks: never negative.
NON_NEGATIVE = Bounds()
_TEMP = Bounds(-10.0, 130.0)
_PCT = Bounds(0.0, 100.0)
_RATIO = Bounds(0.0, 1.0)
_BOOL = Bounds(allowed=frozenset({0.0, 1.0}))
_POWER = Bounds(per_tdp=2.0)
_PCIE_GEN = Bounds(allowed=frozenset({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}))
_PCIE_WIDTH = Bounds(allowed=frozenset({1.0, 2.0, 4.0, 8.0, 16.0, 32.0}))


@dataclass(frozen=True)
class Field:
    """One telemetry field.

    ``resets``: a cumulative counter that starts again from 0 when the driver reloads or the
    node reboots (volatile ECC, PCIe replays, NVLink errors, energy). Aggregate ECC counts,
    retired pages and remapped rows live in the InfoROM and survive. Rates over a counter must
    therefore take increases, never differences of raw values.
    """

    name: str
    dcgm: str
    kind: Kind
    unit: str
    help: str
    nvml: str
    smi: str | None = None
    dcgm_aliases: tuple[str, ...] = ()
    resets: bool = False
    #: DCGM's value type for ``dcgm`` (NVIDIA/DCGM dcgmlib/src/dcgm_fields.cpp, DCGM 4.5.3).
    dcgm_type: DcgmType = "int64"
    bounds: Bounds = NON_NEGATIVE
    sensor: Sensor = ""


FIELDS: tuple[Field, ...] = (
    # Thermals and power
    Field(
        "gpu_temp_c",
        "DCGM_FI_DEV_GPU_TEMP",
        "gauge",
        "C",
        "GPU core temperature.",
        "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
        "temperature.gpu",
        bounds=_TEMP,
    ),
    Field(
        "mem_temp_c",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "gauge",
        "C",
        "HBM (memory) temperature.",
        "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)",
        "temperature.memory",
        bounds=_TEMP,
        sensor="hbm",
    ),
    Field(
        "power_w",
        "DCGM_FI_DEV_POWER_USAGE",
        "gauge",
        "W",
        "Board power draw.",
        "nvmlDeviceGetPowerUsage (mW)",
        "power.draw",
        dcgm_type="fp64",
        bounds=_POWER,
    ),
    Field(
        "power_limit_w",
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "gauge",
        "W",
        "Enforced power limit.",
        "nvmlDeviceGetEnforcedPowerLimit (mW)",
        "enforced.power.limit",
        dcgm_type="fp64",
        bounds=_POWER,
    ),
    Field(
        "energy_mj",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "mJ",
        "Energy consumed since the driver last loaded.",
        "nvmlDeviceGetTotalEnergyConsumption (mJ)",
        None,
        resets=True,
    ),
    # Clocks, utilisation, memory
    Field(
        "sm_clock_mhz",
        "DCGM_FI_DEV_SM_CLOCK",
        "gauge",
        "MHz",
        "SM clock.",
        "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
        "clocks.sm",
        bounds=Bounds(0.0, 5000.0),
    ),
    Field(
        "mem_clock_mhz",
        "DCGM_FI_DEV_MEM_CLOCK",
        "gauge",
        "MHz",
        "Memory clock.",
        "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)",
        "clocks.mem",
        bounds=Bounds(0.0, 20000.0),
    ),
    Field(
        "gpu_util_pct",
        "DCGM_FI_DEV_GPU_UTIL",
        "gauge",
        "%",
        "GPU utilisation.",
        "nvmlDeviceGetUtilizationRates().gpu",
        "utilization.gpu",
        bounds=_PCT,
    ),
    Field(
        "mem_copy_util_pct",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gauge",
        "%",
        "Memory controller utilisation.",
        "nvmlDeviceGetUtilizationRates().memory",
        "utilization.memory",
        bounds=_PCT,
    ),
    # DCGM's profiling fields. NVML has them as GPM metrics (Hopper and later, in percent);
    # nvidia-smi --query-gpu has no column for them, so smi:// leaves them absent.
    Field(
        "gr_engine_active",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "ratio",
        "Fraction of time the graphics/compute engine was active (0-1).",
        "nvmlGpmMetricsGet(NVML_GPM_METRIC_GRAPHICS_UTIL) / 100",
        dcgm_type="fp64",
        bounds=_RATIO,
    ),
    Field(
        "tensor_active",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "ratio",
        "Fraction of cycles the tensor pipes were active (0-1).",
        "nvmlGpmMetricsGet(NVML_GPM_METRIC_ANY_TENSOR_UTIL) / 100",
        dcgm_type="fp64",
        bounds=_RATIO,
    ),
    Field(
        "fb_used_mib",
        "DCGM_FI_DEV_FB_USED",
        "gauge",
        "MiB",
        "Framebuffer memory used.",
        "nvmlDeviceGetMemoryInfo().used",
        "memory.used",
    ),
    Field(
        "fb_free_mib",
        "DCGM_FI_DEV_FB_FREE",
        "gauge",
        "MiB",
        "Framebuffer memory free.",
        "nvmlDeviceGetMemoryInfo().free",
        "memory.free",
    ),
    Field(
        "fb_total_mib",
        "DCGM_FI_DEV_FB_TOTAL",
        "gauge",
        "MiB",
        "Framebuffer memory total.",
        "nvmlDeviceGetMemoryInfo().total",
        "memory.total",
    ),
    # ECC
    Field(
        "ecc_sbe_volatile_total",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "errors",
        "Single-bit (corrected) ECC errors since the driver loaded.",
        "nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE_ECC)",
        "ecc.errors.corrected.volatile.total",
        resets=True,
    ),
    Field(
        "ecc_dbe_volatile_total",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "errors",
        "Double-bit (uncorrected) ECC errors since the driver loaded.",
        "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE_ECC)",
        "ecc.errors.uncorrected.volatile.total",
        resets=True,
    ),
    Field(
        "ecc_sbe_aggregate_total",
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "errors",
        "Single-bit ECC errors over the GPU's life (InfoROM).",
        "nvmlDeviceGetTotalEccErrors(CORRECTED, AGGREGATE_ECC)",
        "ecc.errors.corrected.aggregate.total",
    ),
    Field(
        "ecc_dbe_aggregate_total",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "errors",
        "Double-bit ECC errors over the GPU's life (InfoROM).",
        "nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE_ECC)",
        "ecc.errors.uncorrected.aggregate.total",
    ),
    # Page retirement (pre-Ampere) and row remapping (Ampere and later)
    Field(
        "retired_pages_sbe",
        "DCGM_FI_DEV_RETIRED_SBE",
        "counter",
        "pages",
        "Pages retired for multiple single-bit errors.",
        "nvmlDeviceGetRetiredPages(MULTIPLE_SINGLE_BIT_ECC_ERRORS)",
        "retired_pages.single_bit_ecc.count",
    ),
    Field(
        "retired_pages_dbe",
        "DCGM_FI_DEV_RETIRED_DBE",
        "counter",
        "pages",
        "Pages retired for a double-bit error.",
        "nvmlDeviceGetRetiredPages(DOUBLE_BIT_ECC_ERROR)",
        "retired_pages.double_bit.count",
    ),
    Field(
        "retired_pages_pending",
        "DCGM_FI_DEV_RETIRED_PENDING",
        "gauge",
        "bool",
        "A page retirement waits for the next reset.",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "retired_pages.pending",
        bounds=_BOOL,
    ),
    Field(
        "remapped_rows_correctable",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "rows",
        "Rows remapped for correctable errors.",
        "nvmlDeviceGetRemappedRows()[0]",
        "remapped_rows.correctable",
    ),
    Field(
        "remapped_rows_uncorrectable",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "rows",
        "Rows remapped for uncorrectable errors.",
        "nvmlDeviceGetRemappedRows()[1]",
        "remapped_rows.uncorrectable",
    ),
    Field(
        "remapped_rows_pending",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "bool",
        "A row remap waits for the next reset.",
        "nvmlDeviceGetRemappedRows()[2]",
        "remapped_rows.pending",
        bounds=_BOOL,
    ),
    Field(
        "remapped_rows_failure",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "bool",
        "A row remap failed: NVIDIA says replace the GPU.",
        "nvmlDeviceGetRemappedRows()[3]",
        "remapped_rows.failure",
        bounds=_BOOL,
    ),
    # PCIe
    Field(
        "pcie_replay_total",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "counter",
        "replays",
        "PCIe replays (link-level retransmissions).",
        "nvmlDeviceGetPcieReplayCounter",
        None,
        resets=True,
    ),
    Field(
        "pcie_link_gen",
        "DCGM_FI_DEV_PCIE_LINK_GEN",
        "gauge",
        "gen",
        "Current PCIe link generation.",
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "pcie.link.gen.current",
        bounds=_PCIE_GEN,
    ),
    Field(
        "pcie_link_gen_max",
        "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
        "gauge",
        "gen",
        "Maximum PCIe link generation of GPU and slot.",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "pcie.link.gen.max",
        bounds=_PCIE_GEN,
    ),
    Field(
        "pcie_link_width",
        "DCGM_FI_DEV_PCIE_LINK_WIDTH",
        "gauge",
        "lanes",
        "Current PCIe link width.",
        "nvmlDeviceGetCurrPcieLinkWidth",
        "pcie.link.width.current",
        bounds=_PCIE_WIDTH,
    ),
    Field(
        "pcie_link_width_max",
        "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH",
        "gauge",
        "lanes",
        "Maximum PCIe link width.",
        "nvmlDeviceGetMaxPcieLinkWidth",
        "pcie.link.width.max",
        bounds=_PCIE_WIDTH,
    ),
    # NVLink (summed over links)
    Field(
        "nvlink_crc_flit_errors_total",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "errors",
        "NVLink flow-control CRC errors, all links.",
        "nvmlDeviceGetNvLinkErrorCounter(link, NVML_NVLINK_ERROR_DL_CRC_FLIT) summed",
        None,
        resets=True,
    ),
    Field(
        "nvlink_crc_data_errors_total",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "counter",
        "errors",
        "NVLink data CRC errors, all links.",
        "nvmlDeviceGetNvLinkErrorCounter(link, NVML_NVLINK_ERROR_DL_CRC_DATA) summed",
        None,
        resets=True,
    ),
    Field(
        "nvlink_replay_errors_total",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "counter",
        "errors",
        "NVLink replays, all links.",
        "nvmlDeviceGetNvLinkErrorCounter(link, NVML_NVLINK_ERROR_DL_REPLAY) summed",
        None,
        resets=True,
    ),
    Field(
        "nvlink_recovery_errors_total",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "counter",
        "errors",
        "NVLink link recoveries, all links.",
        "nvmlDeviceGetNvLinkErrorCounter(link, NVML_NVLINK_ERROR_DL_RECOVERY) summed",
        None,
        resets=True,
    ),
    # Throttling
    Field(
        "thermal_violation_us",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "counter",
        "us",
        "Time clocks were held down by thermal limits.",
        "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_THERMAL) (ns)",
        None,
        resets=True,
    ),
    Field(
        "power_violation_us",
        "DCGM_FI_DEV_POWER_VIOLATION",
        "counter",
        "us",
        "Time clocks were held down by the power limit.",
        "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_POWER) (ns)",
        None,
        resets=True,
    ),
    Field(
        "clock_event_reasons",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "gauge",
        "bitmask",
        "Why clocks are below their maximum (nvmlClocksEventReason* bits).",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "clocks_event_reasons.active",
        dcgm_aliases=("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",),
    ),
    # Added from dcgm-exporter 4.x's default counters (etc/default-counters.csv).
    Field(
        "enc_util_pct",
        "DCGM_FI_DEV_ENC_UTIL",
        "gauge",
        "%",
        "Video encoder utilisation.",
        "nvmlDeviceGetEncoderUtilization",
    ),
    Field(
        "dec_util_pct",
        "DCGM_FI_DEV_DEC_UTIL",
        "gauge",
        "%",
        "Video decoder utilisation.",
        "nvmlDeviceGetDecoderUtilization",
    ),
    Field(
        "fb_reserved_mib",
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "MiB",
        "Framebuffer memory reserved by the driver.",
        "nvmlDeviceGetMemoryInfo_v2().reserved",
    ),
    Field(
        "dram_active",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "ratio",
        "Fraction of cycles the device memory interface was busy (0-1).",
        "nvmlGpmMetricsGet(NVML_GPM_METRIC_DRAM_BW_UTIL) / 100",
    ),
    Field(
        "pcie_tx_bytes_per_s",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "B/s",
        "PCIe bytes transmitted per second, headers included.",
        "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES) (KB/s)",
    ),
    Field(
        "pcie_rx_bytes_per_s",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "B/s",
        "PCIe bytes received per second, headers included.",
        "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES) (KB/s)",
    ),
    Field(
        "dcgm_health",
        "DCGM_EXP_GPU_HEALTH_STATUS",
        "gauge",
        "status",
        "DCGM's health check, worst of its watches: 0 pass, 10 warn, 20 fail (dcgm-exporter 4.x).",
        "none (DCGM only: dcgmHealthCheck)",
    ),
)

FIELDS_BY_NAME: Mapping[str, Field] = {f.name: f for f in FIELDS}
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)
COUNTER_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.kind == "counter")
RESETTING_COUNTERS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.resets)


def _dcgm_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for f in FIELDS:
        for name in (f.dcgm, *f.dcgm_aliases):
            index[name] = f.name
    return index


#: dcgm-exporter metric name (current or legacy) -> our field name.
FIELD_BY_DCGM: Mapping[str, str] = _dcgm_index()

#: dcgm-exporter's "last Xid seen" gauge; we keep Xids as events instead.
DCGM_XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
#: dcgm-exporter 4.x: Xids per ``xid`` label within the last ``window_size_in_ms``.
DCGM_XID_COUNT_METRIC = "DCGM_EXP_XID_ERRORS_COUNT"
#: dcgm-exporter 4.x: DCGM's health check per ``health_watch``; its worst is ``dcgm_health``.
DCGM_HEALTH_METRIC = "DCGM_EXP_GPU_HEALTH_STATUS"
#: Fields that are the MIG instance's own under MIG (memory and profiling); every other field
#: is the whole GPU's and is kept on the parent, once.
MIG_INSTANCE_FIELDS: frozenset[str] = frozenset(
    {
        "fb_used_mib",
        "fb_free_mib",
        "fb_total_mib",
        "fb_reserved_mib",
        "gr_engine_active",
        "tensor_active",
        "dram_active",
        "pcie_tx_bytes_per_s",
        "pcie_rx_bytes_per_s",
    }
)
#: dcgm-exporter 4.x default counters added to the catalogue that only dcgm+http:// reads yet
#: (nvml:// and the simulator leave them absent; nvidia-smi's columns are not queried).
DCGM_EXTRA_FIELDS: frozenset[str] = frozenset(
    {
        "enc_util_pct",
        "dec_util_pct",
        "fb_reserved_mib",
        "dram_active",
        "pcie_tx_bytes_per_s",
        "pcie_rx_bytes_per_s",
        "dcgm_health",
    }
)
#: ``Event.detail`` of an event whose time nobody knows (an Xid already there when a collector
#: started): it is kept for the record, and never makes a GPU unhealthy by itself.
TIME_UNKNOWN = "seen at first scrape; time unknown"


def time_unknown(detail: str) -> bool:
    """Whether an event's detail marks it as of unknown time (``TIME_UNKNOWN``)."""
    return detail.startswith(TIME_UNKNOWN)


def mig_uuid(parent_uuid: str, gpu_instance: str) -> str:
    """The key of a MIG instance: ``MIG-<parent uuid>/<GPU_I_ID>`` (dcgm-exporter gives MIG
    series their parent's UUID, so the instance id makes them distinct)."""
    return f"MIG-{parent_uuid}/{gpu_instance}"


def mig_parent(uuid: str) -> str:
    """The parent GPU's uuid of a ``mig_uuid`` key, or "" for a whole GPU."""
    if not uuid.startswith("MIG-") or "/" not in uuid:
        return ""
    return uuid[4:].rpartition("/")[0]


# clocks_event_reasons bits (nvml.h nvmlClocksEventReason*)
CLOCK_EVENT_GPU_IDLE = 0x1
CLOCK_EVENT_APP_CLOCKS = 0x2
CLOCK_EVENT_SW_POWER_CAP = 0x4
CLOCK_EVENT_HW_SLOWDOWN = 0x8
CLOCK_EVENT_SYNC_BOOST = 0x10
CLOCK_EVENT_SW_THERMAL = 0x20
CLOCK_EVENT_HW_THERMAL = 0x40
CLOCK_EVENT_HW_POWER_BRAKE = 0x80


class GpuId(NamedTuple):
    """Who a GPU is. ``uuid`` changes when the board is swapped; ``(hostname, index)`` is the slot.

    ``rack`` is optional placement metadata (from the simulator, a config mapping or a
    scheduler label) used to compare a GPU with its neighbours.
    """

    hostname: str
    index: int  # type: ignore[assignment]  # shadows tuple.index; the domain name wins
    uuid: str
    pci_bus_id: str = ""
    model: str = ""
    rack: str = ""


_PCI_BUS_ID = re.compile(
    r"^(?:PCI:)?(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{1,2}):"
    r"(?P<device>[0-9A-Fa-f]{1,2})(?:\.(?P<function>[0-7]))?$"
)


def canonical_pci_bus_id(text: str) -> str:
    """One spelling of a PCI address, ``0000:cb:00.0`` (domain:bus:device.function, lower case,
    the 4-digit domain Linux's sysfs uses), from any of the ways sources write it:

        kernel log (NVRM Xid)   PCI:0000:cb:00       no function: the GPU's is always 0
        NVML, DCGM              00000000:CB:00.0     8-digit domain, upper case
        nvidia-smi, lspci       0000:cb:00.0, cb:00.0

    An empty string stays empty (the source did not say); anything else that is not a PCI
    address raises ``ValueError``."""
    text = text.strip()
    if not text:
        return ""
    m = _PCI_BUS_ID.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a PCI bus id such as 0000:cb:00.0")
    domain = int(m.group("domain") or "0", 16)
    return (
        f"{domain:04x}:{int(m.group('bus'), 16):02x}:{int(m.group('device'), 16):02x}"
        f".{m.group('function') or '0'}"
    )


@dataclass(frozen=True)
class Sample:
    """One reading of one GPU at ``ts`` (Unix seconds, UTC). Absent fields were not read."""

    ts: float
    gpu: GpuId
    values: Mapping[str, float] = field(default_factory=dict)


EventKind = Literal[
    "xid", "gpu_lost", "gpu_requires_reset", "gpu_recovered", "sxid", "xid_unmatched"
]
#: ``sxid``: an NVSwitch's SXid, filed under the switch (``switch_id``), not a GPU.
#: ``xid_unmatched``: a kernel-log Xid whose PCI bus id matched no known GPU (``pci_id``).
EVENT_KINDS: tuple[str, ...] = (
    "xid", "gpu_lost", "gpu_requires_reset", "gpu_recovered", "sxid", "xid_unmatched",
    "gpu_missing", "gpu_reporting",
)  # fmt: skip


@dataclass(frozen=True)
class Event:
    """Something that happened to a GPU at ``ts``: an Xid (``code`` is the Xid number), or
    the GPU falling off the bus / needing a reset. Kept as events, never as a last-value gauge."""

    ts: float
    gpu: GpuId
    kind: str
    code: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class Failure:
    """A GPU failure: ground truth from the simulator, or a user's ``failures`` file.

    ``precursor_start_ts`` is when the first warning signs began (simulator only; None for
    sudden failures and for real records). ``repair_s`` is how long the slot stayed empty.
    """

    ts: float
    gpu: GpuId
    kind: str
    precursor_start_ts: float | None = None
    repair_s: float | None = None
    xid: int | None = None


RejectReason = Literal["sentinel", "no_sensor", "out_of_range", "not_a_number"]
#: Why a reading was thrown away: a DCGM blank sentinel, a sensor the board does not have, a
#: value outside the field's ``Bounds`` (infinity included), or a file's cell that is no number.
REJECT_REASONS: tuple[str, ...] = ("sentinel", "no_sensor", "out_of_range", "not_a_number")


@dataclass(frozen=True)
class Rejection:
    """A reading of ``field`` that was impossible, left out of the GPU's sample (missing), and
    counted: ``gpuwarden_rejected_readings_total``, the store's rejections, ``summary``."""

    ts: float
    gpu: GpuId
    field: str
    reason: str
    value: float


@dataclass(frozen=True)
class Batch:
    """What one ``Collector.collect()`` call returns. ``problems`` names the parts of the source
    that could not be read this time (an endpoint down, a GPU that timed out): the rest is kept.
    ``rejected``: readings left out as impossible (``gpuwarden.readings.screen``); ``screened``
    says the samples were checked already, so screening again is skipped."""

    ts: float
    samples: tuple[Sample, ...] = ()
    events: tuple[Event, ...] = ()
    problems: tuple[str, ...] = ()
    assignments: tuple[Assignment, ...] = ()
    nodes: tuple[NodeInfo, ...] = ()
    rejected: tuple[Rejection, ...] = ()
    screened: bool = False


@dataclass(frozen=True)
class Assignment:
    """Who a GPU (or MIG instance) was given to at ``ts``: Kubernetes' namespace, pod and
    container (dcgm-exporter's labels). All three empty means unassigned. A GPU shared by
    several pods has one record per pod at the same ``ts``."""

    ts: float
    gpu: GpuId
    namespace: str = ""
    pod: str = ""
    container: str = ""


@dataclass(frozen=True)
class NodeInfo:
    """What a node runs, as a collector read it at ``ts``; "" is unknown."""

    ts: float
    hostname: str
    driver_version: str = ""
    cuda_driver_version: str = ""


#: Identity columns of a wide sample frame (one row per GPU per timestamp); the field columns
#: follow, float64, NaN for missing. ``ts`` is Unix seconds (float64).
FRAME_ID_COLUMNS: tuple[str, ...] = ("ts", "hostname", "gpu", "uuid", "model", "pci_bus_id")


def samples_to_frame(samples: list[Sample] | tuple[Sample, ...]):  # -> pandas.DataFrame
    """Samples -> the wide frame every store and model reads (NaN where a field is absent)."""
    import numpy as np
    import pandas as pd

    n = len(samples)
    cols: dict[str, object] = {
        "ts": np.fromiter((s.ts for s in samples), dtype=np.float64, count=n),
        "hostname": [s.gpu.hostname for s in samples],
        "gpu": np.fromiter((s.gpu.index for s in samples), dtype=np.int64, count=n),
        "uuid": [s.gpu.uuid for s in samples],
        "model": [s.gpu.model for s in samples],
        "pci_bus_id": [s.gpu.pci_bus_id for s in samples],
    }
    for name in FIELD_NAMES:
        cols[name] = np.fromiter(
            (s.values.get(name, np.nan) for s in samples), dtype=np.float64, count=n
        )
    return pd.DataFrame(cols)
