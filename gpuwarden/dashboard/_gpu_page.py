"""The GPU detail page: one GPU's health signals over the chosen range, its events, its state."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st

from gpuwarden.dashboard import _cache, _charts, data
from gpuwarden.dashboard._context import Context, fmt_age, fmt_time, states
from gpuwarden.wording import plural

_STATE_BADGE = {
    data.OK: ":green[ok]",
    data.AT_RISK: ":orange[at risk]",
    data.UNHEALTHY: ":red[unhealthy]",
    data.MISSING: ":gray[missing]",
}


def _label(row: pd.Series) -> str:
    return (
        f"{row['hostname']} · GPU {row['gpu']} · {row['model'] or 'unknown model'} · {row['state']}"
    )


def _on_pick() -> None:
    st.query_params["gpu"] = st.session_state["gpu_pick"]


def _pick(table: pd.DataFrame) -> pd.Series:
    """The GPU selectbox (worst GPUs first); the ``?gpu=UUID`` query parameter preselects."""
    options = list(table["uuid"])
    labels = {u: _label(r) for u, (_, r) in zip(options, table.iterrows(), strict=True)}
    wanted = st.session_state.get("gpu_pick")
    if wanted is not None and wanted not in labels:
        st.warning(
            f"No GPU slot holds `{wanted}` now (an old board, or a typo); showing another GPU."
        )
        del st.session_state["gpu_pick"]
    uuid = st.selectbox(
        "GPU", options, format_func=labels.__getitem__, key="gpu_pick", on_change=_on_pick
    )
    return table.set_index("uuid").loc[uuid].rename(uuid)


def _event_markers(events: pd.DataFrame) -> pd.DataFrame:
    if events.empty:
        return pd.DataFrame(columns=["ts", "label", "fatal"])
    labels = [
        f"Xid {int(c)}: {n}" if k == "xid" and pd.notna(c) else n
        for k, c, n in zip(events["kind"], events["code"], events["name"], strict=True)
    ]
    return pd.DataFrame(
        {
            "ts": events["ts"].to_numpy(),
            "label": labels,
            "fatal": events["fatal"].astype(bool).to_numpy(),
        }
    )


def _peak(series: pd.Series) -> float:
    return float(np.nanmax(series)) if series.notna().any() else math.nan


def _num(value: float, fmt: str, unit: str = "") -> str:
    return "–" if math.isnan(value) else f"{value:{fmt}}{unit}"


def gpu_detail(ctx: Context) -> None:
    snap = ctx.snap
    table = states(ctx)
    if table.empty:
        st.info("No GPU to show yet.")
        return
    gpu = _pick(table)
    uuid = str(gpu.name)
    state = str(gpu["state"])
    st.title(f"{gpu['hostname']} · GPU {gpu['gpu']}  {_STATE_BADGE.get(state, state)}")
    st.caption(
        f"{gpu['model'] or 'unknown model'} · rack {gpu['rack'] or '–'} · `{uuid}` · "
        f"last sample {fmt_time(float(gpu['last_ts']))} · as of {fmt_time(snap.as_of)}"
    )
    if state in (data.UNHEALTHY, data.AT_RISK, data.MISSING):
        box = st.error if state == data.UNHEALTHY else st.warning
        since = gpu["flagged_ts"]
        since_text = f" since {fmt_time(float(since))}" if pd.notna(since) else ""
        box(f"**{state}**{since_text}: {gpu['reasons']}\n\n**Recommended action:** {gpu['action']}")
    failed = _cache.gpu_failures(ctx.url, uuid)
    if len(failed):  # a failures file or a simulation's ground truth: what became of the board
        said = "; ".join(f"{fmt_time(float(r.ts))} ({r.kind})" for r in failed.itertuples())
        st.error(f"**Recorded {plural(len(failed), 'failure')}:** {said}")

    end = snap.as_of + 1e-3
    start = snap.as_of - ctx.range_s
    last = float(gpu["last_ts"])
    if state == data.MISSING and last < start:
        # a board that went quiet before the range: its last hours, the lead-up to what became
        # of it, rather than an empty range
        end, start = last + 1e-3, last - ctx.range_s
        st.caption(
            f"Shown: the {fmt_age(ctx.range_s)} to its last sample ({fmt_time(last)}), "
            "since it has sent none in the range picked."
        )
    series = _cache.gpu_series(ctx.url, uuid, start, end, snap.step_s)
    events = _cache.recent_events(ctx.url, start, end, uuid)
    risk = _cache.risk_series(ctx.url, uuid, start, end)

    cols = st.columns(6)
    cols[0].metric("Risk", _num(float(gpu["risk"]), ".2f"), help=f"At risk from {_line(risk):g}")
    if series.empty:
        st.info(f"No sample of this GPU in the last {fmt_age(ctx.range_s)}.")
        return
    sbe = float(series["sbe_errors"].sum()) if series["sbe_errors"].notna().any() else math.nan
    cols[1].metric(
        "SBEs in range",
        _num(sbe, ",.0f"),
        help="Single-bit ECC errors (DCGM_FI_DEV_ECC_SBE_VOL_TOTAL increases)",
    )
    cols[2].metric("Peak memory temp", _num(_peak(series["mem_temp_c"]), ".1f", " °C"))
    cols[3].metric(
        "Peak spread",
        _num(_peak(series["spread_c"]), ".1f", " °C"),
        help=f"Memory minus core temperature; limit {data.SPREAD_LIMIT_C:g} °C",
    )
    ratio = series["pcie_replay_per_min"] / series["pcie_limit_per_min"]
    cols[4].metric(
        "Peak PCIe replays",
        _num(_peak(ratio) * 100, ".0f", " %"),
        help="Of DCGM's limit (per lane per minute x lanes)",
    )
    cols[5].metric("Xid / lost events", f"{len(events)}")

    marks = _event_markers(events)
    left, right = st.columns(2)
    left.markdown("**Single-bit ECC errors** (per hour)")
    left.altair_chart(
        _charts.gpu_chart(series, {"sbe_per_h": "SBE / h"}, "errors per hour", marks),
        width="stretch",
    )
    right.markdown("**Remapped rows** (DCGM_FI_DEV_*_REMAPPED_ROWS)")
    right.altair_chart(
        _charts.gpu_chart(
            series,
            {
                "remapped_rows_correctable": "correctable",
                "remapped_rows_uncorrectable": "uncorrectable",
            },
            "rows",
            marks,
        ),
        width="stretch",
    )
    left, right = st.columns(2)
    left.markdown("**Temperatures** (°C)")
    left.altair_chart(
        _charts.gpu_chart(
            series, {"mem_temp_c": "memory (HBM)", "gpu_temp_c": "core"}, "°C", marks
        ),
        width="stretch",
    )
    right.markdown(f"**Memory minus core temperature** against the {data.SPREAD_LIMIT_C:g} °C line")
    right.altair_chart(
        _charts.gpu_chart(
            series,
            {"spread_c": "spread"},
            "°C",
            marks,
            limit=data.SPREAD_LIMIT_C,
            limit_label=f"{data.SPREAD_LIMIT_C:g} °C",
        ),
        width="stretch",
    )
    left, right = st.columns(2)
    left.markdown("**PCIe replays** per minute against DCGM's limit (per lane x lanes)")
    left.altair_chart(
        _charts.gpu_chart(
            series,
            {"pcie_replay_per_min": "replays / min"},
            "replays per minute",
            marks,
            limit="pcie_limit_per_min",
            limit_label="DCGM limit",
        ),
        width="stretch",
    )
    with right:
        _risk_chart(risk, marks)

    st.subheader("Events in range")
    if events.empty:
        st.caption("No Xid or lost-GPU event in this range.")
    else:
        shown = events[["ts", "kind", "code", "name", "cls", "fatal", "action"]].copy()
        shown["ts"] = pd.to_datetime(shown["ts"], unit="s", utc=True)
        st.dataframe(
            shown,
            hide_index=True,
            key="gpu_events",
            column_config={
                "ts": st.column_config.DatetimeColumn("time (UTC)", format="YYYY-MM-DD HH:mm:ss"),
                "cls": "whose fault",
                "action": st.column_config.TextColumn("action", width="large"),
            },
        )
    with st.expander("The numbers behind the charts"):
        numbers = series.copy()
        numbers.insert(0, "time", pd.to_datetime(numbers.pop("ts"), unit="s", utc=True))
        st.dataframe(numbers, hide_index=True, key="gpu_numbers")
        if not risk.empty:
            st.markdown("**Risk score**: the stored verdicts' scores")
            scores = risk.assign(time=pd.to_datetime(risk["ts"], unit="s", utc=True))
            st.dataframe(scores[["time", "ts", "risk"]], hide_index=True, key="gpu_risk_numbers")


def _line(risk: pd.DataFrame) -> float:
    """The at-risk line the GPU's newest stored verdict was decided with, else serve's."""
    known = risk["threshold"].dropna() if "threshold" in risk else risk.iloc[0:0]
    return float(known.iloc[-1]) if len(known) else data.model_line()


def _risk_chart(risk: pd.DataFrame, marks: pd.DataFrame) -> None:
    """The stored risk over time against the at-risk line the verdicts were decided with; the
    newest score alone (a bar) until there is a history to draw."""
    if risk.empty:
        st.markdown("**Risk score**")
        st.caption(
            "No verdict with a risk is stored for this GPU in this range: run `gpuwarden serve`, "
            "or backfill with `gpuwarden score --into`."
        )
        return
    line = _line(risk)
    st.markdown(f"**Risk score** against the {line:g} line")
    if len(risk) >= 2:
        st.altair_chart(
            _charts.gpu_chart(
                risk, {"risk": "risk"}, "risk (0-1)", marks,
                limit=line, limit_label="at risk",
            ),
            width="stretch",
        )  # fmt: skip
    else:
        now = float(risk["risk"].iloc[-1])
        st.progress(min(max(now, 0.0), 1.0), text=f"{now:.2f} now")
    st.caption(
        "The model's probability that this GPU fails within its horizon, as gpuwarden's stored "
        f"verdicts recorded it; at risk from {line:g}."
    )
