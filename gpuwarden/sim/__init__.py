"""A simulated GPU fleet: realistic telemetry, failures with precursors, ground truth.

    fleet = Fleet(FleetSpec(nodes=16, days=30, accel=20))
    for chunk in fleet.chunks():         # a day at a time; state carries across chunks
        store.write_frame(chunk.samples)
        store.write_events(chunk.events)
    store.write_failures(fleet.failures)

    live = LiveFleet(FleetSpec(nodes=2))  # one step per step(): what sim:// collects

Nodes of A100-80GB, H100-80GB or H200 boards sit in racks and run training, diurnal inference
or nothing. Boards fail at a rate calibrated to public data (Meta Llama 3, InfiniteHBD), mostly
after precursors (HBM, PCIe, cooling, NVLink) of varied length and strength, sometimes suddenly;
healthy look-alikes raise the same alarms and never fail. docs/simulator.md has the model,
every parameter, and the calibration.

Other packages import these names only; the ``_`` modules are the simulator's own.
"""

from __future__ import annotations

from gpuwarden.sim._events import NodeReset
from gpuwarden.sim._frames import FRAME_COLUMNS
from gpuwarden.sim.family import FamilyDraw, draw_family
from gpuwarden.sim.fleet import Fleet, RackHeat, SimChunk, SimResult
from gpuwarden.sim.live import LiveFleet
from gpuwarden.sim.spec import (
    DEFAULT_START_TS,
    FAILURE_KINDS,
    MODELS,
    PRECURSOR_KINDS,
    SUDDEN_KINDS,
    FleetSpec,
)

__all__ = [
    "DEFAULT_START_TS",
    "FAILURE_KINDS",
    "FRAME_COLUMNS",
    "FamilyDraw",
    "MODELS",
    "PRECURSOR_KINDS",
    "SUDDEN_KINDS",
    "Fleet",
    "FleetSpec",
    "LiveFleet",
    "NodeReset",
    "RackHeat",
    "SimChunk",
    "SimResult",
    "draw_family",
]
