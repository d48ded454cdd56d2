"""The Decisions page and the node tag status against a real ``gpuwarden serve`` (its FastAPI
app under uvicorn on 127.0.0.1, in this process) deciding about the known fleet's GPUs."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from known_fleet import DBE, EARLY, LOST, REMAP, SBE, gpu_id, require_extra, uuid_of

require_extra("streamlit", "altair")
import streamlit as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from gpuwarden.alerts.base import GpuState, RiskAssessment  # noqa: E402
from gpuwarden.dashboard import app as app_module  # noqa: E402
from gpuwarden.serve.server import ServeHandle  # noqa: E402
from gpuwarden.serve.service import RiskService  # noqa: E402
from gpuwarden.store.sqlite import SqliteStore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_helpers import Clock, RecordingTagger  # noqa: E402

APP = Path(app_module.__file__)
TOKEN = "dashboard-test-t0ken"
NOW = 1_767_247_200.0  # the known fleet's end: 2026-01-01 06:00 UTC


def assess(store: SqliteStore, at: float) -> list[RiskAssessment]:
    return [
        RiskAssessment(gpu_id(DBE), at, 0.4, hard_signal="double-bit ECC error"),
        RiskAssessment(gpu_id(REMAP), at, 0.91, reasons=("row remap failure",)),
        RiskAssessment(gpu_id(SBE), at, 0.2),
    ]


@pytest.fixture
def serve() -> Iterator[tuple[ServeHandle, RecordingTagger]]:
    st.cache_data.clear()
    tagger = RecordingTagger()
    service = RiskService(
        SqliteStore(":memory:"), assess=assess, taggers=[tagger], clock=Clock(NOW)
    )
    service.tick()  # DBE -> unhealthy, REMAP -> at-risk; the breaker lets one node through
    service.override(uuid_of(SBE), "at-risk", reason="fans loud after the move", actor="erin")
    handle = ServeHandle(service, token=TOKEN).start(loop=False)
    yield handle, tagger
    handle.stop()
    st.cache_data.clear()


def run(monkeypatch: pytest.MonkeyPatch, store_url: str, view: str, **env: str) -> AppTest:
    monkeypatch.setenv("GPUWARDEN_STORE", store_url)
    for name in ("GPUWARDEN_SERVE_URL", "GPUWARDEN_SERVE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    at = AppTest.from_file(str(APP), default_timeout=30)

    at.query_params["view"] = view
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def audit_table(at: AppTest) -> pd.DataFrame:
    (frame,) = [d.value for d in at.dataframe if "change" in d.value.columns]
    return frame.reset_index(drop=True)


def test_the_audit_log_lists_each_decision_with_filters(serve, known_url, monkeypatch):
    handle, _ = serve
    at = run(monkeypatch, known_url, "decisions", GPUWARDEN_SERVE_URL=handle.url)
    table = audit_table(at)
    assert table[["gpu", "change", "actor", "source"]].values.tolist() == [
        ["node000/0", "ok -> at-risk", "erin", "manual"],  # newest first (same second: by id)
        ["node002/0", "ok -> at-risk", "gpuwarden", "model"],
        ["node000/1", "ok -> unhealthy", "gpuwarden", "model"],
    ]
    assert table.loc[0, "time"] == "2026-01-01 06:00:00 UTC"
    assert table.loc[0, "reasons"] == "fans loud after the move"
    assert any("3** of the last" in m.value for m in at.markdown)

    at.selectbox(key="decisions_actor").set_value("erin").run()
    assert audit_table(at)["gpu"].tolist() == ["node000/0"]
    at.selectbox(key="decisions_actor").set_value("all")
    at.selectbox(key="decisions_gpu").set_value(uuid_of(REMAP)).run()
    assert audit_table(at)["change"].tolist() == ["ok -> at-risk"]
    at.checkbox(key="decisions_hooks").check().run()  # each hook's action on the decision too
    hooks = audit_table(at)
    assert len(hooks) == 2 and set(hooks["hook"]) == {"", "recording"}
    # no token in the dashboard's environment: the log, and a form that asks for one
    assert at.text_input(key="override_token").value == ""
    assert any("not with the dashboard's own" in c.value for c in at.caption)


def texts(at: AppTest) -> list[str]:
    """Every message, caption and markdown on the page (where a token must never appear)."""
    kinds = (at.success, at.error, at.warning, at.info, at.caption, at.markdown, at.code)
    return [str(e.value) for kind in kinds for e in kind]


def override(at: AppTest, uuid: str, state: str, reason: str, actor: str, token: str = "") -> None:
    at.selectbox(key="override_gpu").set_value(uuid)
    at.selectbox(key="override_state").set_value(state)
    at.text_input(key="override_reason").input(reason)
    at.text_input(key="override_actor").input(actor)
    if token:
        at.text_input(key="override_token").input(token)
    at.button(key="override_apply").click().run()


def test_the_override_form_posts_with_the_pasted_token(serve, known_url, monkeypatch):
    handle, tagger = serve
    at = run(monkeypatch, known_url, "decisions", GPUWARDEN_SERVE_URL=handle.url)
    override(at, uuid_of(REMAP), "ok", "remap failure cleared after reset; diag passed", "sam",
             token=TOKEN)  # fmt: skip
    assert not at.error, [e.value for e in at.error]
    (done,) = at.success
    assert done.value.startswith("node002/0: at-risk -> ok by sam")
    status = handle.service.engine.status(uuid_of(REMAP))
    assert status.state is GpuState.OK and status.source == "manual"
    assert audit_table(at).loc[0, ["gpu", "change", "actor"]].tolist() == [
        "node002/0", "at-risk -> ok", "sam",
    ]  # fmt: skip
    # the token is kept for the session, out of the field, and shown nowhere
    assert at.text_input(key="override_token").value == ""
    assert not [t for t in texts(at) if TOKEN in t]
    # no reason: refused here, nothing sent
    before = handle.service.audit.count()
    at.text_input(key="override_reason").input("   ")
    at.button(key="override_apply").click().run()
    assert any("needs a reason" in e.value for e in at.error)
    assert handle.service.audit.count() == before
    # the next change in the same session needs no second paste
    override(at, uuid_of(REMAP), "at-risk", "fans loud again", "sam")
    assert not at.error, [e.value for e in at.error]
    assert handle.service.engine.status(uuid_of(REMAP)).state is GpuState.AT_RISK
    # ... until the person forgets it
    at.button(key="override_forget").click().run()
    override(at, uuid_of(REMAP), "ok", "cleared", "sam")
    assert any("Paste your serve token" in e.value for e in at.error)
    assert handle.service.engine.status(uuid_of(REMAP)).state is GpuState.AT_RISK


def test_the_dashboards_own_token_never_changes_a_state(serve, known_url, monkeypatch):
    """GPUWARDEN_SERVE_TOKEN is whoever loads the page's: it reads, it does not override."""
    handle, _ = serve
    at = run(monkeypatch, known_url, "decisions", GPUWARDEN_SERVE_URL=handle.url,
             GPUWARDEN_SERVE_TOKEN=TOKEN)  # fmt: skip
    before = handle.service.audit.count()
    override(at, uuid_of(REMAP), "ok", "looks fine to me", "visitor")
    (error,) = at.error
    assert "Paste your serve token" in error.value
    assert handle.service.audit.count() == before
    assert handle.service.engine.status(uuid_of(REMAP)).state is GpuState.AT_RISK


