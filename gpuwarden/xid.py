"""NVIDIA Xid codes: what they mean, whose fault they are, and what to do.

Condensed from NVIDIA's "Xid Errors" catalogue (docs.nvidia.com/deploy/xid-errors) and its
row-remapping / DBE guidance. ``hardware`` Xids point at the GPU, its memory, its link or its
firmware; ``application`` ones at the code running on it (a bad kernel, an illegal address), which
is why they must not count against a GPU's health.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

XidClass = Literal["hardware", "application", "driver"]


@dataclass(frozen=True)
class Xid:
    code: int
    name: str
    cls: XidClass
    fatal: bool
    action: str


_CATALOGUE = (
    Xid(
        13,
        "Graphics engine exception",
        "application",
        False,
        "Application fault: check the job's code (illegal instruction, out-of-range access).",
    ),
    Xid(
        31,
        "GPU memory page fault",
        "application",
        False,
        "Application fault: illegal memory access by the job; debug the application.",
    ),
    Xid(
        32,
        "Invalid or corrupted push buffer stream",
        "driver",
        False,
        "Check the driver version and the PCIe link; restart the job.",
    ),
    Xid(
        43,
        "GPU stopped processing",
        "application",
        False,
        "Application fault: the job's context was reset; the GPU itself is fine.",
    ),
    Xid(
        45,
        "Preemptive cleanup",
        "driver",
        False,
        "Follows another error or a killed process; look at the Xid before it.",
    ),
    Xid(
        48,
        "Double-bit ECC error",
        "hardware",
        True,
        "Drain the GPU and reset it; if DBEs recur or row remapping fails, replace the GPU (RMA).",
    ),
    Xid(
        61,
        "Internal micro-controller breakpoint",
        "hardware",
        False,
        "Reset the GPU; if it recurs, collect a bug report and contact support.",
    ),
    Xid(
        62,
        "Internal micro-controller halt",
        "hardware",
        True,
        "Drain and reset the GPU; if it recurs, contact support.",
    ),
    Xid(
        63,
        "ECC page retirement or row remapping recorded",
        "hardware",
        False,
        "Memory repaired itself; schedule a GPU reset to apply it and watch remap counts.",
    ),
    Xid(
        64,
        "ECC page retirement or row remapper failure",
        "hardware",
        True,
        "Row remapping failed: drain the GPU and replace it (RMA).",
    ),
    Xid(
        74,
        "NVLink error",
        "hardware",
        True,
        "Drain the node; reset the GPUs, check NVLink/NVSwitch cabling; replace on recurrence.",
    ),
    Xid(
        79,
        "GPU has fallen off the bus",
        "hardware",
        True,
        "Drain the node; reseat or replace the GPU, check the PCIe riser/slot and power.",
    ),
    Xid(
        92,
        "High single-bit ECC error rate",
        "hardware",
        False,
        "NVIDIA says no action is needed; gpuwarden watches the SBE trend instead.",
    ),
    Xid(
        94,
        "Contained ECC error",
        "hardware",
        True,
        "The affected application was stopped; reset the GPU to remap the row, then resume.",
    ),
    Xid(
        95,
        "Uncontained ECC error",
        "hardware",
        True,
        "Every application on the GPU is affected: drain and reset the GPU; replace on recurrence.",
    ),
    Xid(
        119,
        "GSP RPC timeout",
        "hardware",
        True,
        "GPU System Processor stopped answering: drain and reset the GPU; update firmware/driver.",
    ),
    Xid(
        120,
        "GSP error",
        "hardware",
        True,
        "GPU System Processor error: drain and reset the GPU; replace on recurrence.",
    ),
)

XIDS: dict[int, Xid] = {x.code: x for x in _CATALOGUE}

#: Xids that mark a GPU unhealthy at once, whatever a model says.
FATAL_XIDS: frozenset[int] = frozenset(x.code for x in _CATALOGUE if x.fatal)
APPLICATION_XIDS: frozenset[int] = frozenset(x.code for x in _CATALOGUE if x.cls == "application")


def describe(code: int) -> Xid:
    """The catalogue entry for ``code``; unknown codes count as hardware and non-fatal."""
    return XIDS.get(
        code,
        Xid(code, f"Xid {code}", "hardware", False, "Look the code up in NVIDIA's Xid catalogue."),
    )
