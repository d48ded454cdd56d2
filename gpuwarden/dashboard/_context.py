"""What every dashboard page takes: the ``Context`` of one run of the app, the fleet's states
through the cache, and the time formats. ``_pages`` and ``_gpu_page`` both draw with them."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from gpuwarden.dashboard import _cache, data
from gpuwarden.dashboard._api import Api
from gpuwarden.dashboard._background import BackgroundScores


@dataclass(frozen=True)
class Context:
    url: str
    snap: data.Snapshot
    range_s: float  # the time range picked in the sidebar
    scorer: data.Scorer | None  # called while the page draws (tests, embedding apps)
    now: float
    background: BackgroundScores | None = None  # the model, scoring beside the pages
    serve: Api | None = None  # gpuwarden serve's API, for the node tag status

    @property
    def scorer_key(self) -> str:
        s = self.scorer
        return (
            ""
            if s is None
            else f"{getattr(s, '__module__', '')}.{getattr(s, '__qualname__', repr(s))}"
        )


def fmt_time(ts: float) -> str:
    return pd.Timestamp(ts, unit="s", tz="UTC").strftime("%Y-%m-%d %H:%M UTC")


def fmt_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def states(ctx: Context) -> pd.DataFrame:
    """The fleet's states, with the model's risk when there is one. A scorer that fails is
    shown as a warning and the hard-signal states are shown anyway; background scores that
    are not ready yet are announced."""
    snap = ctx.snap
    args = (ctx.url, snap.as_of, snap.stale_s, data.DAY_S)
    if ctx.scorer is not None:
        try:
            return _cache.fleet_states(*args, ctx.scorer_key, ctx.scorer, None)
        except Exception as exc:  # a model bug must not take the dashboard down
            st.warning(
                f"The risk model failed ({type(exc).__name__}: {exc}); "
                "states come from hard signals only."
            )
    elif ctx.background is not None:
        latest = ctx.background.latest()
        if latest is None:
            st.caption("The risk model is scoring the fleet; risk shows at the next refresh.")
        elif latest.error:
            st.warning(f"The risk model failed ({latest.error}); showing its last scores, if any.")
        if latest is not None and latest.frame is not None:
            key = f"background@{latest.at}"
            return _cache.fleet_states(*args, key, None, latest.frame)
    return _cache.fleet_states(*args, "", None, None)
