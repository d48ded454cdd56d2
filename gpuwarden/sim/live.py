"""The simulated fleet one sample step at a time, for live use (the ``sim://`` collector).

    live = LiveFleet(FleetSpec(nodes=2, gpus_per_node=4))
    batch = live.step()                 # every live GPU's Sample at the next step, and events
    live.inject_xid("node001", 2, 79)   # reported by the next step()

Steps are built ``buffer_steps`` at a time and handed out one by one; the samples are those
``Fleet.chunks`` makes for the same spec.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from gpuwarden.errors import ConfigError, InputError
from gpuwarden.sim._chunk import build_chunk
from gpuwarden.sim._engine import ChunkArrays, Engine
from gpuwarden.sim._frames import to_samples
from gpuwarden.sim.spec import FleetSpec
from gpuwarden.telemetry import Batch, Event, GpuId


class LiveFleet:
    """A fleet stepped one sample at a time; ``inject_xid`` may be called from another thread."""

    def __init__(
        self,
        spec: FleetSpec,
        *,
        buffer_steps: int = 60,
        resume_ts: float | None = None,
        name: str = "the simulated fleet",
    ) -> None:
        """``resume_ts``: start at the first step at or after it, as the fleet that began at
        ``spec.start_ts`` would be by then (the steps between are simulated, unseen). ``name``
        is how error messages call the fleet."""
        self.spec = spec
        self.name = name
        self._eng = Engine(spec)
        self._buffer = max(1, buffer_steps)
        self._ca: ChunkArrays | None = None
        self._row = 0
        self._row_events: dict[int, list[Event]] = {}
        self._injected: list[tuple[int, int]] = []
        self._inject_lock = threading.Lock()
        self._slot_of = {(g.hostname, g.index): s for s, g in enumerate(self._eng.slot_gpus)}
        if resume_ts is not None:
            if not math.isfinite(resume_ts) or resume_ts < spec.start_ts:
                raise ConfigError(f"{name}: resume_ts={resume_ts!r} must not be before start")
            eng, target = self._eng, self._eng.ctx.step_at(resume_ts)
            per_day = max(1, 86400 // spec.step_s)
            while eng.k < target:
                build_chunk(eng, eng.k, min(eng.k + per_day, target))

    def step(self) -> Batch:
        """Every live GPU's Sample at the next simulated step, with the events since the last."""
        eng = self._eng
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
        eng = self._eng
        lid = int(eng.life_at(np.array([slot]), np.array([step]))[0])
        ids = [i for i in eng.slot_lives[slot] if eng.lives[i].start_step <= step]
        return eng.lives[lid if lid >= 0 else ids[-1]].gpu

    def inject_xid(self, hostname: str, index: int, code: int) -> None:
        """Make the next ``step()`` report Xid ``code`` on that GPU (like a driver log line)."""
        if (hostname, index) not in self._slot_of:
            raise InputError(f"no simulated GPU {hostname!r} index {index!r} in {self.name}")
        if isinstance(code, bool) or not isinstance(code, int) or code < 0:
            raise InputError(f"Xid code must be a non-negative integer, got {code!r}")
        with self._inject_lock:
            self._injected.append((self._slot_of[(hostname, index)], code))

    @property
    def gpus(self) -> list[GpuId]:
        """The boards in their slots now (a slot waiting for a repair is left out)."""
        eng = self._eng
        step = eng.k if self._ca is None else self._ca.k0 + max(self._row - 1, 0)
        lives = eng.life_at(np.arange(eng.n_slots), np.full(eng.n_slots, step, dtype=np.int64))
        return [eng.lives[int(i)].gpu for i in lives if i >= 0]
