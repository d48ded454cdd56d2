"""Reset-aware arithmetic on cumulative counters.

NVML's volatile counters (single-bit ECC, PCIe replays, NVLink errors, energy) start again from 0
when the driver reloads or the node reboots. A drop is therefore a reset, not a negative
increase: the increase across it is the new value (what was counted since the reset). Gaps
(NaN) are skipped, and a series with no reading at all has no increase (NaN, not 0).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def _increase(prev: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The increase from ``prev`` to ``new``: a drop means the counter restarted from zero, so
    the increase is what it has counted since (``new``)."""
    diff = new - prev
    return np.where(diff < 0, new, diff)


def step_increases(values: npt.ArrayLike, groups: npt.ArrayLike | None = None) -> np.ndarray:
    """Increase at each reading since the previous reading (NaN where either is missing
    beyond a gap: the increase is attributed to the next present reading).

    ``groups`` (one label per reading, each group's rows together and in time order, e.g. a
    frame sorted by uuid then ts): the previous reading must be of the same group, so a GPU's
    first reading has no increase."""
    v = np.asarray(values, dtype=np.float64)
    out = np.full(v.shape, np.nan)
    present = np.flatnonzero(~np.isnan(v))
    if present.size < 2:
        return out
    vals = v[present]
    inc = _increase(vals[:-1], vals[1:])
    if groups is not None:
        g = np.asarray(groups)[present]
        inc = np.where(g[1:] == g[:-1], inc, np.nan)
    out[present[1:]] = inc
    return out


def column_increases(last: np.ndarray) -> np.ndarray:
    """``step_increases`` of each column of a 2-D array (rows in time order), vectorised: the
    increase across a gap lands on the next present row."""
    t, g = last.shape
    present = ~np.isnan(last)
    idx = np.where(present, np.arange(t)[:, None], -1)
    np.maximum.accumulate(idx, axis=0, out=idx)
    prev_idx = np.vstack([np.full((1, g), -1), idx[:-1]])
    prev = last[np.maximum(prev_idx, 0), np.arange(g)[None, :]]
    inc = _increase(prev, last)
    return np.where(present & (prev_idx >= 0), inc, np.nan)


def total_increase(values: npt.ArrayLike) -> float:
    """Reset-aware increase over the whole series; NaN with fewer than two readings."""
    inc = step_increases(values)
    if np.all(np.isnan(inc)):
        return float("nan")
    return float(np.nansum(inc))


def reset_count(values: npt.ArrayLike) -> int:
    """How many times the counter dropped (driver reloads / reboots seen)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return int(np.count_nonzero(np.diff(v) < 0))
