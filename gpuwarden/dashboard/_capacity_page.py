"""The Capacity page: GPU demand with its forecast and interval, and the TCO of getting it.

Demand comes from the file ``--plan-demand PATH`` (or ``GPUWARDEN_PLAN_DEMAND``) names: the
bundled scheduler's SQLite database, read only, or an openb pod list (``.csv``), through
``gpuwarden.planning`` as ``gpuwarden plan forecast`` reads it. Prices come from
``--plan-prices`` (``GPUWARDEN_PLAN_PRICES``), else the shipped defaults. Forecasts are cached
per file and its modification time, so a rerun on the refresh timer does not refit them.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from gpuwarden.dashboard._api import _option
from gpuwarden.errors import GpuwardenError
from gpuwarden.planning import demand as d
from gpuwarden.planning.forecast import forecast
from gpuwarden.planning.tco import (
    GUIDE_HIGH,
    OPTIONS,
    TABLE_UTILISATION,
    GpuPrices,
    load_prices,
    split,
)

SHOWN_H = 14 * 24
FORECAST_TTL_S = 600


def sources(argv: list[str], environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(demand file, price file) from ``--plan-demand``/``--plan-prices`` or the environment;
    "" where not given."""
    env = os.environ if environ is None else environ
    demand = _option(argv, "--plan-demand") or env.get("GPUWARDEN_PLAN_DEMAND", "")
    prices = _option(argv, "--plan-prices") or env.get("GPUWARDEN_PLAN_PRICES", "")
    return demand, prices


@st.cache_data(ttl=FORECAST_TTL_S, show_spinner=False)
def _demand(path: str, mtime: float) -> pd.DataFrame:
    if path.endswith(".csv"):
        records = d.records_from_openb(path)
        lo, hi = d.openb_window(records)
        return d.hourly_demand(
            records,
            start_s=math.ceil(lo / d.HOUR_S) * d.HOUR_S,
            end_s=math.floor(hi / d.HOUR_S) * d.HOUR_S,
            epoch=d.TRACE_EPOCH,
        )
    now = time.time()
    records = d.records_from_scheduler(path)
    return d.hourly_demand(records, now_s=now, end_s=math.floor(now / d.HOUR_S) * d.HOUR_S)


@st.cache_data(ttl=FORECAST_TTL_S, show_spinner=False)
def _forecast(path: str, mtime: float, column: str, hours: int) -> tuple[pd.DataFrame, str]:
    series = _demand(path, mtime)[column].iloc[-12 * 168 :]
    fc = forecast(series, hours)
    seasons = " + ".join("daily" if p == 24 else "weekly" for p in fc.periods)
    return fc.frame(), seasons


def forecast_chart(history: pd.Series, frame: pd.DataFrame) -> alt.LayerChart:
    """The last two weeks of demand, the forecast mean and its interval band."""
    past = pd.DataFrame({"hour": history.index, "gpus": history.to_numpy(), "series": "requested"})
    ahead = frame.reset_index(names="hour")
    band = alt.Chart(ahead).mark_area(opacity=0.25).encode(x="hour:T", y="lower:Q", y2="upper:Q")
    lines = pd.concat(
        [past, pd.DataFrame({"hour": ahead["hour"], "gpus": ahead["mean"], "series": "forecast"})]
    )
    line = (
        alt.Chart(lines)
        .mark_line()
        .encode(
            x=alt.X("hour:T", title="hour (UTC)"),
            y=alt.Y("gpus:Q", title="GPUs requested"),
            color="series:N",
        )
    )
    return band + line


def tco_frame(prices: GpuPrices, utilisation: np.ndarray) -> pd.DataFrame:
    """Long table: option, utilisation (%), USD per used GPU-hour."""
    rows = [
        {"option": o, "utilisation_pct": u * 100, "usd_per_gpu_hour": prices.per_used_hour(o, u)}
        for o in OPTIONS
        for u in utilisation
    ]
    return pd.DataFrame(rows)


