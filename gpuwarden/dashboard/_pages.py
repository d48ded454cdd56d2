"""The dashboard's pages: the fleet overview, the GPUs needing attention, the empty store.

Each page takes a ``Context`` (``_context``) and draws what ``data`` returns through the caches
in ``_cache``; the GPU page lives in ``_gpu_page``.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import streamlit as st

from gpuwarden.dashboard import _cache, _charts, _decisions, data
from gpuwarden.dashboard._context import Context, fmt_age, fmt_time, states, verdicts_note
from gpuwarden.wording import counted


def how_to_collect(url: str) -> None:
    st.markdown("**Start collecting** into this store, on each GPU node or from a central host:")
    st.code(
        f"gpuwarden collect --collector nvml:// --store {url}\n"
        f"gpuwarden collect --collector 'dcgm+http://node1:9400/metrics,node2:9400/metrics' --store {url}",
        language="sh",
    )
    st.markdown("Or fill it with a simulated fleet to try the dashboard:")
    st.code(f"gpuwarden simulate --store {url} --nodes 16 --days 7 --accel 20", language="sh")
    st.caption("This page re-reads the store on its own; no restart needed.")


def empty_store(url: str, why: str) -> None:
    st.title("GPU fleet health")
    st.info(f"{why} Nothing to show until a collector writes GPU samples to `{url}`.")
    how_to_collect(url)


def _header(ctx: Context, title: str) -> None:
    snap = ctx.snap
    st.title(title)
    st.caption(
        f"{counted(snap.gpus, 'GPU')} · as of {fmt_time(snap.as_of)} · sampled every {fmt_age(snap.step_s)} · "
        f"store `{ctx.url}`"
    )
    if not snap.live:
        st.warning(
            f"No sample for {fmt_age(ctx.now - snap.newest_ts)}: is `gpuwarden collect` running? "
            f"Showing the fleet as of the newest sample ({fmt_time(snap.newest_ts)})."
        )


def _goto_gpu(uuid: str) -> None:
    st.session_state["_goto"] = ("gpu", uuid)
    st.rerun()


def overview(ctx: Context) -> None:
    snap = ctx.snap
    _header(ctx, "GPU fleet health")
    table = states(ctx)
    counts = data.state_counts(table)
    verdicts_note(ctx)
    now = _cache.fleet_now(ctx.url, snap.as_of, snap.stale_s)
    cols = st.columns(6)
    cols[0].metric("OK", f"{counts[data.OK]:,}")
    cols[1].metric(
        "At risk",
        f"{counts[data.AT_RISK]:,}",
        help="At risk in gpuwarden's stored verdicts (serve's decision)",
    )
    cols[2].metric(
        "Unhealthy",
        f"{counts[data.UNHEALTHY]:,}",
        help="DBE, row-remap failure, fatal Xid or GPU lost in the last 24 h",
    )
    cols[3].metric(
        "Missing", f"{counts[data.MISSING]:,}", help=f"No sample for {fmt_age(snap.stale_s)}"
    )
    util, power = now["util_pct"], now["power_w"]
    cols[4].metric(
        "Utilisation now",
        "–" if math.isnan(util) else f"{util:.0f} %",
        help="Mean DCGM_FI_DEV_GPU_UTIL",
    )
    cols[5].metric(
        "Power now",
        "–" if math.isnan(power) else f"{power / 1000:,.1f} kW",
        help="Sum of DCGM_FI_DEV_POWER_USAGE",
    )

    by_risk = table["risk"].notna().any()
    st.subheader("Fleet map")
    st.caption(
        (
            "Colour: the model's risk; unhealthy, missing and unscored GPUs have their own. "
            if by_risk
            else "Colour: state. "
        )
        + "Columns are nodes (grouped by rack), rows GPU slots. Click a GPU to open it."
    )
    cells = data.heatmap_frame(table)
    event = st.altair_chart(
        _charts.heatmap(cells, by_risk=bool(by_risk)),
        on_select="rerun",
        key="heatmap",
        width="content",
    )
    selection: dict[str, Any] = dict(event.get("selection", {})) if event else {}
    picked = selection.get(_charts.HEATMAP_SELECTION) or []
    if picked and picked[0].get("uuid"):
        _goto_gpu(str(picked[0]["uuid"]))

    st.subheader("Needs attention")
    _flagged_table(ctx, data.flagged(table).head(10), key="overview_flagged")

    start = snap.as_of - ctx.range_s
    series = _cache.fleet_series(ctx.url, start, snap.as_of + 1e-3, snap.gpus, snap.step_s)
    st.subheader("Utilisation and power")
    if series.empty:
        st.info("No samples in this time range.")
    else:
        left, right = st.columns(2)
        left.altair_chart(
            _charts.fleet_line(series, "util_pct", "mean utilisation (%)", domain=(0, 100)),
            width="stretch",
        )
        right.altair_chart(
            _charts.fleet_line(series, "power_kw", "total power (kW)"), width="stretch"
        )

    st.subheader("Xids and GPU events, last 24 h")
    events = _cache.recent_events(ctx.url, snap.as_of - data.DAY_S, snap.as_of + 1e-3)
    _event_summary(events)


def _event_summary(events: pd.DataFrame) -> None:
    if events.empty:
        st.success("No Xid or lost-GPU event in the last 24 h.")
        return
    short = {
        "gpu_lost": "GPU lost",
        "gpu_requires_reset": "reset needed",
        "gpu_recovered": "recovered",
    }
    what = [
        f"Xid {int(c)}" if k == "xid" else short.get(k, k)
        for k, c in zip(events["kind"], events["code"], strict=True)
    ]
    events = events.assign(what=what)
    summary = (
        events.groupby(["what", "name", "cls", "fatal"], dropna=False)
        .agg(events=("ts", "size"), gpus=("uuid", "nunique"), last=("ts", "max"))
        .reset_index()
        .sort_values(["fatal", "events"], ascending=[False, False])
    )
    summary["last"] = pd.to_datetime(summary["last"], unit="s", utc=True)
    st.dataframe(
        summary,
        hide_index=True,
        column_config={
            "what": "event",
            "name": "meaning",
            "cls": "whose fault",
            "fatal": st.column_config.CheckboxColumn("fatal"),
            "last": st.column_config.DatetimeColumn("last seen (UTC)", format="MMM D HH:mm"),
        },
        key="event_summary",
    )


def _flagged_table(ctx: Context, flagged: pd.DataFrame, *, key: str) -> None:
    if flagged.empty:
        st.success("No GPU is at risk or unhealthy.")
        return
    shown = flagged[
        ["hostname", "gpu", "state", "risk", "reasons", "action", "flagged_ts", "rack", "model", "uuid"]
    ].copy()  # fmt: skip
    shown.insert(7, "tag", _decisions.tag_column(ctx.serve, list(shown["uuid"])))
    shown["flagged_ts"] = pd.to_datetime(shown["flagged_ts"], unit="s", utc=True)
    event = st.dataframe(
        shown,
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
        key=key,
        column_config={
            "hostname": "node",
            "gpu": st.column_config.NumberColumn("GPU", format="%d"),
            "risk": st.column_config.ProgressColumn(
                "risk", min_value=0.0, max_value=1.0, format="%.2f"
            ),
            "reasons": st.column_config.TextColumn("reasons", width="large"),
            "action": st.column_config.TextColumn("recommended action", width="large"),
            "flagged_ts": st.column_config.DatetimeColumn("flagged (UTC)", format="MMM D HH:mm"),
            "tag": st.column_config.TextColumn(
                "node tag status", width="large", help="What gpuwarden serve holds for the node"
            ),
        },
    )
    rows = event.selection.rows if event is not None else []
    if rows:
        _goto_gpu(str(shown.iloc[rows[0]]["uuid"]))
    st.caption("Select a row to open the GPU.")


def attention(ctx: Context) -> None:
    _header(ctx, "GPUs needing attention")
    table = states(ctx)
    flagged = data.flagged(table)
    counts = data.state_counts(table)
    st.markdown(
        f"**{counts[data.UNHEALTHY]}** unhealthy (hard signal in the last 24 h) · "
        f"**{counts[data.AT_RISK]}** at risk (serve's decision) · "
        f"**{counts[data.MISSING]}** missing"
    )
    verdicts_note(ctx)
    _flagged_table(ctx, flagged, key="attention_flagged")
    st.subheader("Missing GPUs")
    missing = table[table["state"] == data.MISSING][
        ["hostname", "gpu", "rack", "model", "last_ts", "action", "uuid"]
    ].copy()
    if missing.empty:
        st.success("Every GPU reported recently.")
    else:
        missing["last_ts"] = pd.to_datetime(missing["last_ts"], unit="s", utc=True)
        st.dataframe(
            missing,
            hide_index=True,
            key="missing_table",
            column_config={
                "hostname": "node",
                "gpu": st.column_config.NumberColumn("GPU", format="%d"),
                "last_ts": st.column_config.DatetimeColumn(
                    "last sample (UTC)", format="MMM D HH:mm"
                ),
                "action": st.column_config.TextColumn("what to check", width="large"),
            },
        )
