"""Raw samples and store rollups -> one canonical hourly frame per GPU.

Features are computed over clock hours, the store's rollup bucket. Whether an hour comes from the
store's hourly rollups or from raw samples aggregated the same way (``store.window.aggregate``,
by ``read_window`` or ``from_raw``), it ends up in the same shape: one row
per (uuid, hour) with counters as the *last* value read in the hour (so increases are taken
later, reset-aware), gauges as the hour's mean, a few peaks as ``<field>_max``, and a
hardware-slowdown flag from the clock-event bits. ``hour`` is the bucket start (Unix s).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuwarden.store.window import aggregate
from gpuwarden.telemetry import (
    CLOCK_EVENT_HW_POWER_BRAKE,
    CLOCK_EVENT_HW_SLOWDOWN,
    CLOCK_EVENT_HW_THERMAL,
)

HOUR_S = 3600

#: Cumulative counters the features take hourly increases of.
COUNTERS: tuple[str, ...] = (
    "ecc_sbe_volatile_total",
    "ecc_sbe_aggregate_total",
    "ecc_dbe_volatile_total",
    "ecc_dbe_aggregate_total",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "retired_pages_sbe",
    "retired_pages_dbe",
    "pcie_replay_total",
    "nvlink_crc_flit_errors_total",
    "nvlink_crc_data_errors_total",
    "nvlink_replay_errors_total",
    "nvlink_recovery_errors_total",
    "thermal_violation_us",
)
#: Gauges averaged over the hour.
MEANS: tuple[str, ...] = (
    "gpu_temp_c",
    "mem_temp_c",
    "power_w",
    "gpu_util_pct",
    "pcie_link_width",
    "pcie_link_width_max",
    "pcie_link_gen_max",
)
#: Gauges whose peak in the hour matters; read from the rollups' ``<field>_max`` columns.
MAXES: tuple[str, ...] = (
    "mem_temp_c",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "retired_pages_pending",
)
REASONS = "clock_event_reasons"
_HW_BITS = CLOCK_EVENT_HW_SLOWDOWN | CLOCK_EVENT_HW_THERMAL | CLOCK_EVENT_HW_POWER_BRAKE

#: Field names to read from hourly windows.
ROLLUP_FIELDS: tuple[str, ...] = (*COUNTERS, *MEANS, *(f"{m}_max" for m in MAXES), REASONS)
#: Columns of the canonical hourly frame after ``uuid`` and ``hour``.
VALUE_COLUMNS: tuple[str, ...] = (*COUNTERS, *MEANS, *(f"{m}_max" for m in MAXES), "hw_slowdown")


def _hw_flag(bits: pd.Series | np.ndarray) -> np.ndarray:
    """1 where a hardware slowdown / thermal / power-brake bit is set, NaN where not read."""
    raw = np.asarray(bits, dtype=np.float64)
    ok = np.isfinite(raw) & (raw >= 0)
    ints = np.where(ok, raw, 0).astype(np.int64)
    return np.where(ok, ((ints & _HW_BITS) != 0).astype(np.float64), np.nan)


def from_raw(frame: pd.DataFrame) -> pd.DataFrame:
    """Raw samples in memory (simulator chunks; any order) as the canonical hourly frame,
    aggregated by the store's own rollup (``window.aggregate``), rows in the order each
    (uuid, hour) first appears in time."""
    if frame.empty:
        return empty()
    work = frame.assign(uuid=frame["uuid"].astype(str)).sort_values("ts", kind="stable")
    hours = aggregate(work, HOUR_S, ROLLUP_FIELDS)
    order = work[["uuid"]].assign(ts=np.floor(work["ts"].to_numpy() / HOUR_S) * HOUR_S)
    order = order.drop_duplicates(ignore_index=True)
    at = pd.MultiIndex.from_frame(hours[["uuid", "ts"]]).get_indexer(
        pd.MultiIndex.from_frame(order)
    )
    return from_rollups(hours.iloc[at].reset_index(drop=True))


def from_rollups(frame: pd.DataFrame) -> pd.DataFrame:
    """An hourly window (``store.read_window(resolution_s=3600, fields=ROLLUP_FIELDS)``:
    rollups and the raw tail aggregated alike) as the canonical frame."""
    if frame.empty:
        return empty()
    out = pd.DataFrame(
        {
            "uuid": frame["uuid"].astype(str).to_numpy(),
            "hour": frame["ts"].to_numpy(dtype=np.float64).astype(np.int64),
        }
    )
    for name in (*COUNTERS, *MEANS, *(f"{m}_max" for m in MAXES)):
        out[name] = frame[name].to_numpy(dtype=np.float64) if name in frame.columns else np.nan
    out["hw_slowdown"] = _hw_flag(frame[REASONS]) if REASONS in frame.columns else np.nan
    return out


def combine(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate hourly frames; an hour split across two parts (a chunk boundary inside the
    hour) is merged: the later part's counters, the mean of the means, the larger peak."""
    parts = [p for p in parts if not p.empty]
    if not parts:
        return empty()
    out = pd.concat(parts, ignore_index=True)
    dup = out.duplicated(["uuid", "hour"], keep=False).to_numpy()
    if not dup.any():
        return out
    grouped = out[dup].groupby(["uuid", "hour"], sort=False)
    merged = pd.concat(
        [
            grouped[list(COUNTERS)].last(),
            grouped[list(MEANS)].mean(),
            grouped[[f"{m}_max" for m in MAXES] + ["hw_slowdown"]].max(),
        ],
        axis=1,
    ).reset_index()
    return pd.concat([out[~dup], merged[out.columns]], ignore_index=True)


def empty() -> pd.DataFrame:
    data: dict[str, object] = {
        "uuid": pd.Series([], dtype=object),
        "hour": pd.Series([], dtype=np.int64),
    }
    data.update({c: pd.Series([], dtype=np.float64) for c in VALUE_COLUMNS})
    return pd.DataFrame(data)
