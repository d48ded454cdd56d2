"""A simulated fleet run in time chunks: telemetry frames, events and ground truth.

fleet = Fleet(FleetSpec(nodes=16, days=30, accel=20))
for chunk in fleet.chunks():         # a day at a time; state carries across chunks
    store.write_frame(chunk.samples)
    store.write_events(chunk.events)
store.write_failures(fleet.failures)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuwarden.sim._chunk import build_chunk
from gpuwarden.sim._engine import ChunkArrays, Engine
from gpuwarden.sim._events import NodeReset
from gpuwarden.sim._frames import FRAME_COLUMNS, to_frame
from gpuwarden.sim.spec import FleetSpec
from gpuwarden.telemetry import Event, Failure, GpuId


@dataclass
class SimChunk:
    """One time chunk of the run.

    ``samples`` is the wide frame (``FRAME_COLUMNS``: ``telemetry.FRAME_ID_COLUMNS``, ``rack``,
    every field as float64 with NaN where absent; string columns are categoricals), or None when
    the chunk was made with ``frames=False``. ``arrays`` holds the same fields as (steps, slots)
    arrays, slot ``g`` being ``Fleet.slots[g]``; ``alive`` is False where no sample exists.
    """

    samples: pd.DataFrame | None
    events: list[Event]
    n_samples: int
    start_ts: float  # first sample of the chunk
    end_ts: float  # one step after its last sample
    arrays: dict[str, np.ndarray] = field(repr=False, default_factory=dict)
    alive: np.ndarray = field(repr=False, default_factory=lambda: np.zeros((0, 0), bool))


@dataclass(frozen=True)
class RackHeat:
    """A rack-wide inlet temperature excursion: every GPU in the rack runs hotter (benign)."""

    rack: str
    start_ts: float
    end_ts: float
    amp_c: float


@dataclass
class SimResult:
    samples: pd.DataFrame
    events: list[Event]
    failures: list[Failure]
    gpus: list[GpuId]
    resets: list[NodeReset]


class Fleet:
    """A simulated fleet over ``spec.days``. It runs once: a later ``chunks()`` continues."""

    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        self._eng = Engine(spec)
        self._initial = [life.gpu for life in self._eng.lives]

    @property
    def slots(self) -> list[tuple[str, int]]:
        """(hostname, index) of every array column, in order."""
        return [(g.hostname, g.index) for g in self._eng.slot_gpus]

    @property
    def gpus(self) -> list[GpuId]:
        """Every board seen so far (the installed ones before the run starts)."""
        return list(self._eng.seen) if self._eng.k else list(self._initial)

    @property
    def benign(self) -> dict[str, str]:
        """uuid -> look-alike trait of the boards seen so far that look alarming and never
        fail: sbe_stable, sbe_bursty, pcie_noisy, hot_mem, app_flaky (ground truth)."""
        eng = self._eng
        seen = eng.seen_ids if eng.k else set(range(len(self._initial)))
        return {x.gpu.uuid: x.lookalike for x in eng.lives if x.lookalike and x.id in seen}

    @property
    def failures(self) -> list[Failure]:
        """Ground truth of the failures the run has passed, oldest first."""
        return list(self._eng.failures)

    @property
    def resets(self) -> list[NodeReset]:
        """Node reboots and driver reloads the run has passed (volatile counters restart)."""
        return sorted(
            (r for r in self._eng.resets if r.step < self._eng.k), key=lambda r: (r.step, r.node)
        )

    @property
    def heat_events(self) -> list[RackHeat]:
        """Rack heat events that began before the run's current position (ground truth)."""
        eng, step = self._eng, self.spec.step_s
        return sorted(
            (
                RackHeat(
                    eng.racks[h.rack], eng.start + h.k0 * step, eng.start + h.k1 * step, h.amp_c
                )
                for h in eng.heat
                if h.k0 < eng.k
            ),
            key=lambda h: h.start_ts,
        )

    def planned_failures(self, until_ts: float | None = None) -> list[Failure]:
        """Every failure up to ``until_ts`` (default: the last sample), without simulating
        telemetry: failures are drawn when a board is installed."""
        eng = self._eng
        until = (
            eng.start + (self.spec.n_steps - 1) * self.spec.step_s if until_ts is None else until_ts
        )
        eng.extend(eng.ctx.step_at(until) + 1)
        return sorted(
            (
                Failure(x.fail_ts, x.gpu, x.kind, x.precursor_start_ts, x.repair_s, x.xid)
                for x in eng.lives
                if x.fail_ts <= until
            ),
            key=lambda f: (f.ts, f.gpu.uuid),
        )

    def chunks(
        self, *, chunk_s: float = 86400, progress: bool = True, frames: bool = True
    ) -> Iterator[SimChunk]:
        """The run as consecutive chunks of ``chunk_s`` seconds. ``frames=False`` skips building
        DataFrames (``samples`` is None) for callers that read ``arrays`` or only count."""
        from tqdm import tqdm

        eng, total = self._eng, self.spec.n_steps
        per = max(1, int(round(chunk_s / self.spec.step_s)))
        bar = tqdm(
            total=(total - eng.k) * eng.n_slots,
            unit="GPU-samples",
            unit_scale=True,
            disable=not progress,
            desc="simulating",
        )
        try:
            while eng.k < total:
                ca = build_chunk(eng, eng.k, min(total, eng.k + per))
                bar.update(ca.alive.size)
                yield _chunk(eng, ca, frames)
        finally:
            bar.close()

    def run(self, *, progress: bool = True) -> SimResult:
        """The whole run in memory: for small fleets."""
        parts = list(self.chunks(progress=progress))
        frames = [p.samples for p in parts if p.samples is not None]
        samples = (
            pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=FRAME_COLUMNS)
        )
        for col in ("hostname", "uuid", "model", "pci_bus_id", "rack"):
            if len(frames) > 1:  # concat of differing categories falls back to object
                samples[col] = samples[col].astype("category")
        events = [e for p in parts for e in p.events]
        return SimResult(samples, events, self.failures, self.gpus, self.resets)


def _chunk(eng: Engine, ca: ChunkArrays, frames: bool) -> SimChunk:
    return SimChunk(
        to_frame(eng, ca) if frames else None,
        ca.events,
        ca.n_samples,
        float(ca.ts[0]),
        float(ca.ts[-1]) + eng.step,
        ca.fields,
        ca.alive,
    )
