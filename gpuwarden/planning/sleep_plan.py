"""Which nodes the idle-node sleep policy would put to sleep, from a store's measured history.

``sleep_plan`` takes the store's hourly rollup (``read_window(resolution_s=3600)``: each GPU's
mean ``power_w`` and ``gpu_util_pct`` per hour) and replays the policy of ``scheduler.sleep``
hour by hour: in every hour inside the window, a node whose GPUs' mean utilisation is below
``below`` sleeps, except that the calmest nodes stay awake until the awake calm nodes keep
``headroom_gpus`` GPUs (arriving critical work then finds room without a cold start). A node
with no utilisation or power figure in an hour is left awake (missing is never idle, and
what it would save is unknown).

The energy a sleeping node-hour saves is what its GPUs drew that hour (measured) plus the
node's base power (``PowerModel.base_w``, an assumption stated with every figure), less what
the sleeping node still draws (``PowerModel.sleep_w``). The wake plan: a node asleep at the end
of a window gets its Wake-on-LAN packet ``cold_start_s`` before the window ends, so it takes
work when the window does; the queue may wake it earlier at that same cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden.planning.energy import PowerModel
from gpuwarden.scheduler.sleep import SleepPolicy

HOUR_S = 3600.0


@dataclass(frozen=True)
class SleepPlan:
    """``hours``: per hour (ts), nodes asleep, fleet GPU kWh and kWh saved. ``nodes``: per node,
    GPUs, window hours seen, hours asleep, mean utilisation in the window (%), kWh saved, and
    when the plan wakes it (HH:MM, local to the window). ``kwh_total``: the fleet's measured GPU
    energy over the history."""

    hours: pd.DataFrame
    nodes: pd.DataFrame
    kwh_total: float
    kwh_saved: float
    window_hours: int


def node_hours(hourly: pd.DataFrame) -> pd.DataFrame:
    """Per node and hour: GPUs, mean utilisation (0..1; NaN where none was measured) and the
    GPUs' summed power (W; NaN where none was measured)."""
    if hourly.empty:
        return pd.DataFrame(columns=["hostname", "ts", "gpus", "util", "power_w"])
    g = hourly.groupby(["hostname", "ts"], observed=True, sort=True)
    out = pd.DataFrame({
        "gpus": g["uuid"].nunique(),
        "util": g["gpu_util_pct"].mean() / 100.0,
        "power_w": g["power_w"].sum(min_count=1),
    }).reset_index()  # fmt: skip
    out["hostname"] = out["hostname"].astype(str)
    return out


def sleep_plan(
    hourly: pd.DataFrame, policy: SleepPolicy, power: PowerModel | None = None
) -> SleepPlan:
    """Replay ``policy`` over the store's hourly rollup ``hourly`` (see the module docstring)."""
    power = power or PowerModel()
    nh = node_hours(hourly)
    kwh_total = float(nh["power_w"].sum()) / 1000.0 if len(nh) else 0.0
    # the window, asked once per distinct hour, not once per node-hour
    hours_seen, hour_of = np.unique(nh["ts"].to_numpy(dtype=np.float64), return_inverse=True)
    inside = np.array([policy.window.contains(float(t)) for t in hours_seen], dtype=bool)
    in_window_row = inside[hour_of] if len(nh) else np.zeros(0, dtype=bool)
    asleep = _asleep(nh, in_window_row, hour_of, policy)
    inside_hours = int(inside.sum())  # the distinct hours with readings, in the window
    saved_w = np.where(asleep, nh["power_w"] + power.base_w - power.sleep_w, 0.0)
    nh = nh.assign(asleep=asleep, saved_kwh=saved_w / 1000.0)
    hours = (
        nh.groupby("ts", sort=True)
        .agg(
            nodes_asleep=("asleep", "sum"),
            gpu_kwh=("power_w", "sum"),
            kwh_saved=("saved_kwh", "sum"),
        )  # fmt: skip
        .reset_index()
    )
    hours["gpu_kwh"] = hours["gpu_kwh"] / 1000.0
    in_window = nh[in_window_row]
    nodes = (
        nh.groupby("hostname", sort=True)
        .agg(gpus=("gpus", "max"), hours_asleep=("asleep", "sum"), kwh_saved=("saved_kwh", "sum"))
        .join(
            in_window.groupby("hostname").agg(
                window_hours=("ts", "size"), window_util_pct=("util", "mean")
            )
        )  # fmt: skip
        .reset_index()
    )
    nodes["window_util_pct"] = nodes["window_util_pct"] * 100.0
    nodes["wake_at"] = np.where(nodes["hours_asleep"] > 0, wake_time(policy), "")
    nodes = nodes.sort_values(["kwh_saved", "hostname"], ascending=[False, True])
    return SleepPlan(hours, nodes.reset_index(drop=True), kwh_total,
                     float(nh["saved_kwh"].sum()) if len(nh) else 0.0, inside_hours)  # fmt: skip


#: decimals of a node's mean utilisation (0..1) that rank it for sleep
TIE_DIGITS = 9


def _asleep(
    nh: pd.DataFrame, in_window: np.ndarray, hour_of: np.ndarray, policy: SleepPolicy
) -> np.ndarray:
    """Per node-hour of ``nh``: asleep under ``policy``. In each hour of the window the calm
    nodes (measured, utilisation below ``below``) sleep, except the busiest of them, kept
    awake from the busiest down while the GPUs kept so far are fewer than ``headroom_gpus``:
    for all hours at once, a node stays awake when the calm GPUs busier than it, in its
    hour, are fewer than the headroom."""
    # equal to a billionth is equal: a TSDB keeps about 12 significant digits of a rollup's
    # mean (VictoriaMetrics' decimals), SQLite all 17, and a tie must break the same way on both
    util = nh["util"].to_numpy(dtype=np.float64).round(TIE_DIGITS)
    measured = ~np.isnan(util) & nh["power_w"].notna().to_numpy()
    calm = np.flatnonzero(in_window & measured & (util < policy.below))
    asleep = np.zeros(len(nh), dtype=bool)
    if not len(calm):
        return asleep
    host_rank = pd.factorize(nh["hostname"].astype(str), sort=True)[0]
    # calm node-hours by hour, then from the busiest down (utilisation, then hostname, both
    # descending: the reverse of the calmest-first order)
    order = calm[np.lexsort((-host_rank[calm], -util[calm], hour_of[calm]))]
    gpus = nh["gpus"].to_numpy(dtype=np.int64)[order]
    hour = hour_of[order]
    starts = np.flatnonzero(np.r_[True, hour[1:] != hour[:-1]])
    busier = np.cumsum(gpus) - gpus  # the GPUs before each, in its hour only
    busier -= np.repeat(busier[starts], np.diff(np.r_[starts, len(order)]))
    asleep[order[busier >= policy.headroom_gpus]] = True
    return asleep


def wake_time(policy: SleepPolicy) -> str:
    """When a node asleep at the window's end gets its magic packet (HH:MM): the cold start
    before the end, so it takes work as the window closes."""
    h, m = policy.window.end.split(":")
    minutes = (int(h) * 60 + int(m) - math.ceil(policy.cold_start_s / 60.0)) % (24 * 60)
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


__all__ = ["SleepPlan", "node_hours", "sleep_plan", "wake_time"]