def test_a_wrong_token_shows_the_servers_answer(serve, known_url, monkeypatch):
    handle, _ = serve
    at = run(monkeypatch, known_url, "decisions", GPUWARDEN_SERVE_URL=handle.url)
    override(at, uuid_of(SBE), "ok", "try", "mallory", token="guessed-token")
    (error,) = at.error
    assert "answered 401" in error.value and "missing or wrong bearer token" in error.value
    assert not [t for t in texts(at) if "guessed-token" in t]
    assert handle.service.engine.status(uuid_of(SBE)).source == "manual"  # still erin's
    # a refused token is not kept for the next try
    at.text_input(key="override_token").input("")
    override(at, uuid_of(SBE), "ok", "try again", "mallory")
    assert any("Paste your serve token" in e.value for e in at.error)


def test_without_serve_the_page_says_how_to_start_it(known_url, monkeypatch):
    at = run(monkeypatch, known_url, "decisions")
    assert any("No `gpuwarden serve` is configured" in i.value for i in at.info)
    assert any("gpuwarden serve --store" in c.value and "--serve-url" in c.value for c in at.code)


def test_flagged_gpus_show_their_node_tag_status(serve, known_url, monkeypatch):
    handle, _ = serve
    at = run(monkeypatch, known_url, "attention", GPUWARDEN_SERVE_URL=handle.url)
    (flagged,) = [d.value for d in at.dataframe if "tag" in d.value.columns]
    slots = zip(flagged["hostname"], flagged["gpu"], strict=True)
    tags = dict(zip(slots, flagged["tag"], strict=True))
    assert tags[DBE].startswith("unhealthy since 01-01 06:00 UTC (model)")
    assert tags[REMAP].startswith("at-risk since 01-01 06:00 UTC (model)")
    # the breaker let one of the two nodes be re-tagged and holds the other
    held = [slot for slot in (DBE, REMAP) if "held by circuit breaker: recording" in tags[slot]]
    assert len(held) == 1
    assert tags[LOST] == tags[EARLY] == "not known to serve"


def test_without_serve_the_tag_status_says_so(known_url, monkeypatch):
    at = run(monkeypatch, known_url, "attention")
    (flagged,) = [d.value for d in at.dataframe if "tag" in d.value.columns]
    assert set(flagged["tag"]) == {"serve not configured"}
    assert not at.error
