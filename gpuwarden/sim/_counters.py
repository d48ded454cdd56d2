"""Cumulative counters of the simulated fleet, as NVML reports them.

A counter is the running sum of its per-step increments, carried from chunk to chunk. Volatile
ones (``Field.resets``) restart from 0 when the node reboots or the driver reloads; aggregate
ones (InfoROM) only when a new board takes the slot.
"""

from __future__ import annotations

import numpy as np

from gpuwarden.sim import calib as C
from gpuwarden.sim._life import (
    DBE,
    NVL_DATA,
    NVL_FLIT,
    NVL_RECOVERY,
    NVL_REPLAY,
    REMAP_C,
    REMAP_U,
    REPLAY,
    SBE,
)

#: counter -> (event channels summed into it, volatile). ``_remaps_since_reset`` is hidden: a
#: row remap stays pending (remapped_rows.pending) until the next GPU reset.
SPARSE_SERIES: dict[str, tuple[tuple[str, ...], bool]] = {
    "ecc_sbe_volatile_total": ((SBE,), True),
    "ecc_dbe_volatile_total": ((DBE,), True),
    "ecc_sbe_aggregate_total": ((SBE,), False),
    "ecc_dbe_aggregate_total": ((DBE,), False),
    "remapped_rows_correctable": ((REMAP_C,), False),
    "remapped_rows_uncorrectable": ((REMAP_U,), False),
    "pcie_replay_total": ((REPLAY,), True),
    "nvlink_crc_flit_errors_total": ((NVL_FLIT,), True),
    "nvlink_crc_data_errors_total": ((NVL_DATA,), True),
    "nvlink_replay_errors_total": ((NVL_REPLAY,), True),
    "nvlink_recovery_errors_total": ((NVL_RECOVERY,), True),
    "_remaps_since_reset": ((REMAP_C, REMAP_U), True),
}
#: counters summed from the dense per-step fields; all volatile.
DENSE_SERIES: tuple[str, ...] = ("energy_mj", "power_violation_us", "thermal_violation_us")

#: (first row, columns, new board): a new board restarts every counter, a reset the volatile.
Reset = tuple[int, slice, bool]
#: Events of one channel in a chunk: (row, column, count) arrays.
Events = tuple[np.ndarray, np.ndarray, np.ndarray]


def _running_sum(a: np.ndarray) -> None:
    """Cumulative sum along axis 0, in place (row by row: numpy's strided cumsum is slower)."""
    if a.shape[1] < 64:
        np.cumsum(a, axis=0, out=a)
        return
    for i in range(1, a.shape[0]):
        a[i] += a[i - 1]


def _merge(resets: list[Reset]) -> list[tuple[int, np.ndarray]]:
    """Resets at the same row merged, so a column restarts once however many reasons it has."""
    rows: dict[int, list[np.ndarray]] = {}
    for k, sl, _ in resets:
        rows.setdefault(k, []).append(np.arange(sl.start, sl.stop))
    return [(k, np.unique(np.concatenate(c))) for k, c in sorted(rows.items())]