def page(demand_path: str, prices_path: str) -> None:
    st.title("Capacity")
    if not demand_path:
        st.info("No demand history is configured. Point the dashboard at the scheduler's "
                "database or an openb pod list:")  # fmt: skip
        st.code("gpuwarden dashboard --plan-demand /var/lib/gpuwarden/scheduler.db", language="sh")
    else:
        try:
            mtime = os.path.getmtime(demand_path)
            frame = _demand(demand_path, mtime)
        except (OSError, GpuwardenError) as exc:
            st.error(f"Cannot read the demand history `{demand_path}`: {exc}")
            frame = None
        if frame is not None:
            _forecast_section(demand_path, mtime, frame)
    _tco_section(prices_path, frame if demand_path and frame is not None else None)


def _forecast_section(path: str, mtime: float, frame: pd.DataFrame) -> None:
    cols = st.columns(2)
    column = cols[0].selectbox("GPU model", list(frame.columns))
    hours = cols[1].select_slider("Forecast horizon (hours)", [24, 48, 72, 168, 336], value=168)
    try:
        with st.spinner("Fitting MSTL + ETS..."):
            fc, seasons = _forecast(path, mtime, column, hours)
    except GpuwardenError as exc:
        st.warning(f"No forecast for {column}: {exc}")
        return
    history = frame[column]
    m = st.columns(4)
    m[0].metric("Requested now", f"{history.iloc[-1]:.1f} GPUs")
    m[1].metric("Forecast mean", f"{fc['mean'].mean():.1f} GPUs")
    m[2].metric("Forecast peak (80% upper)", f"{fc['upper'].max():.1f} GPUs")
    m[3].metric("Capacity x1.3", f"{1.3 * fc['mean'].mean():.1f} GPUs")
    st.altair_chart(forecast_chart(history.iloc[-SHOWN_H:], fc), width="stretch")
    st.caption(f"GPU-hours requested per hour; seasons modelled: {seasons}; band: 80% interval. "
               "`gpuwarden plan should-scale` turns this into add / release decisions.")  # fmt: skip


def read_prices(prices_path: str) -> dict[str, GpuPrices] | None:
    """The price file (the shipped one for ""), or None after saying why it cannot be read."""
    try:
        return load_prices(prices_path or None)
    except GpuwardenError as exc:
        st.error(f"Cannot read the price file: {exc}")
        return None


def _tco_section(prices_path: str, frame: pd.DataFrame | None) -> None:
    st.subheader("Cost per GPU-hour of work")
    table = read_prices(prices_path)
    if table is None:
        return
    model = st.selectbox("Priced GPU", list(table))
    prices = table[model]
    be = prices.break_even()
    cols = st.columns(3)
    cols[0].metric(
        "Break-even utilisation (own vs on-demand)", "never" if be is None else f"{be:.0%}"
    )
    cols[1].metric("Own vs on-demand at 70%", prices.own_against_on_demand(GUIDE_HIGH))
    if frame is not None:
        s = split(frame.sum(axis=1).to_numpy(), prices)
        cols[2].metric("Split: own / elastic", f"{s.base_gpus} / {s.elastic_gpus} GPUs")
    curve = tco_frame(prices, np.linspace(0.1, 1.0, 46))
    chart = (
        alt.Chart(curve)
        .mark_line()
        .encode(
            x=alt.X("utilisation_pct:Q", title="yearly utilisation (%)"),
            y=alt.Y("usd_per_gpu_hour:Q", title="USD per used GPU-hour",
                    scale=alt.Scale(domain=[0, 3 * prices.on_demand.value], clamp=True)),
            color="option:N",
        )
    )  # fmt: skip
    st.altair_chart(chart, width="stretch")
    points = tco_frame(prices, np.array(TABLE_UTILISATION))
    st.dataframe(
        points.pivot(index="option", columns="utilisation_pct", values="usd_per_gpu_hour").round(2),
        width="stretch",
    )
    st.caption("Prices: " + (f"`{prices_path}`" if prices_path else "the shipped defaults") +
               "; edit a copy and pass it with --plan-prices.")  # fmt: skip
