"""Reading ``nvidia-smi -q`` text (what people paste into tickets and keep from bug reports).

``read_query_text(text, hostname=...)`` gives a screened ``Batch``: one ``Sample`` per
``GPU <bus id>`` block, timed by the log's ``Timestamp`` (``Tue Jul 14 08:12:53 2026``, local
time, read in ``tz``, UTC unless told), and the node's ``Driver Version`` and ``CUDA Version``
as a ``NodeInfo``. The GPU is its ``Product Name``, ``GPU UUID``, ``Bus Id`` and its place in
the listing (nvidia-smi lists GPUs in index order). Values lose their unit (``59 C``,
``629.45 W``, ``16x``); ``N/A`` and the like are absent; ``Yes``/``No`` read 1/0.

Read, by section path (a MIG Device block's own sections are not the GPU's):

    Temperature / GPU Current Temp, Memory Current Temp
    GPU Power Readings (older: Power Readings) / Average Power Draw (older: Power Draw),
        Current Power Limit (older: Enforced Power Limit)
    Clocks / SM, Memory;  Utilization / GPU, Memory;  FB Memory Usage / Total, Used, Free
    ECC Errors / Volatile, Aggregate: the sum of SRAM Correctable and DRAM Correctable, and of
        SRAM Uncorrectable (Parity, SEC-DED, or one line on older drivers) and DRAM
        Uncorrectable (absent unless every part reads); older drivers' Single Bit / Double Bit
        ``Total``
    Retired Pages / Single Bit ECC, Double Bit ECC, Pending Page Blacklist
    Remapped Rows / Correctable Error, Uncorrectable Error, Pending, Remapping Failure Occurred
        (``Remapped Rows : N/A`` on one line, as under MIG and on consumer boards: absent)
    PCI / GPU Link Info / PCIe Generation / Current, Max; Link Width / Current, Max;
        Replays Since Reset (the PCIe replay counter; NVML's nvmlDeviceGetPcieReplayCounter)
    Clocks Event Reasons (older: Clocks Throttle Reasons): each Active line's bit of
        ``clock_event_reasons`` (nvmlClocksEventReason*); an N/A line leaves the mask unknown
    Clocks Event Reasons Counters / SW Power Capping (newer drivers): ``power_violation_us``,
        the counter DCGM's power violation field reads (the thermal slowdown counters are
        other counters than its thermal violation field's, so that field stays absent)

A value that is neither a number nor a known marker is named in ``problems``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo

from gpuwarden.collectors.smi_cells import normalise_bus_id, parse_cell
from gpuwarden.readings import screen
from gpuwarden.telemetry import (
    CLOCK_EVENT_APP_CLOCKS,
    CLOCK_EVENT_GPU_IDLE,
    CLOCK_EVENT_HW_POWER_BRAKE,
    CLOCK_EVENT_HW_SLOWDOWN,
    CLOCK_EVENT_HW_THERMAL,
    CLOCK_EVENT_SW_POWER_CAP,
    CLOCK_EVENT_SW_THERMAL,
    CLOCK_EVENT_SYNC_BOOST,
    Batch,
    GpuId,
    NodeInfo,
    Sample,
)

_PATHS: dict[tuple[str, ...], str] = {
    ("Temperature", "GPU Current Temp"): "gpu_temp_c",
    ("Temperature", "Memory Current Temp"): "mem_temp_c",
    ("GPU Power Readings", "Average Power Draw"): "power_w",
    ("GPU Power Readings", "Power Draw"): "power_w",
    ("Power Readings", "Power Draw"): "power_w",
    ("GPU Power Readings", "Current Power Limit"): "power_limit_w",
    ("GPU Power Readings", "Enforced Power Limit"): "power_limit_w",
    ("Power Readings", "Enforced Power Limit"): "power_limit_w",
    ("Clocks", "SM"): "sm_clock_mhz",
    ("Clocks", "Memory"): "mem_clock_mhz",
    ("Utilization", "GPU"): "gpu_util_pct",
    ("Utilization", "Memory"): "mem_copy_util_pct",
    ("FB Memory Usage", "Total"): "fb_total_mib",
    ("FB Memory Usage", "Used"): "fb_used_mib",
    ("FB Memory Usage", "Free"): "fb_free_mib",
    ("ECC Errors", "Volatile", "Single Bit", "Total"): "ecc_sbe_volatile_total",
    ("ECC Errors", "Volatile", "Double Bit", "Total"): "ecc_dbe_volatile_total",
    ("ECC Errors", "Aggregate", "Single Bit", "Total"): "ecc_sbe_aggregate_total",
    ("ECC Errors", "Aggregate", "Double Bit", "Total"): "ecc_dbe_aggregate_total",
    ("Retired Pages", "Single Bit ECC"): "retired_pages_sbe",
    ("Retired Pages", "Double Bit ECC"): "retired_pages_dbe",
    ("Retired Pages", "Pending Page Blacklist"): "retired_pages_pending",
    ("Retired Pages", "Pending"): "retired_pages_pending",
    ("Remapped Rows", "Correctable Error"): "remapped_rows_correctable",
    ("Remapped Rows", "Uncorrectable Error"): "remapped_rows_uncorrectable",
    ("Remapped Rows", "Pending"): "remapped_rows_pending",
    ("Remapped Rows", "Remapping Failure Occurred"): "remapped_rows_failure",
    ("PCI", "GPU Link Info", "PCIe Generation", "Current"): "pcie_link_gen",
    ("PCI", "GPU Link Info", "PCIe Generation", "Max"): "pcie_link_gen_max",
    ("PCI", "GPU Link Info", "Link Width", "Current"): "pcie_link_width",
    ("PCI", "GPU Link Info", "Link Width", "Max"): "pcie_link_width_max",
    ("PCI", "Replays Since Reset"): "pcie_replay_total",
    # cumulative microseconds: nvml.h defines NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP as
    # NVML_FI_DEV_PERF_POLICY_POWER, the counter DCGM_FI_DEV_POWER_VIOLATION reads. The SW and
    # HW thermal slowdown counters have field ids of their own, not NVML_PERF_POLICY_THERMAL's
    # (DCGM_FI_DEV_THERMAL_VIOLATION), so they are not taken for it.
    ("Clocks Event Reasons Counters", "SW Power Capping"): "power_violation_us",
}
#: ECC totals of newer drivers: the field -> the (section, key)s that add up to it.
_ECC_PARTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ecc_sbe_volatile_total": ("Volatile", ("SRAM Correctable", "DRAM Correctable")),
    "ecc_sbe_aggregate_total": ("Aggregate", ("SRAM Correctable", "DRAM Correctable")),
    "ecc_dbe_volatile_total": ("Volatile", ("SRAM Uncorrectable", "DRAM Uncorrectable")),
    "ecc_dbe_aggregate_total": ("Aggregate", ("SRAM Uncorrectable", "DRAM Uncorrectable")),
}
_LINE = re.compile(r"^(?P<indent> *)(?P<key>[^:]*?)\s*(?::\s?(?P<value>.*))?$")
#: ``Clocks Event Reasons`` (``Clocks Throttle Reasons`` on older drivers): each line's
#: nvmlClocksEventReason bit, Active or Not Active; together the ``clock_event_reasons`` mask
_CLOCK_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
_CLOCK_BITS: dict[str, int] = {
    "Idle": CLOCK_EVENT_GPU_IDLE,
    "Applications Clocks Setting": CLOCK_EVENT_APP_CLOCKS,
    "SW Power Cap": CLOCK_EVENT_SW_POWER_CAP,
    "HW Slowdown": CLOCK_EVENT_HW_SLOWDOWN,
    "Sync Boost": CLOCK_EVENT_SYNC_BOOST,
    "SW Thermal Slowdown": CLOCK_EVENT_SW_THERMAL,
    "HW Thermal Slowdown": CLOCK_EVENT_HW_THERMAL,
    "HW Power Brake Slowdown": CLOCK_EVENT_HW_POWER_BRAKE,
    "Display Clock Setting": 0x100,  # nvmlClocksEventReasonDisplayClockSetting
}
_UNIT = re.compile(r"^(?P<num>[-+]?[0-9.]+)\s*(?:C|W|MHz|MiB|%|x|us|bank\(s\))$")
_GPU = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")


def number(cell: str) -> float | None:
    """A ``-q`` value (``59 C``, ``629.45 W``, ``16x``, ``N/A``, ``No``) as a number or None.

    Raises ValueError for text that is neither."""
    text = cell.strip()
    match = _UNIT.match(text)
    return parse_cell(match["num"] if match else text)


def parse_q_time(text: str, tz: tzinfo = UTC) -> float:
    """``Tue Jul 14 08:12:53 2026`` (read in ``tz``) -> Unix seconds."""
    stamp = datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y")
    return stamp.replace(tzinfo=tz).timestamp()


#: One GPU's block: its bus id, and its (section path, value)s in the text's names.
Block = tuple[str, list[tuple[tuple[str, ...], str]]]


def _blocks(text: str) -> tuple[dict[str, str], list[Block]]:
    """The header's ``key: value``s, and per GPU block its bus id and (section path, value)s."""
    header: dict[str, str] = {}
    gpus: list[Block] = []
    path: list[tuple[int, str]] = []  # (indent, section name) of the open sections
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("="):
            continue
        gpu = _GPU.match(raw.rstrip())
        if gpu is not None:
            gpus.append((gpu["bus"], []))
            path = []
            continue
        match = _LINE.match(raw.rstrip())
        if match is None:  # pragma: no cover - the pattern matches every line
            continue
        indent, key, value = len(match["indent"]), match["key"].strip(), match["value"]
        if not gpus:
            if value is not None:
                header[key] = value.strip()
            continue
        while path and path[-1][0] >= indent:
            path.pop()
        names = tuple(name for _, name in path)
        if value is None:
            path.append((indent, key))
        else:
            gpus[-1][1].append(((*names, key), value.strip()))
    return header, gpus


