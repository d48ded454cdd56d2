"""What every dashboard page takes: the ``Context`` of one run of the app, the fleet's states
(stored verdicts) through the cache, and the time formats. ``_pages`` and ``_gpu_page`` both draw with them."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from gpuwarden.dashboard import _cache, data
from gpuwarden.dashboard._api import Api


@dataclass(frozen=True)
class Context:
    url: str
    snap: data.Snapshot
    range_s: float  # the time range picked in the sidebar
    now: float
    serve: Api | None = None  # gpuwarden serve's API, for the node tag status


def fmt_time(ts: float) -> str:
    return pd.Timestamp(ts, unit="s", tz="UTC").strftime("%Y-%m-%d %H:%M UTC")


def fmt_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{_tenths(seconds / 3600)} h"
    return f"{_tenths(seconds / 86400)} days"


def _tenths(x: float) -> str:
    """One decimal, none when it is 0: "24 h" and "7 days", not "24.0 h"; "2.5 h" stays."""
    return f"{x:.1f}".removesuffix(".0")


def states(ctx: Context) -> pd.DataFrame:
    """The fleet's states: the stored verdicts (hard signals only, and a note saying how to
    store verdicts, when there are none)."""
    snap = ctx.snap
    return _cache.fleet_states(ctx.url, snap.as_of, snap.stale_s, data.DAY_S)


def verdicts_note(ctx: Context) -> None:
    """Say so when the store holds no verdicts: states are then hard signals only, and the
    risk is blank until ``gpuwarden serve`` runs or ``score --into`` backfills."""
    if _cache.has_verdicts(ctx.url, ctx.snap.as_of, data.DAY_S):
        return
    st.info(
        "No verdicts are stored yet, so states come from hard signals only and risk is blank. "
        "Run `gpuwarden serve` on this store, or backfill the last week's hourly verdicts:"
    )
    st.code(data.backfill_command(ctx.url, ctx.snap.as_of), language="sh")
