"""nvidia-smi's cells, shared by its readers (``smi://``, ``-q`` text and XML, its CSV logs):
a value as a number, its "no value" markers, a PCI bus id in nvidia-smi's spelling."""

from __future__ import annotations

_TRUE = {"yes", "active", "enabled", "true"}
_FALSE = {"no", "not active", "disabled", "false"}
_NOT_AVAILABLE = {"", "n/a", "na", "not supported", "unknown error", "unknown"}


def parse_cell(cell: str) -> float | None:
    """One nvidia-smi value as a number; None for ``[N/A]``, ``[Not Supported]`` and the like.

    Raises ValueError for text that is neither a number nor a known marker.
    """
    text = cell.strip()
    low = text.lower()
    if is_no_value(text):
        return None
    if low in _TRUE:
        return 1.0
    if low in _FALSE:
        return 0.0
    if low.startswith("0x"):
        return float(int(low, 16))  # clocks_event_reasons.active, e.g. 0x0000000000000004
    return float(text)


def is_no_value(text: str) -> bool:
    """True for nvidia-smi's "no value" cells: ``[N/A]``, ``[Not Supported]``, empty."""
    low = text.strip().lower()
    return low in _NOT_AVAILABLE or (low.startswith("[") and low.endswith("]"))


def normalise_bus_id(bus_id: str) -> str:
    """``0000:9a:00.0`` and ``00000000:9A:00.0`` -> ``00000000:9A:00.0`` (nvidia-smi's form)."""
    domain, _, rest = bus_id.strip().rpartition(":")
    domain, _, bus = domain.rpartition(":")
    return f"{int(domain or '0', 16):08X}:{bus.upper()}:{rest.upper()}"


__all__ = ["is_no_value", "normalise_bus_id", "parse_cell"]
