"""Build one chunk of the simulated fleet: samples ``k0..k1-1`` as (steps x slots) arrays."""

from __future__ import annotations

import numpy as np

from gpuwarden.sim import calib as C
from gpuwarden.sim._counters import Events, Reset
from gpuwarden.sim._dense import Cooling, dense_fields
from gpuwarden.sim._engine import ChunkArrays, Engine
from gpuwarden.sim._life import CHANNELS
from gpuwarden.telemetry import DCGM_EXTRA_FIELDS, FIELD_NAMES, Event, Failure

#: Catalogue fields the simulator leaves absent.
NOT_SIMULATED = DCGM_EXTRA_FIELDS

_LIFE_PARAMS = ("gpu_off_c", "mem_off_c", "theta_scale", "idle_scale")


def _life_grid(eng: Engine, k0: int, k1: int) -> np.ndarray:
    """Lifetime id per (step, slot), -1 while the slot is empty; a view when nothing changes."""
    n, steps = eng.n_slots, k1 - k0
    cur = eng.life_at(np.arange(n), np.full(n, k0, dtype=np.int64))
    fail = eng.table("fail")
    simple = (cur >= 0) & (fail[np.maximum(cur, 0)] >= k1)
    if simple.all():
        return np.broadcast_to(cur, (steps, n))
    grid = np.tile(cur, (steps, 1))
    for g in np.flatnonzero(~simple):
        col = np.full(steps, -1, dtype=np.int64)
        for lid in eng.slot_lives[g]:
            life = eng.lives[lid]
            a, b = max(life.start_step, k0), min(life.fail_step, k1)
            if a < b:
                col[a - k0 : b - k0] = lid
        grid[:, g] = col
    return grid


