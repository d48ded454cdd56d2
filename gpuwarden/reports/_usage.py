"""Utilisation, memory and energy by GPU model, from the hourly rollup.

Utilisation is ``gpu_util_pct`` (nvidia-smi ``utilization.gpu``, DCGM_FI_DEV_GPU_UTIL), memory
``fb_used_mib / fb_total_mib``. Energy integrates each hour's mean ``power_w`` over that hour, so
it counts only the GPU-hours that reported power (``gpu_hours_measured``): a silent GPU adds
nothing rather than a guess.
"""

from __future__ import annotations

import math

import pandas as pd

from gpuwarden.reports.model import Energy, ModelUsage, Utilisation

#: A GPU whose mean utilisation over the period stays below this is idle capacity.
IDLE_UTIL_PCT = 5.0
USAGE_FIELDS = ("gpu_util_pct", "fb_used_mib", "fb_total_mib", "power_w")


def _mean(s: pd.Series) -> float | None:
    s = s.dropna()
    return round(float(s.mean()), 1) if len(s) else None


def utilisation(hourly: pd.DataFrame) -> Utilisation | None:
    if hourly.empty or hourly["gpu_util_pct"].notna().sum() == 0:
        return None
    frame = hourly.assign(mem_pct=100.0 * hourly["fb_used_mib"] / hourly["fb_total_mib"])
    by_model = []
    for model, g in frame.groupby("model"):
        power = g["power_w"].dropna()
        by_model.append(
            ModelUsage(
                model=str(model),
                gpus=int(g["uuid"].nunique()),
                gpu_util_pct=_mean(g["gpu_util_pct"]),
                memory_used_pct=_mean(g["mem_pct"]),
                energy_kwh=round(float(power.sum()) / 1000.0, 1) if len(power) else None,
            )
        )
    per_gpu = frame.groupby("uuid")["gpu_util_pct"].mean()
    return Utilisation(
        fleet_gpu_util_pct=_mean(frame["gpu_util_pct"]),
        fleet_memory_used_pct=_mean(frame["mem_pct"]),
        by_model=by_model,
        idle_gpus=int((per_gpu < IDLE_UTIL_PCT).sum()),
    )


def energy(hourly: pd.DataFrame, grid_g_per_kwh: float) -> Energy | None:
    """kWh from hourly mean power; CO2 only when a grid intensity is set (> 0)."""
    power = hourly["power_w"].dropna() if "power_w" in hourly else pd.Series(dtype=float)
    if power.empty:
        return None
    kwh = float(power.sum()) / 1000.0  # each row: one hour at its mean power
    grid = grid_g_per_kwh if grid_g_per_kwh > 0 and math.isfinite(grid_g_per_kwh) else None
    return Energy(
        energy_kwh=round(kwh, 1),
        gpu_hours_measured=float(len(power)),
        grid_g_co2_per_kwh=grid,
        co2_kg=round(kwh * grid / 1000.0, 1) if grid is not None else None,
    )
