"""Altair charts for the dashboard. Times are drawn in UTC, units are in every axis title."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from gpuwarden.dashboard.data import AT_RISK, MISSING, OK, RISK_BANDS, UNHEALTHY

STATE_COLORS = {OK: "#2e9e5b", AT_RISK: "#f2a93b", UNHEALTHY: "#d6322d", MISSING: "#9aa0a6"}
#: ``data.risk_band`` -> colour: pale to red with the risk, then states the risk does not tell.
RISK_BAND_COLORS = {
    **dict(zip(RISK_BANDS, ("#fff1c1", "#fdd08a", "#fc8d59", "#d7301f"), strict=True)),
    UNHEALTHY: "#67000d",
    "missing": "#9aa0a6",
    "not scored": "#dde1e6",
}
HEATMAP_SELECTION = "gpu_cell"
_CELL_PX = 13
_TIME = alt.X("time:T", title="time (UTC)", scale=alt.Scale(type="utc"), axis=alt.Axis(format="%b %d %H:%M", labelAngle=0))  # fmt: skip


#: What a horizontal bar chart's x axis (its labels and title) takes of the height Streamlit
#: gives it: Streamlit fits the whole chart, axes included, into the height asked for.
_X_AXIS_PX = 60


def bars_height(bars: int, per_bar: int = 30) -> int:
    """The height that gives each of ``bars`` horizontal bars ``per_bar`` pixels, so every
    bar keeps its label (Streamlit's theme spaces labels so that at 22 pixels a bar, axes
    counted in, Vega dropped every other node's name)."""
    return _X_AXIS_PX + per_bar * max(bars, 1)


def with_time(frame: pd.DataFrame) -> pd.DataFrame:
    """Add ``time`` (UTC datetimes) from ``ts`` (Unix s) for the x axis."""
    return frame.assign(time=pd.to_datetime(frame["ts"], unit="s", utc=True))


def heatmap(cells: pd.DataFrame, *, by_risk: bool) -> alt.FacetChart:
    """Node x GPU-slot grid, one small panel per rack: colour is the state, or (``by_risk``)
    the model's risk band, with unhealthy, missing and unscored GPUs in their own colours.
    Clicking a cell selects its ``uuid``."""
    racks = cells["rack"].nunique()
    nodes_per_rack = int(cells.groupby("rack")["hostname"].nunique().max())
    # about 48 node columns per row of panels, so 1,000 GPUs fit a laptop screen
    columns = max(1, min(racks, 48 // max(nodes_per_rack, 1)))
    select = alt.selection_point(name=HEATMAP_SELECTION, fields=["uuid"], on="click")
    if by_risk:
        color = alt.Color(
            "band:N",
            title="risk",
            scale=alt.Scale(domain=list(RISK_BAND_COLORS), range=list(RISK_BAND_COLORS.values())),
            legend=alt.Legend(orient="top", direction="horizontal"),
        )
    else:
        color = alt.Color(
            "state:N",
            title="state",
            scale=alt.Scale(domain=list(STATE_COLORS), range=list(STATE_COLORS.values())),
            legend=alt.Legend(orient="top", direction="horizontal"),
        )
    base = (
        alt.Chart(cells)
        .mark_rect(stroke="white", strokeWidth=1, cornerRadius=1)
        .encode(
            x=alt.X(
                "hostname:N",
                title=None,
                sort=None,
                axis=alt.Axis(labelAngle=-90, labelFontSize=9, labelLimit=60),
            ),
            y=alt.Y("gpu:O", title="GPU", axis=alt.Axis(labelFontSize=9)),
            color=color,
            opacity=alt.condition(select, alt.value(1.0), alt.value(0.35)),
            tooltip=[
                alt.Tooltip("hostname:N", title="node"),
                alt.Tooltip("gpu:O", title="GPU"),
                alt.Tooltip("rack:N"),
                alt.Tooltip("model:N"),
                alt.Tooltip("state:N"),
                alt.Tooltip("risk:Q", format=".2f"),
                alt.Tooltip("reasons:N"),
            ],
        )
        .add_params(select)
        .properties(width=alt.Step(_CELL_PX), height=alt.Step(_CELL_PX))
    )
    return base.facet(
        facet=alt.Facet("rack:N", title=None, sort=sorted(cells["rack"].unique())),
        columns=columns,
        spacing={"row": 6, "column": 10},
    ).resolve_scale(x="independent")


def fleet_line(
    series: pd.DataFrame, y: str, title: str, *, domain: tuple[float, float] | None = None
) -> alt.Chart:
    """One fleet-wide series over time (``y`` column of ``data.fleet_series``)."""
    scale = alt.Scale(domain=list(domain)) if domain else alt.Scale(zero=False)
    return (
        alt.Chart(with_time(series))
        .mark_line(interpolate="monotone", color="#4c78a8")
        .encode(
            x=_TIME,
            y=alt.Y(f"{y}:Q", title=title, scale=scale),
            tooltip=[
                alt.Tooltip("time:T", format="%Y-%m-%d %H:%M UTC"),
                alt.Tooltip(f"{y}:Q", format=".1f", title=title),
            ],
        )
        .properties(height=200)
    )


def gpu_chart(
    series: pd.DataFrame,
    lines: dict[str, str],
    title: str,
    events: pd.DataFrame,
    *,
    limit: float | str | None = None,
    limit_label: str = "",
) -> alt.LayerChart:
    """Some of one GPU's series (``lines``: column -> legend name) against a limit (a number,
    or a column for a limit that changes, like PCIe replays with the link width), with its Xid
    and lost-GPU events as vertical rules (fatal ones red)."""
    long = with_time(series).melt(
        id_vars=["time"], value_vars=list(lines), var_name="signal", value_name="value"
    )
    long["signal"] = long["signal"].map(lines)
    top = float(long["value"].abs().max()) if long["value"].notna().any() else 0.0
    # SI prefixes for big counts only: "~s" wrote a risk of 0.8 as "800m"; and a flat zero
    # (no SBE in the range) gets an axis of 0-1, not the "NaN" of an empty domain
    axis = alt.Axis(format="~s" if top >= 10_000 else ",~f")
    scale = alt.Scale(domain=[0, 1]) if top == 0 else alt.Undefined
    layers: list[alt.Chart] = [
        alt.Chart(long)
        .mark_line(interpolate="monotone", point=len(series) < 60)
        .encode(
            x=_TIME,
            y=alt.Y("value:Q", title=title, axis=axis, scale=scale),
            color=alt.Color(
                "signal:N",
                title=None,
                sort=list(lines.values()),
                scale=alt.Scale(scheme="tableau10"),
                legend=alt.Legend(orient="top"),
            ),
            tooltip=[
                alt.Tooltip("time:T", format="%Y-%m-%d %H:%M UTC"),
                "signal:N",
                alt.Tooltip("value:Q", format=".2f"),
            ],
        )
    ]
    if isinstance(limit, str) and limit in series and series[limit].notna().any():
        lim = with_time(series[["ts", limit]].rename(columns={limit: "limit"}))
        layers.append(
            alt.Chart(lim)
            .mark_line(strokeDash=[6, 4], color="#d6322d", interpolate="step-after")
            .encode(
                x=_TIME,
                y="limit:Q",
                tooltip=[alt.Tooltip("limit:Q", title=limit_label, format=".2f")],
            )
        )
    elif isinstance(limit, int | float) and not math.isnan(limit):
        rule = pd.DataFrame({"limit": [limit], "label": [limit_label]})
        layers.append(
            alt.Chart(rule).mark_rule(strokeDash=[6, 4], color="#d6322d").encode(y="limit:Q")
        )
        layers.append(
            alt.Chart(rule)
            .mark_text(align="left", dx=4, dy=-6, color="#d6322d", fontSize=11)
            .encode(y="limit:Q", x=alt.value(0), text="label:N")
        )
    if not events.empty:
        # fatal events (Xid 79, 48, GPU lost...) in red; the rest (Xid 63, 13...) faint grey
        ev = with_time(events)
        layers.append(
            alt.Chart(ev)
            .mark_rule()
            .encode(
                x=_TIME,
                color=alt.condition("datum.fatal", alt.value("#d6322d"), alt.value("#9aa0a6")),
                strokeWidth=alt.condition("datum.fatal", alt.value(2.0), alt.value(1.0)),
                opacity=alt.condition("datum.fatal", alt.value(0.9), alt.value(0.35)),
                tooltip=[
                    alt.Tooltip("time:T", format="%Y-%m-%d %H:%M UTC"),
                    alt.Tooltip("label:N", title="event"),
                ],
            )
        )
    return alt.LayerChart(layer=layers).properties(height=220)
