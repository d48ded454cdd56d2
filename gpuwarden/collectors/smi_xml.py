"""Reading ``nvidia-smi -q -x``: the XML form of ``-q`` (what Telegraf's nvidia_smi input and
many health scripts call, and what ``nvidia-smi -q -x -l N`` logs).

``read_query_xml(text, hostname=...)`` gives the same screened ``Batch`` as
``collectors.smi_text.read_query_text`` gives for the same output as text: the XML's element
names (``nvsmi_device_v10`` to ``v13``) are put into the text's section names (``gpu_temp``
under ``temperature`` is ``Temperature / GPU Current Temp``) and read by the one reader,
``smi_text.read_sections``, so a field, a unit, an ``N/A``, a DRAM/SRAM ECC sum and a clock
event reason read the same in both forms. Elements not named here keep their own names, which
no field is read from.

The parser is the standard library's (expat 2.4.1 or newer refuses entity expansion bombs);
the DTD the output names is never fetched.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, tzinfo

from gpuwarden.collectors.smi_text import Block, read_sections
from gpuwarden.telemetry import Batch

#: XML element -> the ``-q`` text's name for the same section or line.
_NAMES: dict[str, str] = {
    "timestamp": "Timestamp",
    "driver_version": "Driver Version",
    "cuda_version": "CUDA Version",
    "product_name": "Product Name",
    "uuid": "GPU UUID",
    "temperature": "Temperature",
    "gpu_temp": "GPU Current Temp",
    "memory_temp": "Memory Current Temp",
    "gpu_power_readings": "GPU Power Readings",
    "power_readings": "Power Readings",
    "average_power_draw": "Average Power Draw",
    "power_draw": "Power Draw",
    "current_power_limit": "Current Power Limit",
    "enforced_power_limit": "Enforced Power Limit",
    "clocks": "Clocks",
    "sm_clock": "SM",
    "mem_clock": "Memory",
    "utilization": "Utilization",
    "gpu_util": "GPU",
    "memory_util": "Memory",
    "fb_memory_usage": "FB Memory Usage",
    "total": "Total",
    "used": "Used",
    "free": "Free",
    "ecc_errors": "ECC Errors",
    "volatile": "Volatile",
    "aggregate": "Aggregate",
    "single_bit": "Single Bit",
    "double_bit": "Double Bit",
    "sram_correctable": "SRAM Correctable",
    "sram_uncorrectable": "SRAM Uncorrectable",
    "sram_uncorrectable_parity": "SRAM Uncorrectable Parity",
    "sram_uncorrectable_secded": "SRAM Uncorrectable SEC-DED",
    "dram_correctable": "DRAM Correctable",
    "dram_uncorrectable": "DRAM Uncorrectable",
    "retired_pages": "Retired Pages",
    "multiple_single_bit_retirement": "Single Bit ECC",
    "double_bit_retirement": "Double Bit ECC",
    "pending_blacklist": "Pending Page Blacklist",
    "pending_retirement": "Pending",
    "remapped_rows": "Remapped Rows",
    "remapped_row_corr": "Correctable Error",
    "remapped_row_unc": "Uncorrectable Error",
    "remapped_row_pending": "Pending",
    "remapped_row_failure": "Remapping Failure Occurred",
    "pci": "PCI",
    "pci_gpu_link_info": "GPU Link Info",
    "pcie_gen": "PCIe Generation",
    "current_link_gen": "Current",
    "max_link_gen": "Max",
    "link_widths": "Link Width",
    "current_link_width": "Current",
    "max_link_width": "Max",
    "replay_counter": "Replays Since Reset",
    "clocks_event_reasons": "Clocks Event Reasons",
    "clocks_throttle_reasons": "Clocks Throttle Reasons",
    "clocks_event_reasons_counters": "Clocks Event Reasons Counters",
    "clocks_event_reasons_counters_sw_power_cap": "SW Power Capping",
}
#: ``clocks_event_reason_*`` (older: ``clocks_throttle_reason_*``) -> the text's line.
_REASONS: dict[str, str] = {
    "gpu_idle": "Idle",
    "applications_clocks_setting": "Applications Clocks Setting",
    "sw_power_cap": "SW Power Cap",
    "hw_slowdown": "HW Slowdown",
    "hw_thermal_slowdown": "HW Thermal Slowdown",
    "hw_power_brake_slowdown": "HW Power Brake Slowdown",
    "sync_boost": "Sync Boost",
    "sw_thermal_slowdown": "SW Thermal Slowdown",
    "display_clocks_setting": "Display Clock Setting",
}
_REASON = re.compile(r"^clocks_(?:event|throttle)_reason_(?P<what>\w+)$")
#: Elements whose value is their parent's line in the text (``Retired Pages / Single Bit
#: ECC : 0`` is ``<multiple_single_bit_retirement><retired_count>0``).
_VALUE_OF_PARENT = {"retired_count"}


class QueryXmlError(ValueError):
    """An XML document that does not parse, or is not ``nvidia_smi_log``."""


def _name(tag: str) -> str:
    if (m := _REASON.match(tag)) is not None and m["what"] in _REASONS:
        return _REASONS[m["what"]]
    return _NAMES.get(tag, tag)


def _entries(element: ET.Element, path: tuple[str, ...], out: list) -> None:
    for child in element:
        if child.tag in _VALUE_OF_PARENT and len(child) == 0:
            out.append((path, (child.text or "").strip()))
            continue
        sub = (*path, _name(child.tag))
        if len(child):
            _entries(child, sub, out)
        else:
            out.append((sub, (child.text or "").strip()))


def sections(text: str) -> tuple[dict[str, str], list[Block]]:
    """One ``nvidia-smi -q -x`` document as the text reader's header and GPU blocks."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise QueryXmlError(f"not well-formed XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise QueryXmlError(f"<{root.tag}> is not nvidia-smi's <nvidia_smi_log>")
    header: dict[str, str] = {}
    gpus: list[Block] = []
    for child in root:
        if child.tag == "gpu":
            entries: list[tuple[tuple[str, ...], str]] = []
            _entries(child, (), entries)
            gpus.append((child.get("id", ""), entries))
        elif len(child) == 0:
            header[_name(child.tag)] = (child.text or "").strip()
    return header, gpus


def read_query_xml(text: str, *, hostname: str, tz: tzinfo = UTC) -> Batch:
    """``nvidia-smi -q -x`` output (one document) -> a screened ``Batch``, as
    ``read_query_text`` reads the same output as text. ``QueryXmlError`` when it does not
    parse."""
    header, gpus = sections(text)
    return read_sections(header, gpus, hostname=hostname, tz=tz)


def is_query_xml(text: str) -> bool:
    """Whether ``text`` looks like ``nvidia-smi -q -x`` output (cheap: the first tags)."""
    head = text.lstrip("\ufeff \t\r\n")[:512]
    return head.startswith(("<?xml", "<nvidia_smi_log")) and "nvidia_smi_log" in head


__all__ = ["QueryXmlError", "is_query_xml", "read_query_xml", "sections"]
