"""Sparse things that happen to the simulated fleet: counter events, Xids, reboots, heat.

Counter events (a single-bit error, a PCIe replay burst) are kept as (sample step, slot, count)
arrays until the chunk that shows them is built. The background (benign noise every fleet has)
is drawn one day ("epoch") at a time from a stream keyed by (seed, epoch), so it does not
depend on how the run is chunked. Rates that belong to a board are applied by thinning: draw
candidates at the slot's highest rate, keep each with the rate of the board alive at that time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpuwarden.sim import calib as C
from gpuwarden.sim._life import (
    CHANNELS,
    NVL_DATA,
    NVL_FLIT,
    NVL_RECOVERY,
    NVL_REPLAY,
    REMAP_C,
    REPLAY,
    SBE,
    STREAM_BACKGROUND,
    XidRecord,
    keyed_rng,
)

REBOOT, DRIVER_RELOAD, GPU_REPLACED = "reboot", "driver_reload", "gpu_replaced"


@dataclass(frozen=True)
class NodeReset:
    """A node reboot or driver reload: volatile counters restart from 0 (ground truth)."""

    ts: float
    hostname: str
    kind: str  # "reboot", "driver_reload" or "gpu_replaced" (the reboot after a board swap)
    downtime_s: float
    step: int
    node: int
    down_steps: int


@dataclass(frozen=True)
class HeatEvent:
    """A rack-wide inlet temperature excursion (a cooling unit tripping, a door left open)."""

    rack: int
    k0: int
    k1: int
    amp_c: float


class EventStore:
    """Counter events and Xid records waiting for the chunk that shows them."""

    def __init__(self) -> None:
        self._parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {
            ch: [] for ch in CHANNELS
        }
        self.xids: list[XidRecord] = []

    def add(self, ch: str, steps: np.ndarray, slots: np.ndarray, counts: np.ndarray) -> None:
        if len(steps):
            self._parts[ch].append(
                (steps.astype(np.int64), slots.astype(np.int64), counts.astype(np.float64))
            )

    def take(self, ch: str, k1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Remove and return the events of ``ch`` shown before sample ``k1``."""
        parts = self._parts[ch]
        if not parts:
            e = np.empty(0, dtype=np.int64)
            return e, e, np.empty(0)
        steps, slots, counts = (np.concatenate(a) for a in zip(*parts, strict=True))
        now = steps < k1
        later = ~now
        self._parts[ch] = [(steps[later], slots[later], counts[later])] if later.any() else []
        return steps[now], slots[now], counts[now]

    def take_xids(self, t_hi: float) -> list[XidRecord]:
        """Remove and return the records with ``ts <= t_hi``, oldest first."""
        due = sorted((r for r in self.xids if r.ts <= t_hi), key=lambda r: (r.ts, r.life))
        self.xids = [r for r in self.xids if r.ts > t_hi]
        return due


@dataclass
class Background:
    """What one epoch of background adds."""

    events: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    xids: list[XidRecord] = field(default_factory=list)
    resets: list[NodeReset] = field(default_factory=list)
    heat: list[HeatEvent] = field(default_factory=list)


@dataclass(frozen=True)
class EpochInputs:
    """What the background of one epoch needs to know about the fleet."""

    seed: int
    epoch: int
    k0: int
    k1: int
    step_s: int
    start_ts: float
    node_of_slot: np.ndarray
    hostnames: list[str]
    n_racks: int
    reboot_per_day: float
    reload_per_day: float
    heat_per_day: float
    trait: Callable[[str], np.ndarray]  # trait value per lifetime id
    slot_max: Callable[[str], np.ndarray]  # a trait's maximum per slot over this epoch
    life_at: Callable[[np.ndarray, np.ndarray], np.ndarray]  # (slots, steps) -> life id or -1
    fail_step: np.ndarray  # per lifetime id


