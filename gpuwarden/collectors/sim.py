"""A simulated GPU fleet (``sim://``): realistic telemetry, failures with precursors, ground truth.

    fleet = Fleet(FleetSpec(nodes=16, days=30, accel=20))
    for chunk in fleet.chunks():         # a day at a time; state carries across chunks
        store.write_frame(chunk.samples)
        store.write_events(chunk.events)
    store.write_failures(fleet.failures)

    open_collector("sim://?nodes=16&gpus=8&seed=1")   # live: one step per collect()

Nodes of A100-80GB, H100-80GB or H200 boards sit in racks and run training, diurnal inference
or nothing. Boards fail at a rate calibrated to public data (Meta Llama 3, InfiniteHBD), mostly
after precursors (HBM, PCIe, cooling, NVLink) of varied length and strength, sometimes suddenly;
healthy look-alikes raise the same alarms and never fail. docs/simulator.md has the model,
every parameter, and the calibration.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np
import pandas as pd

from gpuwarden.collectors import _sim_calib as C
from gpuwarden.collectors._sim_chunk import build_chunk
from gpuwarden.collectors._sim_engine import ChunkArrays, Engine
from gpuwarden.collectors._sim_events import NodeReset
from gpuwarden.collectors._sim_io import FRAME_COLUMNS, to_frame, to_samples, url_params
from gpuwarden.errors import CollectorError, ConfigError, InputError
from gpuwarden.telemetry import Batch, Event, Failure, GpuId

MODELS: tuple[str, ...] = tuple(C.MODELS)
PRECURSOR_KINDS: tuple[str, ...] = C.PRECURSOR_KINDS  # failures announced by telemetry
SUDDEN_KINDS: tuple[str, ...] = C.SUDDEN_KINDS  # failures with no precursor
FAILURE_KINDS: tuple[str, ...] = (*PRECURSOR_KINDS, *SUDDEN_KINDS)
DEFAULT_START_TS = 1767225600.0  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class FleetSpec:
    """What to simulate. Times are Unix seconds (UTC); rates are per day of running time."""

    nodes: int = 16  # servers, named node000, node001, ...
    gpus_per_node: int = 8  # GPU indexes 0..n-1 per node (1-16)
    nodes_per_rack: int = 4  # consecutive nodes share a rack (rack00, ...) and its inlet air
    models: tuple[str, ...] = ("H100-80GB",)  # assigned to nodes in turn: MODELS
    start_ts: float = DEFAULT_START_TS  # the first sample
    days: float = 7.0  # length of the run (Fleet.chunks / run)
    step_s: int = 60  # seconds between samples
    seed: int = 1  # everything is a function of the seed
    accel: float = 1.0  # multiplies the failure rate, for demos and training data
    sudden_fraction: float = 0.3  # share of failures with no precursor at all
    failure_rate_per_gpu_day: float = 3e-4  # Meta Llama 3: 268 in 54 days on 16,384 H100s
    lookalike_fraction: float = 0.1  # boards with a benign anomaly that never fail
    kinds: tuple[str, ...] = ()  # restrict failures to these FAILURE_KINDS (empty: all)
    reboot_rate_per_node_day: float = 1 / 30  # node reboots: volatile counters restart
    driver_reload_rate_per_node_day: float = 1 / 60  # driver reloads: the same, shorter gap
    heat_events_per_rack_day: float = 0.05  # rack-wide inlet excursions of +4..12 C for hours
    ambient_c: float = 22.0  # mean rack inlet temperature (racks differ by -2..+3 C)
    diurnal_peak_utc_h: float = 20.0  # hour (UTC) of peak inference load

    def __post_init__(self) -> None:
        ints = {
            "nodes": (1, 100_000),
            "gpus_per_node": (1, 16),
            "nodes_per_rack": (1, 10_000),
            "step_s": (1, 86_400),
            "seed": (0, 2**63 - 1),
        }
        for name, (lo, hi) in ints.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or not lo <= v <= hi:
                raise ConfigError(f"FleetSpec.{name} must be an integer in {lo}..{hi}, got {v!r}")
        unit = ("sudden_fraction", "lookalike_fraction")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type == "float" and not (isinstance(v, int | float) and math.isfinite(v)):
                raise ConfigError(f"FleetSpec.{f.name} must be a finite number, got {v!r}")
            if f.type == "float" and f.name not in ("start_ts", "ambient_c") and v < 0:
                raise ConfigError(f"FleetSpec.{f.name} must not be negative, got {v!r}")
            if f.name in unit and v > (0.9 if f.name == "lookalike_fraction" else 1):
                raise ConfigError(f"FleetSpec.{f.name} must be a fraction, got {v!r}")
        if self.days <= 0:
            raise ConfigError(f"FleetSpec.days must be positive, got {self.days!r}")
        if not self.models:
            raise ConfigError("FleetSpec.models must name at least one model")
        for m in self.models:
            if m not in C.MODELS:
                raise ConfigError(
                    f"FleetSpec.models: unknown model {m!r}; known: {', '.join(MODELS)}"
                )
        for k in self.kinds:
            if k not in FAILURE_KINDS:
                raise ConfigError(
                    f"FleetSpec.kinds: unknown kind {k!r}; known: {', '.join(FAILURE_KINDS)}"
                )

    @property
    def n_steps(self) -> int:
        return max(1, int(round(self.days * 86400 / self.step_s)))


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


def spec_from_url(url: str) -> FleetSpec:
    """``sim://?nodes=16&gpus=8&seed=1&accel=1&step=60&models=H100-80GB,A100-80GB&start=<unix>``
    (also rack, sudden, rate, lookalikes, kinds). Raises ConfigError naming a bad parameter.
    ``SimCollector.from_url`` also takes ``resume``."""
    return FleetSpec(**url_params(url))  # type: ignore[arg-type]


class SimCollector:
    """The simulated fleet as a live ``Collector``: each ``collect()`` advances one step."""

    def __init__(
        self,
        spec: FleetSpec,
        *,
        url: str = "sim://",
        buffer_steps: int = 60,
        resume_ts: float | None = None,
    ) -> None:
        """``resume_ts``: start collecting at the first step at or after it, as the fleet that
        began at ``spec.start_ts`` would be by then (the steps between are simulated, unseen)."""
        self.url = url
        self.spec = spec
        self._eng: Engine | None = Engine(spec)
        self._buffer = max(1, buffer_steps)
        self._ca: ChunkArrays | None = None
        self._row = 0
        self._row_events: dict[int, list[Event]] = {}
        self._injected: list[tuple[int, int]] = []
        self._inject_lock = threading.Lock()
        if resume_ts is not None:
            if not math.isfinite(resume_ts) or resume_ts < spec.start_ts:
                raise ConfigError(f"sim:// resume={resume_ts!r} must not be before start")
            eng, target = self._eng, self._eng.ctx.step_at(resume_ts)
            per_day = max(1, 86400 // spec.step_s)
            while eng.k < target:
                build_chunk(eng, eng.k, min(eng.k + per_day, target))

    @classmethod
    def from_url(cls, url: str) -> SimCollector:
        """``sim://?...`` as ``spec_from_url``, plus ``resume=<unix>`` to join the fleet later."""
        parts = urlsplit(url)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        spec = spec_from_url(
            urlunsplit(parts._replace(query=urlencode([(k, v) for k, v in pairs if k != "resume"])))
        )
        resume = [v for k, v in pairs if k == "resume"]
        try:
            resume_ts = float(resume[-1]) if resume else None
        except ValueError as exc:
            raise ConfigError(
                f"sim:// parameter resume={resume[-1]!r} is not a valid float"
            ) from exc
        return cls(spec, url=url, resume_ts=resume_ts)

    def _engine(self) -> Engine:
        if self._eng is None:
            raise CollectorError(f"{self.url}: collector is closed")
        return self._eng

    def collect(self) -> Batch:
        """Every live GPU's Sample at the next simulated step, with the events since the last."""
        eng = self._engine()
        if self._ca is None or self._row >= self._ca.ts.size:
            self._ca = build_chunk(eng, eng.k, eng.k + self._buffer)
            self._row, self._row_events = 0, {}
            for ev in self._ca.events:
                row = min(max(eng.ctx.step_at(ev.ts) - self._ca.k0, 0), self._ca.ts.size - 1)
                self._row_events.setdefault(row, []).append(ev)
        ca, row = self._ca, self._row
        self._row += 1
        ts = float(ca.ts[row])
        events = list(self._row_events.get(row, []))
        # swap under the lock: an inject_xid from another thread is never lost between the two
        with self._inject_lock:
            injected, self._injected = self._injected, []
        for slot, code in injected:
            events.append(Event(ts, self._board(slot, ca.k0 + row), "xid", code, "injected"))
        return Batch(ts, tuple(to_samples(eng, ca, row)), tuple(events))

    def _board(self, slot: int, step: int) -> GpuId:
        eng = self._engine()
        lid = int(eng.life_at(np.array([slot]), np.array([step]))[0])
        ids = [i for i in eng.slot_lives[slot] if eng.lives[i].start_step <= step]
        return eng.lives[lid if lid >= 0 else ids[-1]].gpu

    def inject_xid(self, hostname: str, index: int, code: int) -> None:
        """Make the next ``collect()`` report Xid ``code`` on that GPU (like a driver log line)."""
        eng = self._engine()
        slots = {(g.hostname, g.index): s for s, g in enumerate(eng.slot_gpus)}
        if (hostname, index) not in slots:
            raise InputError(f"no simulated GPU {hostname!r} index {index!r} in {self.url}")
        if isinstance(code, bool) or not isinstance(code, int) or code < 0:
            raise InputError(f"Xid code must be a non-negative integer, got {code!r}")
        with self._inject_lock:
            self._injected.append((slots[(hostname, index)], code))

    @property
    def gpus(self) -> list[GpuId]:
        """The boards in their slots now (a slot waiting for a repair is left out)."""
        eng = self._engine()
        step = eng.k if self._ca is None else self._ca.k0 + max(self._row - 1, 0)
        lives = eng.life_at(np.arange(eng.n_slots), np.full(eng.n_slots, step, dtype=np.int64))
        return [eng.lives[int(i)].gpu for i in lives if i >= 0]

    def close(self) -> None:
        self._eng = None
        self._ca = None
