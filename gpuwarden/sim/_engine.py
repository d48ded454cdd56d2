"""The simulation engine: fleet state carried from one chunk of samples to the next.

Slots are (node, GPU index) pairs, column ``g = node * gpus_per_node + index`` of every
(steps x slots) block; boards ("lifetimes") come and go in them. A chunk is built in four
passes: who is alive, the dense per-minute fields, the counters (cumulative sums of sparse
event counts, restarted at resets), and the events due.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwarden.sim import _life as L
from gpuwarden.sim import calib as C
from gpuwarden.sim._counters import CounterBook
from gpuwarden.sim._dense import SlotStatics, Workloads
from gpuwarden.sim._events import (
    GPU_REPLACED,
    EpochInputs,
    EventStore,
    HeatEvent,
    NodeReset,
    background_epoch,
)
from gpuwarden.sim.spec import FleetSpec
from gpuwarden.telemetry import Event, Failure, GpuId

_TRAITS = (
    "gpu_off_c",
    "mem_off_c",
    "theta_scale",
    "idle_scale",
    "sbe_per_day",
    "burst_per_day",
    "pcie_blip_per_day",
    "pcie_steady_per_h",
    "app_factor",
)
_REPLACE_REBOOT_S = 600.0  # the node is powered off for the swap


@dataclass
class ChunkArrays:
    """Samples ``k0..k1-1`` as (steps, slots) arrays; ``fields`` may hold broadcast views."""

    k0: int
    k1: int
    ts: np.ndarray
    alive: np.ndarray  # bool (T, G): False where no sample exists
    lives: np.ndarray  # int (T, G): lifetime id per sample (-1 while the slot is empty)
    fields: dict[str, np.ndarray]
    events: list[Event]

    @property
    def n_samples(self) -> int:
        return int(self.alive.sum())


class Engine:
    """The fleet's state: slots and their boards, pending events, counters, lags, position."""

    def __init__(self, spec: FleetSpec) -> None:
        self.spec = sp = spec
        self.step = sp.step_s
        self.start = sp.start_ts
        n, gpn = sp.nodes, sp.gpus_per_node
        self.n_slots = n * gpn
        self.node_of_slot = np.repeat(np.arange(n), gpn)
        self.index_of_slot = np.tile(np.arange(gpn), n)
        rack_of_node = np.arange(n) // sp.nodes_per_rack
        self.rack_of_slot = rack_of_node[self.node_of_slot]
        self.hostnames = [f"node{i:03d}" for i in range(n)]
        self.racks = [f"rack{r:02d}" for r in range(int(rack_of_node[-1]) + 1)]
        self.model_names = list(dict.fromkeys(sp.models))
        node_model = [sp.models[i % len(sp.models)] for i in range(n)]
        self.model_of_slot = np.array(
            [self.model_names.index(node_model[i]) for i in self.node_of_slot]
        )
        mods = [C.MODELS[node_model[i]] for i in self.node_of_slot]
        self.bus_ids = [
            m.pci_bus_ids[i] if i < len(m.pci_bus_ids) else f"00000000:{0x10 + i:02X}:00.0"
            for m, i in zip(mods, self.index_of_slot, strict=True)
        ]
        self.slot_gpus = [
            GpuId(
                self.hostnames[self.node_of_slot[g]],
                int(self.index_of_slot[g]),
                "",
                self.bus_ids[g],
                mods[g].name,
                self.racks[self.rack_of_slot[g]],
            )
            for g in range(self.n_slots)
        ]

        def col(attr: str) -> np.ndarray:
            return np.array([getattr(m, attr) for m in mods], dtype=np.float32)

        self.statics = SlotStatics(
            col("power_limit_w"),
            col("idle_power_w"),
            col("c0_gpu_c"),
            col("theta_gpu_c_per_w"),
            col("c0_mem_c"),
            col("theta_mem_c_per_w"),
            col("gpu_max_op_c"),
            col("gpu_slowdown_c"),
            col("mem_max_op_c"),
            col("sm_clock_max_mhz"),
            col("sm_clock_idle_mhz"),
            col("fb_total_mib"),
            col("fb_reserved_mib"),
        )
        self.constant = {
            "fb_total_mib": col("fb_total_mib"),
            "power_limit_w": col("power_limit_w"),
            "mem_clock_mhz": col("mem_clock_mhz"),
            "pcie_link_gen_max": col("pcie_gen_max"),
            "pcie_link_width_max": col("pcie_width_max"),
        }
        self.page_retirement = np.array([m.page_retirement for m in mods])
        self.ctx = L.LifeContext(
            sp.seed,
            sp.start_ts,
            sp.step_s,
            sp.failure_rate_per_gpu_day * sp.accel,
            sp.sudden_fraction,
            sp.lookalike_fraction,
            tuple(sp.kinds),
            sp.hbm_sudden_fraction,
            sp.precursor_shape,
            sp.precursor_magnitude,
            sp.precursor_magnitude_sd,
            sp.precursor_length,
            sp.background_noise,
            sp.pcie_noise,
            sp.counter_scale,
        )
        self.lives: list[L.Lifetime] = []
        self.slot_lives: list[list[int]] = [[] for _ in range(self.n_slots)]
        self.store = EventStore()
        self.resets: list[NodeReset] = []
        self.heat: list[HeatEvent] = []
        self.work = Workloads(sp.seed, n, sp.step_s)
        self._cache: dict[str, np.ndarray] = {}
        self._noise_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.epochs = 0
        self.k = 0
        self.failures: list[Failure] = []
        self.seen: list[GpuId] = []
        self.seen_ids: set[int] = set()
        init = L.keyed_rng(sp.seed, L.STREAM_INIT)
        ages = init.uniform(30, 900, self.n_slots)
        uptime = init.uniform(0.5, 30, n)
        self.rack_base = sp.ambient_c + init.uniform(-2, 3, len(self.racks))
        self.rack_phase = init.uniform(0, 2 * np.pi, len(self.racks))
        pre: list[tuple[str, int, np.ndarray, np.ndarray]] = []
        for g in range(self.n_slots):
            life = self._add_life(g, 0, sp.start_ts - ages[g] * 86400.0, initial=True)
            for ch, (steps, counts) in life.events.items():
                early = steps < 0
                if early.any():
                    pre.append((ch, g, steps[early], counts[early]))
        boot = -(uptime * 86400.0 / sp.step_s).astype(np.int64)
        self.book = CounterBook(self.n_slots)
        self.book.initial(
            init,
            self._traits_now(),
            ages,
            uptime[self.node_of_slot],
            boot[self.node_of_slot],
            pre,
            self.statics.limit,
        )
        self.ema = (
            np.full(self.n_slots, np.nan, np.float32),
            np.full(self.n_slots, np.nan, np.float32),
        )

    # --- lifetimes ------------------------------------------------------------------------
    def _add_life(self, slot: int, gen: int, install_ts: float, *, initial: bool) -> L.Lifetime:
        life = L.new_lifetime(
            self.ctx, len(self.lives), slot, gen, self.slot_gpus[slot], install_ts, initial=initial
        )
        self.lives.append(life)
        self.slot_lives[slot].append(life.id)
        self._cache.clear()
        full = np.full
        for ch, (steps, counts) in life.events.items():
            later = steps >= 0
            self.store.add(ch, steps[later], full(int(later.sum()), slot), counts[later])
        self.store.xids += [r for r in life.xids if r.ts > self.start - self.step]
        if gen > 0:
            node = int(self.node_of_slot[slot])
            down = int(np.ceil(_REPLACE_REBOOT_S / self.step))
            self.resets.append(
                NodeReset(
                    life.start_ts,
                    self.hostnames[node],
                    GPU_REPLACED,
                    _REPLACE_REBOOT_S,
                    life.start_step,
                    node,
                    down,
                )
            )
        return life

    def extend(self, until_step: int) -> None:
        """Install replacement boards for every slot up to sample ``until_step``."""
        for slot, ids in enumerate(self.slot_lives):
            last = self.lives[ids[-1]]
            while np.isfinite(last.fail_ts) and self.ctx.step_at(last.end_ts) < until_step:
                last = self._add_life(slot, last.gen + 1, last.end_ts, initial=False)

    def trait(self, name: str) -> np.ndarray:
        if name not in self._cache:
            if name == "pcie_steady_per_day":
                v = self.trait("pcie_steady_per_h") * 24
            elif name == "app_per_day":
                v = self.trait("app_factor") * C.APP_XID_GPU_PER_DAY
            else:
                v = np.array([getattr(x, name) for x in self.lives], dtype=np.float64)
            self._cache[name] = v
        return self._cache[name]

    def _traits_now(self) -> dict[str, np.ndarray]:
        return {name: self.trait(name) for name in _TRAITS}

    def table(self, name: str) -> np.ndarray:
        """Per lifetime id: ``start`` and ``fail`` (sample steps) or ``slot``."""
        if "_key" not in self._cache:
            start = np.array([x.start_step for x in self.lives], dtype=np.int64)
            slot = np.array([x.slot for x in self.lives], dtype=np.int64)
            key = slot * (1 << 40) + start + (1 << 39)
            order = np.argsort(key, kind="stable")
            fail = np.array([x.fail_step for x in self.lives], dtype=np.int64)
            self._cache.update(_key=key[order], _order=order, slot=slot, start=start, fail=fail)
        return self._cache[name]

    def life_at(self, slots: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """The board in ``slots`` at sample ``steps`` (-1 while the slot is empty)."""
        keys, order = self.table("_key"), self.table("_order")
        q = slots.astype(np.int64) * (1 << 40) + steps + (1 << 39)
        idx = np.searchsorted(keys, q, side="right") - 1
        cand = order[np.maximum(idx, 0)]
        ok = (idx >= 0) & (self.table("slot")[cand] == slots) & (steps < self.table("fail")[cand])
        return np.where(ok, cand, -1)

    # --- epochs ---------------------------------------------------------------------------
    def epoch_start(self, e: int) -> int:
        return int(np.ceil(e * 86400.0 / self.step - 1e-9))

    def background(self, e: int) -> None:
        k0, k1 = self.epoch_start(e), self.epoch_start(e + 1)
        self.extend(k1)
        start, fail, slot = self.table("start"), self.table("fail"), self.table("slot")
        over = np.flatnonzero((start < k1) & (fail > k0))

        def slot_max(name: str) -> np.ndarray:
            out = np.zeros(self.n_slots)
            np.maximum.at(out, slot[over], self.trait(name)[over])
            return out

        sp = self.spec
        bg = background_epoch(
            EpochInputs(
                sp.seed,
                e,
                k0,
                k1,
                self.step,
                self.start,
                self.node_of_slot,
                self.hostnames,
                len(self.racks),
                sp.reboot_rate_per_node_day,
                sp.driver_reload_rate_per_node_day,
                sp.heat_events_per_rack_day,
                self.trait,
                slot_max,
                self.life_at,
                fail,
            )
        )
        for ch, steps, slots, counts in bg.events:
            self.store.add(ch, steps, slots, counts)
        self.store.xids += bg.xids
        self.resets += bg.resets
        self.heat += bg.heat

    def noise(self, k0: int, k1: int) -> tuple[np.ndarray, np.ndarray]:
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        e = int((k0 * self.step) // 86400)
        while self.epoch_start(e) > k0:
            e -= 1
        while self.epoch_start(e) < k1:
            s0, s1 = self.epoch_start(e), self.epoch_start(e + 1)
            if e not in self._noise_cache:
                rng = L.keyed_rng(self.spec.seed, L.STREAM_NOISE, e)
                shape = (s1 - s0, self.n_slots)
                self._noise_cache = {
                    e: (
                        rng.standard_normal(shape, dtype=np.float32),
                        rng.standard_normal(shape, dtype=np.float32),
                    )
                }
            a, b = self._noise_cache[e]
            lo, hi = max(k0, s0) - s0, min(k1, s1) - s0
            parts.append((a[lo:hi], b[lo:hi]))
            e += 1
        if len(parts) == 1:
            return parts[0]
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))

    def thermal_drift(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Benign offsets (T, slots) C on the core and on the HBM temperature, or None when the
        spec draws none. Knots sit at multiples of the period in Unix time, each drawn from its
        own key (chunk-size independent); between knots the offset moves linearly."""
        sp = self.spec
        if not (sp.thermal_drift_core_c or sp.thermal_drift_hbm_c or sp.thermal_drift_node_c):
            return None
        pos = ts / (sp.thermal_drift_period_h * 3600.0)
        j = np.floor(pos).astype(np.int64)
        j0 = int(j[0])
        knots = np.stack([self._drift_knot(k) for k in range(j0, int(j[-1]) + 2)])
        w = (pos - j).astype(np.float32)[:, None, None]
        at = knots[j - j0] * (1 - w) + knots[j - j0 + 1] * w
        return at[:, 0], at[:, 1]

    def _drift_knot(self, k: int) -> np.ndarray:
        """(2, slots) float32: the core's and the HBM's offset at knot ``k``."""
        sp = self.spec
        rng = L.keyed_rng(sp.seed, L.STREAM_DRIFT, k)
        core, hbm = rng.standard_normal((2, self.n_slots))
        node = rng.standard_normal(sp.nodes)[self.node_of_slot] * sp.thermal_drift_node_c
        out = np.stack([core * sp.thermal_drift_core_c + node, hbm * sp.thermal_drift_hbm_c + node])
        return out.astype(np.float32)

    def ambient(self, ts: np.ndarray, k0: int) -> np.ndarray:
        """Rack inlet temperature (T, racks): a daily swing, a slow drift, heat events."""
        days = (ts[:, None] - self.start) / 86400.0
        amb = (
            self.rack_base
            + 1.0 * np.cos(2 * np.pi * (days - 15 / 24) + 0.2 * self.rack_phase)
            + 0.7 * np.sin(2 * np.pi * days / 3.3 + self.rack_phase)
        )
        ramp = max(1.0, 1800.0 / self.step)
        k = np.arange(k0, k0 + ts.size)
        for h in self.heat:
            if h.k0 < k[-1] + 1 and h.k1 > k0:
                amb[:, h.rack] += h.amp_c * np.clip(np.minimum(k - h.k0, h.k1 - k) / ramp, 0, 1)
        return amb.astype(np.float32)
