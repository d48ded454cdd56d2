"""The dashboard's password gate (GPUWARDEN_DASHBOARD_PASSWORD): with it set, every page shows
the password form and nothing else until this session gives the password."""

from __future__ import annotations

import pytest
from known_fleet import require_extra

require_extra("streamlit", "altair")
import streamlit as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from gpuwarden.dashboard import app as app_module  # noqa: E402
from gpuwarden.dashboard._gate import password_matches  # noqa: E402

PASSWORD = "correct horse battery staple"


def start(monkeypatch: pytest.MonkeyPatch, url: str, view: str, password: str | None) -> AppTest:
    monkeypatch.setenv("GPUWARDEN_STORE", url)
    for name in ("GPUWARDEN_SERVE_URL", "GPUWARDEN_SCHEDULER_URL", "GPUWARDEN_SCHEDULER_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    if password is None:
        monkeypatch.delenv("GPUWARDEN_DASHBOARD_PASSWORD", raising=False)
    else:
        monkeypatch.setenv("GPUWARDEN_DASHBOARD_PASSWORD", password)
    st.cache_data.clear()
    at = AppTest.from_file(str(app_module.__file__), default_timeout=30)

    at.query_params["view"] = view
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def locked(at: AppTest, url: str) -> bool:
    """Only the password form: no view picker, no number, no table, not even the store URL."""
    shown = [str(e.value) for kind in (at.caption, at.markdown, at.info) for e in kind]
    return (
        [t.value for t in at.title] == ["gpuwarden"]
        and [t.key for t in at.text_input] == ["dashboard_password"]
        and not at.radio
        and not at.metric
        and not at.dataframe
        and not [s for s in shown if url in s]
    )


@pytest.mark.parametrize("view", ["overview", "attention", "gpu", "decisions", "scheduler"])
def test_every_page_asks_for_the_password_first(known_url, monkeypatch, view):
    at = start(monkeypatch, known_url, view, PASSWORD)
    assert locked(at, known_url)


def test_a_wrong_password_keeps_the_dashboard_locked(known_url, monkeypatch):
    at = start(monkeypatch, known_url, "overview", PASSWORD)
    at.text_input(key="dashboard_password").input("correct horse").run()  # not pressed yet
    assert locked(at, known_url) and not at.error
    at.button(key="dashboard_open").click().run()
    assert locked(at, known_url)
    (error,) = at.error
    assert error.value == "That is not the dashboard's password."


def test_the_right_password_opens_every_page_for_the_session(known_url, monkeypatch):
    at = start(monkeypatch, known_url, "overview", PASSWORD)
    at.text_input(key="dashboard_password").input(PASSWORD)
    at.button(key="dashboard_open").click().run()
    assert not at.exception, [e.value for e in at.exception]
    m = {x.label: x.value for x in at.metric}
    assert (m["OK"], m["Unhealthy"], m["Missing"]) == ("11", "4", "1")  # the overview, drawn
    assert not [t for t in at.text_input if t.key == "dashboard_password"]
    # kept for the session: another page and a rerun ask no more, and the password itself is
    # not what the session holds
    at.radio(key="view").set_value("attention").run()
    assert at.dataframe and not [t for t in at.text_input if t.key == "dashboard_password"]
    assert PASSWORD not in [str(v) for v in at.session_state.to_dict().values()]


def test_without_a_password_the_pages_open_at_once(known_url, monkeypatch):
    at = start(monkeypatch, known_url, "overview", None)
    assert at.metric and not [t for t in at.text_input if t.key == "dashboard_password"]


def test_password_comparison():
    assert password_matches(PASSWORD, PASSWORD)
    assert not password_matches(PASSWORD[:-1], PASSWORD)
    assert not password_matches("", PASSWORD)
    assert password_matches("pässwörd", "pässwörd")  # not ASCII: compared as UTF-8 bytes
