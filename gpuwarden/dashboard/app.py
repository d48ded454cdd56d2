"""The gpuwarden health dashboard (Streamlit): ``gpuwarden dashboard --store URL``.

    streamlit run gpuwarden/dashboard/app.py -- --store sqlite:///gpuwarden.db

The store URL comes from ``--store`` after ``--``, else the ``store`` setting
(``GPUWARDEN_STORE``, the TOML file). Views: the fleet overview (``?view=overview``), the GPUs
that need attention (``?view=attention``), one GPU's history (``?view=gpu&gpu=<UUID>``),
``gpuwarden serve``'s decisions (``?view=decisions``, with ``--serve-url``) and the bundled
scheduler (``?view=scheduler``, with ``--scheduler-url``), demand forecasts and TCO
(``?view=capacity``, with ``--plan-demand``), energy, the idle-sleep plan, power caps and spot
(``?view=energy``); see ``_api`` for their settings. The
page re-reads the store on a timer (sidebar); every query is cached for ``_cache.TTL_S``. With
``GPUWARDEN_DASHBOARD_PASSWORD`` set, every page first asks for it (``_gate``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import streamlit as st

from gpuwarden.config import load_settings
from gpuwarden.dashboard import (
    _api,
    _cache,
    _capacity_page,
    _context,
    _decisions,
    _energy_page,
    _gate,
    _gpu_page,
    _pages,
    _scheduler_page,
)
from gpuwarden.errors import GpuwardenError
from gpuwarden.health import use_xid_severity

VIEWS = {
    "overview": "Fleet overview",
    "attention": "Needs attention",
    "gpu": "GPU detail",
    "decisions": "Decisions",
    "scheduler": "Scheduler",
    "capacity": "Capacity",
    "energy": "Energy and spot",
}
RANGES_H = {"Last 6 hours": 6, "Last 24 hours": 24, "Last 3 days": 72, "Last 7 days": 168, "Last 30 days": 720}  # fmt: skip
REFRESH_S = {"Off": 0, "every 30 s": 30, "every minute": 60, "every 5 minutes": 300}


def store_url(argv: list[str]) -> str:
    """``--store URL`` (or ``--store=URL``) from the script's arguments, else the setting."""
    for i, arg in enumerate(argv):
        if arg == "--store" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--store="):
            return arg.split("=", 1)[1]
    return str(load_settings()["store"])


def missing_sqlite_file(url: str) -> Path | None:
    """The file a ``sqlite:///`` URL (or bare path) names, if it does not exist yet: the
    dashboard only reads, so it must not create an empty store there."""
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :].split("?", 1)[0]
    elif "://" not in url:
        path = url
    else:
        return None
    if path in ("", ":memory:") or os.path.exists(path):
        return None
    return Path(path)


def _apply_navigation() -> None:
    """Query params -> widget state before the widgets exist (a click on the heatmap or a
    table row sets ``_goto`` and reruns; widgets cannot be changed after they are drawn)."""
    goto = st.session_state.pop("_goto", None)
    if goto is not None:
        view, uuid = goto
        st.query_params["view"] = view
        if uuid:
            st.query_params["gpu"] = uuid
    view = st.query_params.get("view", "overview")
    st.session_state["view"] = view if view in VIEWS else "overview"
    if "gpu" in st.query_params:
        st.session_state["gpu_pick"] = st.query_params["gpu"]


def _on_view_change() -> None:
    st.query_params["view"] = st.session_state["view"]


def main() -> None:
    st.set_page_config(page_title="gpuwarden · GPU fleet health", page_icon="🟩", layout="wide")
    if not _gate.unlocked():  # before anything else: not even the store URL is shown
        return
    try:
        url = store_url(sys.argv[1:])
        use_xid_severity(load_settings()["xid_severity"] or None)
    except GpuwardenError as exc:  # a broken settings file: say so, no traceback
        st.error(f"Cannot work out which store to read: {exc}")
        return
    _apply_navigation()
    with st.sidebar:
        st.markdown("### gpuwarden")
        st.radio(
            "View",
            list(VIEWS),
            format_func=VIEWS.__getitem__,
            key="view",
            on_change=_on_view_change,
        )
        range_label = st.selectbox("Time range", list(RANGES_H), index=1)
        refresh_label = st.selectbox("Auto-refresh", list(REFRESH_S), index=2)
        if st.button("Refresh now", width="stretch"):
            _cache.clear()
        st.caption(f"Store: `{url}`")
        st.caption("Times are UTC.")

    every = REFRESH_S[refresh_label]
    serve = _api.serve_api(sys.argv[1:])
    scheduler = _api.scheduler_api(sys.argv[1:])
    # A fragment re-runs only the page body on the timer (the sidebar keeps its state); the
    # body takes a new snapshot each time, so "as of" moves on.
    st.fragment(_body, run_every=every or None)(
        url, RANGES_H[range_label] * 3600.0, st.session_state["view"], serve, scheduler
    )


def _body(
    url: str, range_s: float, view: str, serve: _api.Api | None, scheduler: _api.Api | None
) -> None:
    if view == "decisions":  # serve's and the scheduler's pages do not need the store
        _decisions.page(serve)
        return
    if view == "scheduler":
        _scheduler_page.page(scheduler, time.time())
        return
    if view == "capacity":
        _capacity_page.page(*_capacity_page.sources(sys.argv[1:]))
        return
    missing = missing_sqlite_file(url)
    if view == "energy":  # reads the store and the scheduler, each section on its own
        why = None if missing is None else f"There is no store at `{missing}` yet."
        _energy_page.page(url, why, scheduler, range_s, time.time(), sys.argv[1:])
        return
    if missing is not None:
        _pages.empty_store(url, f"There is no store at `{missing}` yet.")
        return
    try:
        snap = _cache.snapshot(url)
    except GpuwardenError as exc:
        st.error(f"Cannot read the store `{url}`: {exc}")
        _pages.how_to_collect(url)
        return
    if snap is None:
        _pages.empty_store(url, "The store holds no GPU telemetry yet.")
        return
    ctx = _context.Context(url, snap, range_s, time.time(), serve)
    pages = {
        "overview": _pages.overview,
        "attention": _pages.attention,
        "gpu": _gpu_page.gpu_detail,
    }
    pages[view](ctx)


if __name__ == "__main__":  # Streamlit runs the script as __main__; importing it draws nothing
    main()