def read_query_text(text: str, *, hostname: str, tz: tzinfo = UTC) -> Batch:
    """``nvidia-smi -q`` output -> a screened ``Batch`` (see the module's doc)."""
    header, gpus = _blocks(text)
    return read_sections(header, gpus, hostname=hostname, tz=tz)


def read_sections(
    header: dict[str, str], gpus: list[Block], *, hostname: str, tz: tzinfo = UTC
) -> Batch:
    """The header's ``key: value``s and the GPU blocks of one ``-q`` output, in the text's
    names, -> a screened ``Batch``: what the text and the XML (``collectors.smi_xml``) readers
    share."""
    problems: list[str] = []
    ts = 0.0
    if "Timestamp" in header:
        try:
            ts = parse_q_time(header["Timestamp"], tz)
        except ValueError:
            problems.append(f"Timestamp {header['Timestamp']!r} does not read; time 0")
    else:
        problems.append("no Timestamp line; time 0")
    samples: list[Sample] = []
    for index, (bus, entries) in enumerate(gpus):
        ident = {path: value for path, value in entries if len(path) == 1}
        model = ident.get(("Product Name",), "")
        uuid = ident.get(("GPU UUID",), "")
        gpu = GpuId(
            hostname,
            index,
            uuid if uuid.startswith("GPU-") else "",
            normalise_bus_id(bus),
            model if not model.startswith(("[", "N/A")) else "",
        )
        label = f"gpu {index} ({gpu.pci_bus_id})"
        values: dict[str, float] = {}
        ecc: dict[tuple[str, str], list[float | None]] = {}
        clocks = _clock_mask(entries)
        if clocks is not None:
            values["clock_event_reasons"] = float(clocks)
        for path, cell in entries:
            name = _PATHS.get(path)
            is_ecc = len(path) == 3 and path[0] == "ECC Errors"
            if name is None and not is_ecc:
                continue
            try:
                v = number(cell)
            except ValueError:
                problems.append(f"{label}: cannot read {' / '.join(path)} = {cell!r}")
                continue
            if name is not None:
                if v is not None:
                    values.setdefault(name, v)
            elif path[2].startswith(("SRAM Uncorrectable", "SRAM Correctable", "DRAM ")):
                sram_dbe = path[2].startswith("SRAM Uncorrectable")
                kind = "SRAM Uncorrectable" if sram_dbe else path[2]
                ecc.setdefault((path[1], kind), []).append(v)
        for name, (scope, parts) in _ECC_PARTS.items():
            got = [ecc.get((scope, part)) for part in parts]
            if name not in values and all(g and None not in g for g in got):
                values[name] = float(sum(x for g in got for x in g or () if x is not None))
        if values:
            samples.append(Sample(ts, gpu, values))
    driver = header.get("Driver Version", "")
    cuda = header.get("CUDA Version", "")
    driver = "" if driver.startswith("N/A") else driver
    cuda = "" if cuda.startswith("N/A") else cuda
    nodes = (NodeInfo(ts, hostname, driver, cuda),) if driver or cuda else ()
    return screen(Batch(ts=ts, samples=tuple(samples), problems=tuple(problems), nodes=nodes))


def _clock_mask(entries: list[tuple[tuple[str, ...], str]]) -> int | None:
    """The ``Clocks Event Reasons`` lines as nvml's bitmask; None when the section is absent,
    or a line reads neither Active nor Not Active (``N/A``: unknown, not 0)."""
    mask, seen = 0, False
    for path, cell in entries:
        if len(path) < 2 or path[0] not in _CLOCK_SECTIONS or path[-1] not in _CLOCK_BITS:
            continue
        state = cell.strip()
        if state not in ("Active", "Not Active"):
            return None
        seen = True
        mask |= _CLOCK_BITS[path[-1]] if state == "Active" else 0
    return mask if seen else None


__all__ = ["Block", "number", "parse_q_time", "read_query_text", "read_sections"]
