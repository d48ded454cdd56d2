"""What the risk model reads, as signals a store can lack, and how to say that one is missing.

dcgm-exporter's default counters leave out most of what the model reads (ECC counts, row
remaps, NVLink errors, violation times). A GPU whose store has none of a signal's fields is not
clean, it is unread: its features are NaN, the model scores without them, and
``gpuwarden score`` and ``summary`` name the signal, the features and reasons it feeds, and
the dcgm-exporter metrics that would bring it back
(``deploy/dcgm-exporter/gpuwarden-counters.csv``).

    missing = missing_signals({"ecc_sbe_volatile_total": False, ...}, model="NVIDIA H100")
    note(missing)  # "not in the store, so left out of the risk: single-bit ECC errors (...)"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuwarden.readings import has_memory_sensor
from gpuwarden.telemetry import FIELDS_BY_NAME
from gpuwarden.wording import counted, plural

COUNTERS_FILE = "deploy/dcgm-exporter/gpuwarden-counters.csv"


@dataclass(frozen=True)
class Signal:
    """One thing the model reads. ``fields``: any one of them read is enough (volatile or
    aggregate ECC counts; row remapping on Ampere and later, page retirement before).
    ``features``: the feature-name prefixes it feeds; ``reasons``: the reason group that
    goes silent without it; ``hbm``: only boards with HBM have it."""

    name: str
    fields: tuple[str, ...]
    features: tuple[str, ...]
    reasons: str
    hbm: bool = False

    @property
    def metrics(self) -> tuple[str, ...]:
        """dcgm-exporter's names of ``fields``."""
        return tuple(FIELDS_BY_NAME[f].dcgm for f in self.fields)

    @property
    def smi_fields(self) -> tuple[str, ...]:
        """``nvidia-smi --query-gpu`` names of ``fields``; empty when nvidia-smi's query has
        none (PCIe replays, NVLink errors and violation times: NVML or DCGM only)."""
        return tuple(q for f in self.fields if (q := FIELDS_BY_NAME[f].smi))


SIGNALS: tuple[Signal, ...] = (
    Signal(
        "single-bit ECC errors",
        ("ecc_sbe_volatile_total", "ecc_sbe_aggregate_total"),
        ("sbe_",),
        "memory",
    ),
    Signal(
        "double-bit ECC errors",
        ("ecc_dbe_volatile_total", "ecc_dbe_aggregate_total"),
        ("dbe_",),
        "memory",
    ),
    Signal(
        "memory repairs (row remapping or page retirement)",
        (
            "remapped_rows_correctable",
            "remapped_rows_uncorrectable",
            "remapped_rows_pending",
            "remapped_rows_failure",
            "retired_pages_sbe",
            "retired_pages_dbe",
            "retired_pages_pending",
        ),  # fmt: skip
        ("remap_", "retired_"),
        "memory",
    ),
    Signal("HBM temperature", ("mem_temp_c",), ("mem_temp_", "spread_"), "thermal", hbm=True),
    Signal("core temperature", ("gpu_temp_c",), ("gpu_temp_", "spread_"), "thermal"),
    Signal("thermal violation time", ("thermal_violation_us",), ("thermal_violation_",), "thermal"),
    Signal("clock-event reasons", ("clock_event_reasons",), ("hw_slowdown_",), "thermal"),
    Signal("PCIe replays", ("pcie_replay_total",), ("pcie_replay_",), "pcie"),
    Signal("PCIe link width", ("pcie_link_width",), ("pcie_width_",), "pcie"),
    Signal(
        "NVLink errors",
        (
            "nvlink_crc_flit_errors_total",
            "nvlink_crc_data_errors_total",
            "nvlink_replay_errors_total",
            "nvlink_recovery_errors_total",
        ),  # fmt: skip
        ("nvlink_",),
        "nvlink",
    ),
)
#: Every field some signal reads.
SIGNAL_FIELDS: tuple[str, ...] = tuple(dict.fromkeys(f for s in SIGNALS for f in s.fields))


def missing_signals(read: Mapping[str, bool], model: str = "") -> list[Signal]:
    """The signals none of whose fields were read (``read``: field -> any value in the
    window) for a GPU of ``model``; a board without HBM is not missing an HBM temperature."""
    out = []
    for s in SIGNALS:
        if s.hbm and model and not has_memory_sensor(model):
            continue
        if not any(read.get(f, False) for f in s.fields):
            out.append(s)
    return out


def note(missing: Sequence[Signal]) -> str:
    """One sentence for a GPU's reasons: which signals its risk leaves out."""
    return "not in the store, so left out of the risk: " + ", ".join(s.name for s in missing)


def advice(signal: Signal, n_gpus: int, of: int) -> str:
    """One warning line: how many GPUs lack ``signal``, its metrics, the file that adds them."""
    return (
        f"{n_gpus} of {counted(of, 'GPU')} {plural(n_gpus, 'has', 'have')} no {signal.name} in "
        "the store "
        f"({' or '.join(signal.metrics)}): {plural(n_gpus, 'its', 'their')} risk leaves it out "
        "(its features "
        f"{', '.join(p + '*' for p in signal.features)} are unknown, not zero, and the "
        f"{signal.reasons} reasons cannot name it); dcgm-exporter exports it with {COUNTERS_FILE}"
    )


__all__ = ["SIGNALS", "SIGNAL_FIELDS", "Signal", "advice", "missing_signals", "note"]
