"""The Energy and spot page: kWh and CO2, the idle-sleep plan, power caps, spot and reclaims.

Each section says where its figures come from, and says so plainly when there are none:

- **kWh and CO2 by node**: the store's hourly rollup (each GPU's mean ``power_w`` for an hour
  is that hour's energy, as the weekly report counts it), over the sidebar's time range up to
  the newest sample; CO2 from the ``grid_intensity_g_per_kwh`` setting (unset: unknown).
- **by tenant**: the bundled scheduler's bill (``/v1/billing``: measured kWh where its agents
  metered the GPUs, else estimated at board power), with ``--scheduler-url``.
- **idle-sleep plan**: ``planning.sleep_plan`` over the same hourly rollup, with the window,
  threshold and headroom picked on the page (the guideline's policy by default).
- **power caps per job class**: ``planning.energy_samples`` over the store, job classes from
  the scheduler database (``--scheduler-db`` or ``GPUWARDEN_SCHEDULER_DB``, else a
  ``--plan-demand`` database) or the store's Kubernetes namespaces.
- **spot and reclaims**: ``/v1/nodes`` (cost class, sleep state, reclaim deadline) and the
  reclaim rows of ``/v1/audit``; the saving is the billed GPU-hours of jobs running on spot
  nodes (``/v1/jobs``, ``/v1/billing``) priced at the price file's on-demand and spot rates.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from gpuwarden.config import grid_intensity, load_settings
from gpuwarden.dashboard import _cache
from gpuwarden.dashboard._api import Api, ApiError, _option
from gpuwarden.dashboard._capacity_page import read_prices, sources
from gpuwarden.dashboard._charts import bars_height
from gpuwarden.dashboard._context import fmt_time
from gpuwarden.dashboard._decisions import fmt_utc
from gpuwarden.dashboard._energy_frames import (
    advice_frame,
    energy_by_node,
    energy_by_tenant,
    nodes_frame,
    reclaims_frame,
    spot_savings,
)
from gpuwarden.errors import GpuwardenError
from gpuwarden.planning.energy import PowerModel
from gpuwarden.planning.sleep_plan import sleep_plan
from gpuwarden.scheduler.sleep import SleepPolicy, SleepWindow

SHOWN_NODES = 20
AUDIT_LIMIT = 5000


def scheduler_db(argv: list[str], environ: Mapping[str, str] | None = None) -> str:
    """The scheduler database for job classes: ``--scheduler-db``, ``GPUWARDEN_SCHEDULER_DB``,
    else a ``--plan-demand`` (``GPUWARDEN_PLAN_DEMAND``) that is not an openb CSV; "" if none."""
    env = os.environ if environ is None else environ
    path = _option(argv, "--scheduler-db") or env.get("GPUWARDEN_SCHEDULER_DB", "")
    if path:
        return path
    demand = _option(argv, "--plan-demand") or env.get("GPUWARDEN_PLAN_DEMAND", "")
    return "" if demand.endswith(".csv") else demand


@st.cache_data(ttl=_cache.TTL_S, show_spinner="Reading hourly power...")
def _hourly(url: str, start: float, end: float) -> pd.DataFrame:
    frame = _cache.store(url).read_window(
        start=start, end=end, fields=["power_w", "gpu_util_pct"], resolution_s=3600
    )
    return frame[(frame["ts"] >= start) & (frame["ts"] < end)]


@st.cache_data(ttl=_cache.TTL_S, show_spinner="Reading power by job class...")
def _advice(url: str, start: float, end: float, db: str, mtime: float) -> tuple[pd.DataFrame, str]:
    from gpuwarden.planning.energy_samples import from_store

    got = from_store(_cache.store(url), start, end, scheduler_db=db or None)
    return advice_frame(got.advice()), got.source


def page(
    url: str, missing: str | None, scheduler: Api | None, range_s: float, now: float,
    argv: list[str],
) -> None:  # fmt: skip
    st.title("Energy and spot")
    try:
        grid = grid_intensity(load_settings())
    except GpuwardenError as exc:
        st.error(f"Cannot read the grid intensity setting: {exc}")
        grid = None
    hourly, end = _store_hours(url, missing, range_s)
    if hourly is None:  # no telemetry: the scheduler's sections cover the range up to now
        end = _cache.bucket(now)
    start = end - range_s
    if hourly is not None:
        _energy_section(hourly, grid, start, end)
    reads = _scheduler_reads(scheduler, start, now)
    _tenant_section(scheduler, reads)
    if hourly is not None:
        _sleep_section(hourly, None if reads is None else reads.nodes)
        _advice_section(url, start, end, scheduler_db(argv))
    _spot_section(reads, start, sources(argv)[1])


def _store_hours(
    url: str, missing: str | None, range_s: float
) -> tuple[pd.DataFrame | None, float]:
    if missing:
        st.info(f"{missing} kWh by node, the sleep plan and power caps read GPU telemetry from "
                f"the store; start `gpuwarden collect --store {url}`.")  # fmt: skip
        return None, 0.0
    try:
        snap = _cache.snapshot(url)
        if snap is None:
            st.info(f"The store `{url}` holds no GPU telemetry yet: no kWh by node, sleep plan "
                    "or power caps until `gpuwarden collect` writes some.")  # fmt: skip
            return None, 0.0
        # whole hours only: an hour still being sampled would count as a full hour at its mean
        end = float(math.floor((snap.as_of + snap.step_s) / 3600.0) * 3600.0)
        return _hourly(url, end - range_s, end), end
    except GpuwardenError as exc:
        st.error(f"Cannot read the store `{url}`: {exc}")
        return None, 0.0


def _energy_section(hourly: pd.DataFrame, grid: float | None, start: float, end: float) -> None:
    by_node = energy_by_node(hourly, grid)
    st.caption(f"{fmt_time(start)} to {fmt_time(end)} · whole hours, hourly means from the store")
    cols = st.columns(3)
    kwh = float(by_node["kwh"].sum()) if len(by_node) else math.nan
    cols[0].metric("GPU energy", "–" if math.isnan(kwh) else f"{kwh:,.1f} kWh",
                   help="Sum over GPUs of each hour's mean DCGM_FI_DEV_POWER_USAGE")  # fmt: skip
    cols[1].metric("CO2", "unknown" if grid is None or math.isnan(kwh)
                   else f"{kwh * grid / 1000.0:,.1f} kg",
                   help="kWh x grid_intensity_g_per_kwh")  # fmt: skip
    cols[2].metric("GPU-hours measured", f"{by_node['gpu_hours'].sum():,.0f}")
    if grid is None:
        st.caption("CO2 is unknown: set `grid_intensity_g_per_kwh` (gCO2e per kWh).")
    st.subheader("kWh and CO2 by node")
    if by_node.empty or by_node["kwh"].isna().all():
        st.info("No power was measured in this time range.")
        return
    shown = by_node.head(SHOWN_NODES)
    st.altair_chart(alt.Chart(shown).mark_bar().encode(
        x=alt.X("kwh:Q", title="kWh"), y=alt.Y("node:N", sort="-x", title=None),
        tooltip=list(shown)).properties(height=bars_height(len(shown))), width="stretch")  # fmt: skip
    # no CO2 column of "None"s where the grid intensity is unknown (the caption above says so)
    table = by_node if grid is not None else by_node.drop(columns=["co2_kg"])
    st.dataframe(table, hide_index=True, key="energy_nodes", column_config={
        "kwh": st.column_config.NumberColumn("kWh", format="%.2f"),
        "co2_kg": st.column_config.NumberColumn("kg CO2", format="%.2f"),
        "gpu_hours": st.column_config.NumberColumn("GPU-hours", format="%.0f")})  # fmt: skip


@dataclass(frozen=True)
class SchedulerReads:
    """What the page reads from the scheduler; ``jobs`` only where a spot node exists."""

    nodes: list[dict[str, Any]]
    audit: list[dict[str, Any]]
    bill: list[dict[str, Any]]
    jobs: list[dict[str, Any]] | None


def _scheduler_reads(api: Api | None, since: float, now: float) -> SchedulerReads | None:
    if api is None or not api.token:
        return None
    get = lambda path, *params: _cache.api_get(api.base_url, path, params, api)  # noqa: E731
    try:
        nodes = get("/v1/nodes")
        audit = get("/v1/audit", ("limit", AUDIT_LIMIT), ("action", "reclaim"), ("since", since))
        bill = get("/v1/billing", ("since", since), ("until", _cache.bucket(now)))
        spot = any(n.get("cost_class") == "spot" for n in nodes)
        jobs = get("/v1/jobs") if spot else None
    except ApiError as exc:
        st.error(f"Cannot read the scheduler: {exc}")
        return None
    return SchedulerReads(nodes, audit, bill, jobs)


def _tenant_section(api: Api | None, reads: SchedulerReads | None) -> None:
    st.subheader("kWh and CO2 by tenant")
    if api is None or not api.token:
        st.info("No scheduler is configured (`--scheduler-url` and GPUWARDEN_SCHEDULER_TOKEN): "
                "kWh by tenant comes from the bundled scheduler's bill.")  # fmt: skip
        return
    if reads is None:
        return
    tenants = energy_by_tenant(reads.bill)
    if tenants.empty:
        st.info("The scheduler billed no GPU-hours in this time range.")
        return
    drawn = tenants.dropna(subset=["kwh"])
    st.altair_chart(alt.Chart(drawn).mark_bar().encode(
        x=alt.X("kwh:Q", title="kWh"), y=alt.Y("tenant:N", sort="-x", title=None),
        tooltip=list(tenants)).properties(height=bars_height(len(drawn))), width="stretch")  # fmt: skip
    if tenants["co2_kg"].isna().all():
        tenants = tenants.drop(columns=["co2_kg"])
    st.dataframe(tenants, hide_index=True, key="energy_tenants", column_config={
        "gpu_hours": st.column_config.NumberColumn("GPU-hours", format="%.2f"),
        "kwh": st.column_config.NumberColumn("kWh", format="%.2f"),
        "co2_kg": st.column_config.NumberColumn("kg CO2", format="%.2f"),
        "source": "kWh from"})  # fmt: skip
    st.caption("Measured: the GPUs' energy counters, sent by the agents; estimated: GPU-hours "
               "at the GPU model's board power. Blank: unknown (a job's GPU model or the grid "
               "intensity is not known).")  # fmt: skip


def _sleep_chart(hours: pd.DataFrame) -> None:
    """Nodes asleep and kWh saved, hour by hour."""
    chart = alt.Chart(hours.assign(hour=pd.to_datetime(hours["ts"], unit="s", utc=True)))
    st.altair_chart(alt.layer(
        chart.mark_area(opacity=0.4).encode(x=alt.X("hour:T", title="hour (UTC)"),
                                            y=alt.Y("nodes_asleep:Q", title="nodes asleep")),
        chart.mark_line(color="#2ca02c").encode(x="hour:T", y=alt.Y(
            "kwh_saved:Q", title="kWh saved per hour"))).resolve_scale(y="independent"),
        width="stretch")  # fmt: skip


def _sleep_section(hourly: pd.DataFrame, nodes: list[dict[str, Any]] | None) -> None:
    st.subheader("Idle-node sleep plan")
    cols = st.columns(4)
    window = cols[0].text_input("Window (UTC)", "02:00-06:00", key="sleep_window")
    weekends = cols[1].checkbox("and weekends", value=True, key="sleep_weekends")
    below = cols[2].slider("Below utilisation", 0.0, 0.5, 0.2, 0.05, key="sleep_below")
    headroom = int(cols[3].number_input("Headroom (GPUs)", 0, 4096, 8, key="sleep_headroom"))
    try:
        policy = SleepPolicy(SleepWindow.parse(window, weekends=weekends), below=below,
                             headroom_gpus=headroom)  # fmt: skip
    except GpuwardenError as exc:
        st.error(str(exc))
        return
    power = PowerModel()
    plan = sleep_plan(hourly, policy, power)
    if plan.window_hours == 0:
        st.info("No hour of this time range falls inside the window: pick a longer range.")
        return
    would = plan.nodes[plan.nodes["hours_asleep"] > 0]
    m = st.columns(4)
    m[0].metric("Nodes that would sleep", f"{len(would):,} of {len(plan.nodes):,}")
    m[1].metric("kWh saved", f"{plan.kwh_saved:,.1f}")
    share = plan.kwh_saved / plan.kwh_total if plan.kwh_total > 0 else math.nan
    m[2].metric("of the GPUs' kWh", "–" if math.isnan(share) else f"{share:.0%}")
    m[3].metric("Window hours", f"{plan.window_hours}")
    if len(would):
        _sleep_chart(plan.hours)
        table = would[
            ["hostname", "gpus", "window_util_pct", "hours_asleep", "kwh_saved", "wake_at"]
        ]
        st.dataframe(table, hide_index=True, key="sleep_plan", column_config={
            "hostname": "node", "window_util_pct": st.column_config.NumberColumn(
                "util in window (%)", format="%.1f"),
            "hours_asleep": "hours asleep", "kwh_saved": st.column_config.NumberColumn(
                "kWh saved", format="%.2f"),
            "wake_at": "woken at (UTC)"})  # fmt: skip
    else:  # no chart: a flat line at 0 says no more than this
        st.success("No node idles below the threshold in the window: nothing would sleep.")
    st.caption(
        f"Saved: the GPUs' measured power plus {power.base_w:g} W of node base power, less "
        f"{power.sleep_w:g} W asleep (assumptions, docs/planning.md). Wake plan: a Wake-on-LAN "
        f"packet {policy.cold_start_s / 60:g} min before the window ends (cold start), or at "
        "once when the queue needs the node; critical work keeps the headroom awake. "
        "`gpuwarden scheduler serve --sleep on` runs this policy."
    )
    if nodes is not None:
        live = nodes_frame(nodes)
        if (live["sleep"] == "off").all():
            st.caption("The scheduler runs no sleep policy now (`--sleep off`).")
        else:
            counts = live["sleep"].value_counts().to_dict()
            st.caption("Now, in the scheduler: " + ", ".join(
                f"{v} {k}" for k, v in sorted(counts.items())))  # fmt: skip


def _advice_section(url: str, start: float, end: float, db: str) -> None:
    st.subheader("Power caps per job class")
    try:
        mtime = os.path.getmtime(db) if db else 0.0
        advice, source = _advice(url, start, end, db, mtime)
    except (OSError, GpuwardenError) as exc:
        st.info(f"No advice: {exc}")
        return
    long = advice.melt(id_vars="class", value_vars=["mean_w", "cap_w", "board_w"],
                       var_name="figure", value_name="watts").dropna()  # fmt: skip
    st.altair_chart(alt.Chart(long).mark_bar().encode(
        x=alt.X("watts:Q", title="W per GPU"), y=alt.Y("figure:N", title=None),
        row=alt.Row("class:N", title=None), color="figure:N"), width="stretch")  # fmt: skip
    st.dataframe(advice, hide_index=True, key="power_advice", column_config={
        "mean_w": st.column_config.NumberColumn("mean W", format="%.0f"),
        "mean_util_pct": st.column_config.NumberColumn("mean util %", format="%.0f"),
        "board_w": st.column_config.NumberColumn("board W", format="%.0f"),
        "cap_w": st.column_config.NumberColumn("cap W", format="%.0f"),
        "power_saved_pct": st.column_config.NumberColumn("power saved %", format="%.0f"),
        "slowdown_pct": st.column_config.NumberColumn("slowdown %", format="%.0f"),
        "why": st.column_config.TextColumn("why", width="large")})  # fmt: skip
    st.caption(f"Classes from {source}. Blank cap: full clocks. `gpuwarden energy advise` prints "
               "the same; `gpuwarden agent --power-caps` applies caps through NVML.")  # fmt: skip


def _spot_section(reads: SchedulerReads | None, since: float, prices_path: str) -> None:
    st.subheader("Spot capacity and reclaims")
    if reads is None:
        st.info("No scheduler data: spot nodes, reclaims and sleep states come from "
                "`gpuwarden scheduler serve` (`--scheduler-url`).")  # fmt: skip
        return
    live = nodes_frame(reads.nodes)
    by_class = live.groupby("cost_class").agg(nodes=("node", "size"), gpus=("gpus", "sum"))
    reclaims = reclaims_frame(reads.audit, since)
    closed = live[live["reclaim_deadline"].notna()]
    m = st.columns(3)
    m[0].metric("Spot GPUs", f"{int(by_class['gpus'].get('spot', 0)):,} of "
                f"{int(by_class['gpus'].sum()):,}")  # fmt: skip
    m[1].metric("Reclaims in range", f"{len(reclaims):,}")
    m[2].metric("Nodes closed by a reclaim", f"{len(closed):,}")
    st.dataframe(by_class.reset_index(), hide_index=True, key="cost_classes")
    if len(closed):
        st.dataframe(closed.assign(reclaim_deadline=[fmt_utc(t) for t in closed["reclaim_deadline"]]),
                     hide_index=True, key="reclaimed_nodes")  # fmt: skip
    if reclaims.empty:
        st.success("No reclaim notice in this time range.")
    else:
        st.dataframe(reclaims, hide_index=True, key="reclaims")
    if int(by_class["nodes"].get("spot", 0)) == 0:
        st.info("No spot node is registered: there are no spot savings to measure here. "
                "`gpuwarden spot simulate` estimates them for a hybrid fleet.")  # fmt: skip
        return
    st.markdown("**Spot savings in this time range**")
    prices = read_prices(prices_path)
    if prices is None:
        return
    saved = spot_savings(reads.jobs or [], reads.bill, reads.nodes, prices)
    if saved.empty:
        st.info("No billed GPU-hours ran on spot nodes in this time range.")
        return
    st.dataframe(saved, hide_index=True, key="spot_savings", column_config={
        "spot_gpu_hours": st.column_config.NumberColumn("spot GPU-hours", format="%.2f"),
        "on_demand_usd": st.column_config.NumberColumn("at on-demand (USD)", format="%.2f"),
        "spot_usd": st.column_config.NumberColumn("at spot (USD)", format="%.2f"),
        "saved_usd": st.column_config.NumberColumn("saved (USD)", format="%.2f"),
        "saved_pct": st.column_config.NumberColumn("saved %", format="%.0f")})  # fmt: skip
    st.caption("GPU-hours of jobs whose current attempt runs on spot nodes, priced at the price "
               "file's cloud on-demand and spot rates (" + (f"`{prices_path}`" if prices_path
               else "the shipped defaults") + "); blank: the GPU model is not priced. The "
               "work reclaims cost is in the reclaim rows above; `gpuwarden spot simulate` "
               "gives both for a whole month.")  # fmt: skip
