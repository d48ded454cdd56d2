"""Reset-aware arithmetic on cumulative counters.

NVML's volatile counters (single-bit ECC, PCIe replays, NVLink errors, energy) start again from 0
when the driver reloads or the node reboots. A drop is therefore a reset, not a negative
increase: the increase across it is the new value (what was counted since the reset). Gaps
(NaN) are skipped, and a series with no reading at all has no increase (NaN, not 0).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def step_increases(values: npt.ArrayLike) -> np.ndarray:
    """Increase at each reading since the previous reading (NaN where either is missing
    beyond a gap: the increase is attributed to the next present reading)."""
    v = np.asarray(values, dtype=np.float64)
    out = np.full(v.shape, np.nan)
    present = np.flatnonzero(~np.isnan(v))
    if present.size < 2:
        return out
    vals = v[present]
    diff = np.diff(vals)
    # a drop means the counter restarted from zero: count what it has counted since
    inc = np.where(diff < 0, vals[1:], diff)
    out[present[1:]] = inc
    return out


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
