"""The per-minute fields of the simulated fleet: workload, power, temperature, clocks, memory.

Everything here is numpy over a (steps x GPUs) block. Only utilisation and power carry
per-minute noise (two float32 normals per GPU-sample); temperatures follow power through two
first-order lags, so they inherit its noise smoothed, the way a heatsink does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwarden import telemetry as T
from gpuwarden.sim._life import STREAM_WORK, keyed_rng

IDLE, TRAIN, INFER = 0, 1, 2
# Segment lengths (median h, log-sd) and what follows each kind (idle, train, infer).
_LENGTH = {IDLE: (5.0, 1.0), TRAIN: (40.0, 1.0), INFER: (72.0, 0.8)}
_NEXT = {IDLE: (0.0, 0.55, 0.45), TRAIN: (0.5, 0.3, 0.2), INFER: (0.4, 0.3, 0.3)}
_NPARAM = 9  # level, amp, sigma, pmax, fb, mcr, period_min, dip_min, phase_min
TAU_GPU_S = 90.0  # core temperature lag behind power
TAU_MEM_S = 400.0  # HBM stacks lag further


class Workloads:
    """Each node runs a sequence of jobs: steady training, diurnal inference, or nothing.

    Segments are drawn one after another from the node's own random stream, so extending the
    horizon never changes what was drawn before.
    """

    def __init__(self, seed: int, n_nodes: int, step_s: int) -> None:
        self.step_s = step_s
        self._rngs = [keyed_rng(seed, STREAM_WORK, n) for n in range(n_nodes)]
        self._starts: list[list[int]] = []
        self._kinds: list[list[int]] = []
        self._params: list[list[np.ndarray]] = []
        for rng in self._rngs:
            kind = int(rng.choice(3, p=[0.2, 0.5, 0.3]))
            first = -int(self._length_steps(rng, kind) * rng.random()) - 1
            self._starts.append([first])
            self._kinds.append([kind])
            self._params.append([self._draw(rng, kind)])
            self._starts[-1].append(first + self._length_steps(rng, kind))

    def _length_steps(self, rng: np.random.Generator, kind: int) -> int:
        median_h, sd = _LENGTH[kind]
        hours = float(np.clip(median_h * np.exp(sd * rng.standard_normal()), 0.25, 21 * 24))
        return max(1, int(hours * 3600 / self.step_s))

    @staticmethod
    def _draw(rng: np.random.Generator, kind: int) -> np.ndarray:
        p = np.zeros(_NPARAM)
        if kind == TRAIN:
            period = rng.uniform(20, 90)
            p[:] = (
                rng.uniform(90, 99),
                0,
                2.5,
                rng.uniform(0.85, 1.08),
                rng.uniform(0.82, 0.97),
                rng.uniform(0.25, 0.6),
                period,
                rng.uniform(1, 4),
                rng.uniform(0, period),
            )
        elif kind == INFER:
            p[:6] = (
                rng.uniform(10, 30),
                rng.uniform(25, 60),
                7.0,
                rng.uniform(0.55, 0.85),
                rng.uniform(0.4, 0.9),
                rng.uniform(0.35, 0.8),
            )
        return p

    def _extend(self, node: int, until: int) -> None:
        rng, starts, kinds = self._rngs[node], self._starts[node], self._kinds[node]
        while starts[-1] < until:
            kind = int(rng.choice(3, p=_NEXT[kinds[-1]]))
            kinds.append(kind)
            self._params[node].append(self._draw(rng, kind))
            starts.append(starts[-1] + self._length_steps(rng, kind))

    def window(self, k0: int, k1: int) -> tuple[np.ndarray, np.ndarray]:
        """Kind (T, nodes) and parameters (T, nodes, 9) for samples k0..k1-1."""
        steps = np.arange(k0, k1)
        n = len(self._rngs)
        kind = np.empty((k1 - k0, n), dtype=np.int8)
        par = np.empty((k1 - k0, n, _NPARAM), dtype=np.float32)
        for node in range(n):
            self._extend(node, k1)
            idx = np.searchsorted(self._starts[node], steps, side="right") - 1
            kind[:, node] = np.asarray(self._kinds[node], dtype=np.int8)[idx]
            par[:, node] = np.asarray(self._params[node], dtype=np.float32)[idx]
        return kind, par


@dataclass
class SlotStatics:
    """Per-slot model constants, shape (G,), float32."""

    limit: np.ndarray
    idle: np.ndarray
    c0g: np.ndarray
    thg: np.ndarray
    c0m: np.ndarray
    thm: np.ndarray
    gpu_max: np.ndarray
    gpu_slow: np.ndarray
    mem_max: np.ndarray
    sm_max: np.ndarray
    sm_idle: np.ndarray
    fb_total: np.ndarray
    fb_reserved: np.ndarray


@dataclass
class Cooling:
    """A cooling precursor active over rows ``r0:r1`` of column ``slot``; ``u`` runs 0 -> 1."""

    slot: int
    r0: int
    r1: int
    u: np.ndarray
    amp_c: float
    core_ratio: float
    shape: float


def diurnal(ts: np.ndarray, peak_utc_h: float) -> np.ndarray:
    """1 at the daily peak hour, 0 twelve hours later."""
    hours = (ts % 86400.0) / 3600.0
    return (0.5 * (1.0 + np.cos(2 * np.pi * (hours - peak_utc_h) / 24.0))).astype(np.float32)


def _ema(x: np.ndarray, state: np.ndarray, tau_s: float, step_s: int) -> np.ndarray:
    """First-order lag along axis 0, starting from ``state`` (updated in place)."""
    a = np.float32(np.exp(-step_s / tau_s))
    b = np.float32(1.0) - a
    out = np.empty_like(x)
    s = state
    for t in range(x.shape[0]):
        s *= a
        s += b * x[t]
        out[t] = s
    return out


def dense_fields(
    *,
    ts: np.ndarray,
    kind: np.ndarray,
    par: np.ndarray,
    gpn: int,
    noise: tuple[np.ndarray, np.ndarray],
    ambient: np.ndarray,
    st: SlotStatics,
    life: dict[str, np.ndarray],
    cooling: list[Cooling],
    ema_state: tuple[np.ndarray, np.ndarray],
    step_s: int,
    peak_utc_h: float,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Gauges (T, G) float32 and per-step counter increments (energy, violations).

    Works on (T, nodes, gpus_per_node) views so node-level workload broadcasts for free.
    """
    steps, nodes = kind.shape
    shape = (steps, nodes, gpn)
    f32 = np.float32

    def v(a: np.ndarray) -> np.ndarray:  # (..., G) -> (..., nodes, gpn) view
        return a.reshape(*a.shape[:-1], nodes, gpn)

    limit, idle_w = v(st.limit), v(st.idle)
    n1, n2 = v(noise[0]), v(noise[1])
    d = diurnal(ts, peak_utc_h)[:, None]
    minute = (ts % (7 * 86400) / 60.0).astype(f32)[:, None]  # weekly wrap keeps float32 exact
    level, amp, sigma, pmax, fbf, mcr, period, dip, phase = np.moveaxis(par, 2, 0)
    in_dip = np.mod(minute - phase, np.maximum(period, 1)) < dip
    target = np.where(kind == TRAIN, np.where(in_dip, f32(10), level), level + amp * d)
    target[kind == IDLE] = 0
    busy = (kind != IDLE)[:, :, None]

    util = n1 * sigma[:, :, None]
    util += target[:, :, None]
    np.clip(util, 0, 100, out=util)
    np.rint(util, out=util)
    frac = util * f32(0.01)
    frac *= 1.1 - 0.1 * frac  # power rises a little faster than utilisation at low load
    raw = (limit * pmax[:, :, None] - idle_w) * frac
    raw += idle_w * v(life["idle_scale"])
    raw += (0.012 * limit) * n2
    over_w = raw - limit
    capped = over_w > 0
    power = np.where(capped, limit - 1.5 - np.abs(n2), raw)
    cap_frac = np.clip(over_w / (0.1 * limit), 0, 1)
    flat_power = power.reshape(steps, -1)
    for state in ema_state:  # the first chunk starts the lags at the first reading
        unset = np.isnan(state)
        state[unset] = flat_power[0, unset]
    p_fast = v(_ema(flat_power, ema_state[0], TAU_GPU_S, step_s))
    p_slow = _ema(flat_power, ema_state[1], TAU_MEM_S, step_s)
    amb = v(ambient)
    gpu_t = p_fast * (v(st.thg) * v(life["theta_scale"]))
    gpu_t += v(st.c0g) + v(life["gpu_off_c"])
    gpu_t += amb
    mem_t = v(p_slow) * (v(st.thm) * v(life["theta_scale"]))
    mem_t += v(st.c0m) + v(life["mem_off_c"])
    mem_t += amb
    flat_gpu, flat_mem = gpu_t.reshape(steps, -1), mem_t.reshape(steps, -1)
    for c in cooling:  # a failing cold plate: the rise grows with load and with time
        g, rows = c.slot, slice(c.r0, c.r1)
        extra = c.amp_c * c.u**c.shape * (0.4 + 0.6 * p_slow[rows, g] / st.limit[g])
        flat_mem[rows, g] += extra
        flat_gpu[rows, g] += c.core_ratio * extra
    gpu_max, mem_max = v(st.gpu_max), v(st.mem_max)
    over = np.maximum(gpu_t - gpu_max, mem_t - mem_max)
    thermal = over > 0
    hw = (over >= 4) | (gpu_t >= v(st.gpu_slow))
    # Throttling holds temperatures near the limit: compress what is above it, up to the
    # shutdown margin (the board would power off before reading higher).
    for t, lim in ((gpu_t, gpu_max), (mem_t, mem_max)):
        hot = t > lim
        if hot.any():
            t[...] = np.where(hot, np.minimum(lim + 0.35 * (t - lim), lim + 8), t)
        np.rint(t, out=t)
    over_c = np.clip(over, 0, 10)
    clock = (1 - 0.12 * cap_frac) * (1 - 0.04 * over_c)
    clock *= v(st.sm_max) / 15
    np.rint(clock, out=clock)
    clock *= 15
    clock = np.where(busy, clock, v(st.sm_idle))
    power *= 1 - 0.03 * over_c
    idle_now = util == 0
    reasons = idle_now.astype(f32)  # CLOCK_EVENT_GPU_IDLE is bit 0
    np.add(reasons, f32(T.CLOCK_EVENT_SW_POWER_CAP), out=reasons, where=capped)
    np.add(reasons, f32(T.CLOCK_EVENT_SW_THERMAL), out=reasons, where=thermal)
    np.add(
        reasons, f32(T.CLOCK_EVENT_HW_THERMAL | T.CLOCK_EVENT_HW_SLOWDOWN), out=reasons, where=hw
    )
    fb_used = np.where(kind == INFER, fbf * (0.85 + 0.15 * d), fbf)[:, :, None] * v(st.fb_total)
    np.rint(fb_used, out=fb_used)
    copy_util = util * mcr[:, :, None]
    np.rint(copy_util, out=copy_util)
    # DCGM's profiling ratios follow utilisation: the engine is active a little less than
    # "a kernel was running" says; training keeps the tensor pipes busier than inference.
    gr_active = util * f32(0.0095)
    tensor_share = np.where(kind == TRAIN, f32(0.55), f32(0.3))[:, :, None]
    tensor_active = gr_active * tensor_share
    for ratio in (gr_active, tensor_active):
        np.round(ratio, 3, out=ratio)
    fb_free = v(st.fb_total - st.fb_reserved) - fb_used
    us = step_s * 1e6
    viol_p = np.where(capped, np.maximum(cap_frac, f32(0.05)), f32(0))
    viol_t = np.where(thermal, np.clip(over / 3, 0.05, 1), f32(0))
    gauges = {
        "gpu_temp_c": gpu_t,
        "mem_temp_c": mem_t,
        "power_w": power,
        "sm_clock_mhz": clock,
        "gpu_util_pct": util,
        "mem_copy_util_pct": copy_util,
        "gr_engine_active": gr_active,
        "tensor_active": tensor_active,
        "fb_used_mib": fb_used,
        "fb_free_mib": fb_free,
        "clock_event_reasons": reasons,
        "_idle": idle_now,
    }
    increments = {
        "energy_mj": np.multiply(power, step_s * 1000.0, dtype=np.float64),
        "power_violation_us": np.multiply(viol_p, us, dtype=np.float64),
        "thermal_violation_us": np.multiply(viol_t, us, dtype=np.float64),
    }
    flat = {k: a.reshape(steps, -1) for k, a in gauges.items()}
    assert all(a.shape == (steps, nodes * gpn) for a in flat.values()), shape
    return flat, {k: a.reshape(steps, -1) for k, a in increments.items()}