class CounterBook:
    """Carried counter values, one float64 per slot and counter."""

    def __init__(self, n_slots: int) -> None:
        self.n = n_slots
        self.carry = {name: np.zeros(n_slots) for name in (*SPARSE_SERIES, *DENSE_SERIES)}

    def initial(
        self,
        rng: np.random.Generator,
        traits: dict[str, np.ndarray],
        ages_days: np.ndarray,
        uptime_days: np.ndarray,
        boot_step: np.ndarray,
        early: list[tuple[str, int, np.ndarray, np.ndarray]],
        limit_w: np.ndarray,
    ) -> None:
        """Values at the first sample: the boards' history before the simulation starts.

        Volatile counters hold what happened since the node last booted (``uptime_days``
        ago), aggregate ones the board's whole life (``ages_days``). ``early`` are precursor
        events of boards already failing at the start (steps < 0).
        """
        n, c = self.n, self.carry
        tr = {k: v[:n] for k, v in traits.items()}
        up = np.minimum(uptime_days, ages_days)
        burst_mean = C.BURST_MEDIAN_PER_H * C.BURST_MEDIAN_H * np.exp((1.0 + 0.64) / 2)
        sbe_rate = tr["sbe_per_day"] + tr["burst_per_day"] * burst_mean
        vol = rng.poisson(sbe_rate * up).astype(float)
        agg = vol + rng.poisson(sbe_rate * (ages_days - up))
        c["ecc_sbe_volatile_total"][:] = vol
        c["ecc_sbe_aggregate_total"][:] = agg
        c["remapped_rows_correctable"][:] = rng.binomial(agg.astype(np.int64), 0.001)
        blips = rng.poisson(tr["pcie_blip_per_day"] * up)
        c["pcie_replay_total"][:] = np.ceil(blips * 20 * np.exp(0.72) * rng.lognormal(0, 0.5, n))
        c["pcie_replay_total"] += rng.poisson(tr["pcie_steady_per_h"] * 24 * up)
        nvl = rng.poisson(C.NVLINK_BLIP_PER_DAY * up)
        flit = np.ceil(nvl * 10 * np.exp(0.5) * rng.lognormal(0, 0.5, n))
        c["nvlink_crc_flit_errors_total"][:] = flit
        c["nvlink_replay_errors_total"][:] = np.floor(flit / 2)
        c["nvlink_crc_data_errors_total"][:] = np.ceil(rng.binomial(nvl, 0.3) * 3 * np.exp(0.5))
        c["nvlink_recovery_errors_total"][:] = rng.binomial(nvl, 0.1)
        c["energy_mj"][:] = up * 86400 * limit_w * rng.uniform(0.3, 0.7, n) * 1000.0
        c["power_violation_us"][:] = np.floor(up * 86400e6 * rng.uniform(0, 0.03, n))
        for ch, g, steps, counts in early:
            since_boot = counts[steps > boot_step[g]].sum()
            for name, (channels, volatile) in SPARSE_SERIES.items():
                if ch in channels:
                    c[name][g] += since_boot if volatile else counts.sum()

    def _series(
        self,
        name: str,
        events: Events | None,
        dense: np.ndarray | None,
        resets: list[tuple[int, np.ndarray]],
        steps: int,
    ) -> np.ndarray:
        carry = self.carry[name]
        if events is None and dense is None and not resets:
            return np.broadcast_to(carry, (steps, self.n))
        if dense is not None:
            cum = dense
            cum[0] += carry
            _running_sum(cum)
        else:
            cum = np.empty((steps, self.n))
            cum[:] = carry
            if events is not None:
                rows, cols, counts = events
                used, local = np.unique(cols, return_inverse=True)
                sub = np.zeros((steps, used.size))
                np.add.at(sub, (rows, local), counts)
                _running_sum(sub)
                cum[:, used] += sub
        for k, cols in resets:
            cum[k:, cols] -= cum[k - 1, cols] if k > 0 else carry[cols]
        self.carry[name] = cum[-1].copy()
        return cum

    def chunk(
        self,
        sparse: dict[str, Events | None],
        dense: dict[str, np.ndarray],
        resets: list[Reset],
        steps: int,
    ) -> dict[str, np.ndarray]:
        """Every counter over one chunk, (steps, slots) float64 (a broadcast view if flat).

        ``sparse``: each channel's events; ``dense``: per-step increments, used in place.
        """
        every = _merge(resets)
        swaps = _merge([r for r in resets if r[2]])
        out: dict[str, np.ndarray] = {}
        for name, (channels, volatile) in SPARSE_SERIES.items():
            parts = [e for e in (sparse[ch] for ch in channels) if e is not None]
            events: Events | None = None
            if len(parts) == 1:
                events = parts[0]
            elif parts:
                r, c, n = (np.concatenate(a) for a in zip(*parts, strict=True))
                events = (r, c, n)
            out[name] = self._series(name, events, None, every if volatile else swaps, steps)
        for name in DENSE_SERIES:
            out[name] = self._series(name, None, dense[name], every, steps)
        return out