def build_chunk(eng: Engine, k0: int, k1: int) -> ChunkArrays:
    """Advance ``eng`` over samples ``k0..k1-1`` (k0 must be where the last chunk ended)."""
    eng.extend(k1 + 1)
    while eng.epoch_start(eng.epochs) < k1:
        eng.background(eng.epochs)
        eng.epochs += 1
    steps, n, gpn = k1 - k0, eng.n_slots, eng.spec.gpus_per_node
    f32 = np.float32
    ts = eng.start + np.arange(k0, k1, dtype=np.float64) * eng.step
    grid = _life_grid(eng, k0, k1)
    alive = grid >= 0
    resets: list[Reset] = []
    for r in eng.resets:
        if r.step < k1 and r.step + r.down_steps > k0:
            cols = slice(r.node * gpn, (r.node + 1) * gpn)
            alive[max(r.step - k0, 0) : r.step + r.down_steps - k0, cols] = False
            if r.step >= k0:
                resets.append((r.step - k0, cols, False))
    start, fail = eng.table("start"), eng.table("fail")
    here = [eng.lives[i] for i in np.flatnonzero((start < k1) & (fail > k0))]
    resets += [
        (x.start_step - k0, slice(x.slot, x.slot + 1), True)
        for x in here
        if x.gen > 0 and x.start_step >= k0
    ]
    resets.sort(key=lambda r: r[0])

    idx = np.maximum(grid[0] if grid.strides[0] == 0 else grid, 0)
    life = {p: eng.trait(p).astype(f32)[idx] for p in _LIFE_PARAMS}
    drift = eng.thermal_drift(ts)
    if drift is not None:
        life["gpu_off_c"] = life["gpu_off_c"] + drift[0]  # (G,) or (T, G): broadcast
        life["mem_off_c"] = life["mem_off_c"] + drift[1]
    cooling = []
    for x in here:
        if x.kind == C.COOLING and x.precursor_step < k1:
            a, b = max(x.precursor_step, k0), min(x.fail_step, k1)
            if a < b:
                u = (np.arange(a, b) - x.precursor_step) / max(1, x.fail_step - x.precursor_step)
                cooling.append(
                    Cooling(
                        x.slot,
                        a - k0,
                        b - k0,
                        u.astype(f32),
                        x.cool_amp_c,
                        x.cool_core_ratio,
                        x.cool_shape,
                    )
                )
    kind, par = eng.work.window(k0, k1)
    gauges, dense = dense_fields(
        ts=ts,
        kind=kind,
        par=par,
        gpn=gpn,
        noise=eng.noise(k0, k1),
        ambient=eng.ambient(ts, k0)[:, eng.rack_of_slot],
        st=eng.statics,
        life=life,
        cooling=cooling,
        ema_state=eng.ema,
        step_s=eng.step,
        peak_utc_h=eng.spec.diurnal_peak_utc_h,
    )
    idle = gauges.pop("_idle")

    fields: dict[str, np.ndarray] = dict(gauges)
    for name, values in eng.constant.items():
        fields[name] = np.broadcast_to(values, (steps, n))
    gen_max = eng.constant["pcie_link_gen_max"]
    gen = np.where(idle, f32(1), gen_max)  # idle links drop to Gen1 to save power
    width = np.broadcast_to(eng.constant["pcie_link_width_max"], (steps, n))
    remap_failure = np.broadcast_to(np.zeros(n, f32), (steps, n))
    for x in here:
        if x.width_drop_step is not None and x.width_drop_step < k1:
            rows = slice(max(x.width_drop_step, k0) - k0, min(x.fail_step, k1) - k0)
            width = width.copy() if width.strides[0] == 0 else width
            width[rows, x.slot] = x.width_after
            if x.gen_after is not None:
                gen[rows, x.slot] = np.where(idle[rows, x.slot], 1, gen_max[x.slot] - 1)
        if x.remap_failure_step is not None and x.remap_failure_step < k1:
            rows = slice(max(x.remap_failure_step, k0) - k0, min(x.fail_step, k1) - k0)
            remap_failure = remap_failure.copy() if remap_failure.strides[0] == 0 else remap_failure
            remap_failure[rows, x.slot] = 1
    fields.update(pcie_link_gen=gen, pcie_link_width=width, remapped_rows_failure=remap_failure)
    # Pre-Ampere boards retire pages; Ampere and later remap rows, so these are absent.
    retired = np.where(eng.page_retirement, 0.0, np.nan).astype(f32)
    for name in ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"):
        fields[name] = np.broadcast_to(retired, (steps, n))

    sparse: dict[str, Events | None] = {}
    for ch in CHANNELS:
        at, col, cnt = eng.store.take(ch, k1)
        row = at - k0
        ok = row >= 0
        ok[ok] = alive[row[ok], col[ok]]  # nothing happens on a board that is down
        sparse[ch] = (row[ok], col[ok], cnt[ok]) if ok.any() else None
    for inc in dense.values():
        inc *= alive
    counters = eng.book.chunk(sparse, dense, resets, steps)
    fields["remapped_rows_pending"] = (counters.pop("_remaps_since_reset") > 0).astype(f32)
    fields.update(counters)
    # dcgm-exporter 4.x's extra default counters (encoder, decoder, reserved memory, DRAM and
    # PCIe throughput, DCGM's health check) are not simulated: absent, never 0.
    unmodelled = np.broadcast_to(np.full(n, np.nan, f32), (steps, n))
    for name in set(FIELD_NAMES) - set(fields):
        if name in NOT_SIMULATED:
            fields[name] = unmodelled
    assert set(fields) == set(FIELD_NAMES), set(FIELD_NAMES) ^ set(fields)

    events = _events(eng, ts, k0, alive, grid, idle)
    due = [eng.lives[i] for i in np.flatnonzero((fail >= k0) & (fail < k1))]
    for x in sorted(due, key=lambda x: (x.fail_ts, x.slot)):
        eng.failures.append(
            Failure(x.fail_ts, x.gpu, x.kind, x.precursor_start_ts, x.repair_s, x.xid)
        )
    for x in here:
        if x.id not in eng.seen_ids:
            eng.seen_ids.add(x.id)
            eng.seen.append(x.gpu)
    eng.k = k1
    return ChunkArrays(k0, k1, ts, alive, grid, fields, events)


def _events(
    eng: Engine, ts: np.ndarray, k0: int, alive: np.ndarray, grid: np.ndarray, idle: np.ndarray
) -> list[Event]:
    """Xid and GPU events shown with these samples: ts in (sample k0-1, sample k1-1]."""
    out = []
    last = ts.size - 1
    for r in eng.store.take_xids(float(ts[-1])):
        if r.ts <= ts[0] - eng.step:
            continue  # before the simulation started
        x = eng.lives[r.life]
        row = min(max(eng.ctx.step_at(r.ts) - k0, 0), last)
        if r.background and (not alive[row, x.slot] or grid[row, x.slot] != x.id):
            continue
        if r.needs_busy and idle[row, x.slot]:
            continue
        out.append(Event(r.ts, x.gpu, r.kind, r.code, r.detail))
    return out
