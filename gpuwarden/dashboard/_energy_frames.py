"""The Energy and spot page's tables, from the store's hourly rollup and the scheduler's JSON
(``_energy_page`` draws them; the tests check them)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from gpuwarden.dashboard._decisions import fmt_utc
from gpuwarden.planning.sleep_plan import node_hours
from gpuwarden.planning.tco import GpuPrices


def energy_by_node(hourly: pd.DataFrame, grid_g_per_kwh: float | None) -> pd.DataFrame:
    """Per node: GPUs, GPU-hours measured, kWh and kg CO2 (NaN when the grid is unknown),
    most energy first."""
    nh = node_hours(hourly)
    if nh.empty:
        return pd.DataFrame(columns=["node", "gpus", "gpu_hours", "kwh", "co2_kg"])
    measured = hourly.dropna(subset=["power_w"]).groupby("hostname", observed=True).size()
    out = nh.groupby("hostname").agg(gpus=("gpus", "max"), kwh=("power_w", "sum"))
    out["kwh"] = out["kwh"] / 1000.0
    out["gpu_hours"] = measured.reindex(out.index).fillna(0).astype(float)
    out["co2_kg"] = out["kwh"] * grid_g_per_kwh / 1000.0 if grid_g_per_kwh is not None else math.nan
    out = out.reset_index(names="node")[["node", "gpus", "gpu_hours", "kwh", "co2_kg"]]
    return out.sort_values(["kwh", "node"], ascending=[False, True]).reset_index(drop=True)


def energy_by_tenant(billing: list[dict[str, Any]]) -> pd.DataFrame:
    """Per tenant from ``/v1/billing``: GPU-hours, kWh, kg CO2 (NaN when any of its jobs'
    figures is unknown: missing is never zero) and how its kWh was found."""
    cols = ["tenant", "gpu_hours", "kwh", "co2_kg", "source"]
    if not billing:
        return pd.DataFrame(columns=cols)
    frame = pd.DataFrame(billing)
    for c in ("kwh", "co2_kg"):
        frame[c] = pd.to_numeric(frame.get(c), errors="coerce")
    if "kwh_source" not in frame:
        frame["kwh_source"] = "estimated"
    out = frame.groupby("tenant").agg(
        gpu_hours=("gpu_hours", "sum"),
        kwh=("kwh", lambda s: s.sum() if s.notna().all() else math.nan),
        co2_kg=("co2_kg", lambda s: s.sum() if s.notna().all() else math.nan),
        source=("kwh_source", lambda s: ", ".join(sorted(set(map(str, s))))),
    )
    return out.reset_index().sort_values("gpu_hours", ascending=False).reset_index(drop=True)


def advice_frame(rows: list[Any]) -> pd.DataFrame:
    """``PowerAdvice`` rows as a table (cap NaN: leave the GPU at full clocks)."""
    return pd.DataFrame([{
        "class": a.job_class, "samples": a.gpus, "mean_w": a.mean_power_w,
        "mean_util_pct": a.mean_util_pct, "board_w": a.board_w,
        "cap_w": math.nan if a.cap_w is None else a.cap_w, "power_saved_pct": a.power_saved_pct,
        "slowdown_pct": a.slowdown_pct, "why": a.why} for a in rows])  # fmt: skip


def nodes_frame(nodes: list[dict[str, Any]]) -> pd.DataFrame:
    """Per node from ``/v1/nodes``: cost class, state, sleep state, GPUs, reclaim deadline."""
    return pd.DataFrame([{
        "node": n["node"], "cost_class": n.get("cost_class") or "owned", "state": n["state"],
        "sleep": n.get("sleep") or "unknown", "gpus": len(n.get("gpus") or ()),
        "reclaim_deadline": n.get("reclaim_deadline")} for n in nodes],
        columns=["node", "cost_class", "state", "sleep", "gpus", "reclaim_deadline"])  # fmt: skip


def reclaims_frame(audit: list[dict[str, Any]], since: float) -> pd.DataFrame:
    """The scheduler's reclaim rows since ``since``, newest first."""
    rows = sorted((r for r in audit if r["action"] == "reclaim" and r["at"] >= since),
                  key=lambda r: r["at"], reverse=True)  # fmt: skip
    return pd.DataFrame({"time": [fmt_utc(r["at"]) for r in rows],
                         "node": [r.get("node") for r in rows],
                         "actor": [r["actor"] for r in rows],
                         "reason": [r.get("reason") or "" for r in rows]})  # fmt: skip


def spot_savings(
    jobs: list[dict[str, Any]], bill: list[dict[str, Any]], nodes: list[dict[str, Any]],
    prices: Mapping[str, GpuPrices],
) -> pd.DataFrame:  # fmt: skip
    """Per GPU model: the billed GPU-hours of jobs whose current attempt runs only on spot
    nodes, what they cost at on-demand and at spot prices, and the saving (NaN: not priced)."""
    spot = {n["node"]: next((g["model"] for g in n.get("gpus") or ()), "")
            for n in nodes if n.get("cost_class") == "spot"}  # fmt: skip
    model_of: dict[str, str] = {}
    for j in jobs:
        placed = {t.get("node") for t in j.get("placement") or ()}
        if placed and placed <= spot.keys():
            model_of[j["job_id"]] = spot[sorted(placed)[0]]
    hours: dict[str, float] = {}
    for r in bill:
        if r["job_id"] in model_of:
            m = model_of[r["job_id"]]
            hours[m] = hours.get(m, 0.0) + float(r["gpu_hours"])
    rows = []
    for model, h in sorted(hours.items()):
        p = next((v for k, v in prices.items() if model.upper().startswith(k.upper())), None)
        od = math.nan if p is None else h * p.on_demand.value
        sp = math.nan if p is None else h * p.spot.value
        rows.append({"gpu_model": model, "spot_gpu_hours": h, "on_demand_usd": od,
                     "spot_usd": sp, "saved_usd": od - sp,
                     "saved_pct": 100 * (1 - sp / od) if od > 0 else math.nan})  # fmt: skip
    return pd.DataFrame(rows, columns=["gpu_model", "spot_gpu_hours", "on_demand_usd",
                                       "spot_usd", "saved_usd", "saved_pct"])  # fmt: skip