def _candidates(
    rng: np.random.Generator, inp: EpochInputs, per_day: np.ndarray, trait: str | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points of a per-slot Poisson process over the epoch, thinned to the live board's rate."""
    days = (inp.k1 - inp.k0) * inp.step_s / 86400.0
    n = rng.poisson(per_day * days)
    slots = np.repeat(np.arange(per_day.size), n)
    steps = rng.integers(inp.k0, inp.k1, slots.size)
    lives = inp.life_at(slots, steps)
    keep = lives >= 0
    if trait is not None:
        rate = np.where(keep, inp.trait(trait)[lives], 0.0)
        keep &= rng.random(slots.size) * per_day[slots] < rate
    return slots[keep], steps[keep], lives[keep]


def _xid(
    inp: EpochInputs, rng: np.random.Generator, step: int, life: int, code: int, *, busy: bool
) -> XidRecord:
    ts = inp.start_ts + step * inp.step_s - rng.uniform(0, inp.step_s)
    return XidRecord(float(ts), int(life), "xid", code, "", needs_busy=busy, background=True)


def background_epoch(inp: EpochInputs) -> Background:
    """Benign noise for one epoch: SBEs, bursts, blips, application Xids, resets, heat."""
    rng = keyed_rng(inp.seed, STREAM_BACKGROUND, inp.epoch)
    out = Background()
    ones = np.ones
    # Background single-bit errors at each board's own stable rate; rarely a row remap.
    rate = inp.slot_max("sbe_per_day")
    slots, steps, lives = _candidates(rng, inp, rate, "sbe_per_day")
    out.events.append((SBE, steps, slots, ones(slots.size)))
    remap = rng.random(slots.size) < 0.001
    out.events.append((REMAP_C, steps[remap], slots[remap], ones(int(remap.sum()))))
    out.xids += [
        _xid(inp, rng, int(s), int(li), C.XID_ROW_REMAP, busy=False)
        for s, li in zip(steps[remap], lives[remap], strict=True)
    ]
    # SBE bursts that stop by themselves.
    slots, steps, lives = _candidates(rng, inp, inp.slot_max("burst_per_day"), "burst_per_day")
    for g, s, life in zip(slots, steps, lives, strict=True):
        hours = C.BURST_MEDIAN_H * np.exp(0.8 * rng.standard_normal())
        per_h = C.BURST_MEDIAN_PER_H * np.exp(rng.standard_normal())
        end = min(int(s + max(1, hours * 3600 / inp.step_s)), int(inp.fail_step[life]))
        k = np.arange(s, max(end, s + 1))
        counts = rng.poisson(per_h / 3600 * inp.step_s, k.size).astype(float)
        nz = counts > 0
        out.events.append((SBE, k[nz], np.full(int(nz.sum()), g), counts[nz]))
        if per_h >= C.XID_92_THRESHOLD_PER_H:
            at = int(k[min(k.size - 1, 10)])
            out.xids.append(_xid(inp, rng, at, life, C.XID_HIGH_SBE_RATE, busy=False))
    # PCIe replay blips on any board; steady replays on noisy links.
    slots, steps, _ = _candidates(rng, inp, inp.slot_max("pcie_blip_per_day"), "pcie_blip_per_day")
    sizes = np.ceil(20 * np.exp(1.2 * rng.standard_normal(slots.size)))
    out.events.append((REPLAY, steps, slots, sizes))
    steady = inp.slot_max("pcie_steady_per_day")
    slots, steps, _ = _candidates(rng, inp, steady, "pcie_steady_per_day")
    out.events.append((REPLAY, steps, slots, ones(slots.size)))
    # NVLink CRC blips.
    n_gpus = inp.node_of_slot.size
    slots, steps, _ = _candidates(rng, inp, np.full(n_gpus, C.NVLINK_BLIP_PER_DAY), None)
    flit = np.ceil(10 * np.exp(rng.standard_normal(slots.size)))
    out.events.append((NVL_FLIT, steps, slots, flit))
    out.events.append((NVL_REPLAY, steps, slots, np.floor(flit / 2)))
    data = rng.random(slots.size) < 0.3
    out.events.append(
        (
            NVL_DATA,
            steps[data],
            slots[data],
            np.ceil(3 * np.exp(rng.standard_normal(int(data.sum())))),
        )
    )
    rec = rng.random(slots.size) < 0.1
    out.events.append((NVL_RECOVERY, steps[rec], slots[rec], ones(int(rec.sum()))))
    # Application Xids: a crashing job hits its node's GPUs; flaky code hits one GPU often.
    n_nodes = len(inp.hostnames)
    days = (inp.k1 - inp.k0) * inp.step_s / 86400.0
    for node in np.flatnonzero(rng.poisson(C.APP_XID_NODE_PER_DAY * days, n_nodes)):
        s = int(rng.integers(inp.k0, inp.k1))
        hit = np.flatnonzero(inp.node_of_slot == node)
        code = C.XID_STOPPED if rng.random() < 0.7 else C.XID_GR_EXCEPTION
        if code == C.XID_GR_EXCEPTION:
            hit = hit[rng.integers(hit.size, size=1)]
        for li in inp.life_at(hit, np.full(hit.size, s)):
            if li >= 0:
                out.xids.append(_xid(inp, rng, s, li, code, busy=True))
    slots, steps, lives = _candidates(rng, inp, inp.slot_max("app_per_day"), "app_per_day")
    codes = rng.choice(
        [C.XID_MMU_FAULT, C.XID_GR_EXCEPTION, C.XID_STOPPED], slots.size, p=[0.6, 0.2, 0.2]
    )
    out.xids += [
        _xid(inp, rng, int(s), int(li), int(c), busy=True)
        for s, li, c in zip(steps, lives, codes, strict=True)
    ]
    # Node reboots and driver reloads.
    for kind, per_day, down in (
        (REBOOT, inp.reboot_per_day, (300, 900)),
        (DRIVER_RELOAD, inp.reload_per_day, (60, 180)),
    ):
        for node in np.repeat(np.arange(n_nodes), rng.poisson(per_day * days, n_nodes)):
            s = int(rng.integers(inp.k0, inp.k1))
            dt = float(rng.uniform(*down))
            out.resets.append(
                NodeReset(
                    inp.start_ts + s * inp.step_s,
                    inp.hostnames[node],
                    kind,
                    dt,
                    s,
                    int(node),
                    int(np.ceil(dt / inp.step_s)),
                )
            )
    # Rack-wide heat events.
    for rack in range(inp.n_racks):
        for _ in range(rng.poisson(inp.heat_per_day * days)):
            s = int(rng.integers(inp.k0, inp.k1))
            hours = float(np.clip(3.0 * np.exp(0.7 * rng.standard_normal()), 0.5, 24))
            out.heat.append(
                HeatEvent(
                    rack, s, s + max(1, int(hours * 3600 / inp.step_s)), float(rng.uniform(4, 12))
                )
            )
    return out
