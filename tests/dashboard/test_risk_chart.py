"""The GPU page's risk chart and the attention page's model caption, run by ``AppTest`` over
the known store with a background scorer whose risk depends on time (``known_fleet.risk_at``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from known_fleet import (
    END,
    HOUR,
    SBE,
    STEP,
    hourly_risk,
    require_extra,
    risk_at,
    run_app,
    uuid_of,
)

require_extra("streamlit", "altair")
import streamlit as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from gpuwarden.dashboard import app as app_module  # noqa: E402
from gpuwarden.dashboard._background import BackgroundScores  # noqa: E402
from gpuwarden.dashboard._risk_history import PENDING, RUNNING  # noqa: E402

APP = Path(app_module.__file__)
AS_OF = END - STEP  # the known store's newest sample: 2026-01-01 05:55 UTC
NO_MODEL = "No risk model is installed yet"


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()


def live(store, at):
    """The current scores: the SBE GPU at 0.9."""
    return pd.DataFrame({"uuid": [uuid_of(SBE)], "risk": [0.9], "reasons": ["SBE rate rising"]})


@pytest.fixture
def background(known_url) -> Iterator[BackgroundScores]:
    bg = BackgroundScores(known_url, live, hourly=hourly_risk, every_s=3600)
    yield bg
    bg.stop()


def run(url: str, given: object, monkeypatch: pytest.MonkeyPatch, **query: str) -> AppTest:
    return run_app(url, given, monkeypatch, **query)


def captions(at: AppTest) -> str:
    return "\n".join(c.value for c in at.caption)


def risk_table(at: AppTest) -> pd.DataFrame:
    """The numbers behind the risk chart (the GPU page's only table with a risk column)."""
    tables = [d.value for d in at.dataframe if "risk" in d.value.columns]
    assert len(tables) == 1, [list(d.value.columns) for d in at.dataframe]
    return tables[0]


def charts(at: AppTest) -> int:
    return len(at.get("vega_lite_chart"))


def risk_chart_layers(at: AppTest) -> list[tuple[str, pd.DataFrame]]:
    """(mark, data) of each layer of the risk chart, as sent to the browser (Arrow)."""
    chart = next(c for c in at.get("vega_lite_chart") if '"risk (0-1)"' in c.proto.spec)
    data = {
        d.name: pa.ipc.open_stream(d.data.data).read_all().to_pandas() for d in chart.proto.datasets
    }
    layers = json.loads(chart.proto.spec)["layer"]
    return [(layer["mark"]["type"], data[layer["data"]["name"]]) for layer in layers]


def test_gpu_page_draws_the_hourly_risk_then_the_current_score(known_url, background, monkeypatch):
    assert background.history is not None and background.history.wait(30).status == "ready"
    at = run(known_url, background, monkeypatch, view="gpu", gpu=uuid_of(SBE))
    assert at.title[0].value.startswith("node000 · GPU 0")
    risk = risk_table(at)
    # the store runs 00:00-05:55: the model scored each whole hour after the first sample
    hours = [END - h * HOUR for h in range(5, 0, -1)]  # 01:00 ... 05:00
    assert list(risk["ts"]) == [*hours, AS_OF]
    assert list(risk["risk"]) == [0.25, 0.4, 0.55, 0.7, 0.85, 0.9]
    assert list(risk["risk"][:-1]) == [risk_at(uuid_of(SBE), h) for h in hours]
    assert charts(at) == 6  # SBEs, remaps, temperatures, spread, PCIe, and the risk over time
    layers = risk_chart_layers(at)
    mark, line = layers[0]
    assert mark == "line" and list(line["value"]) == list(risk["risk"])
    assert list(line["time"]) == list(pd.to_datetime(risk["ts"], unit="s", utc=True))
    mark, rule = layers[1]
    assert mark == "rule" and list(rule["limit"]) == [0.7] and list(rule["label"]) == ["at risk"]
    text = captions(at)
    assert "computing" not in text and "held for the last" not in text

    picker = next(s for s in at.selectbox if s.label == "Time range")
    picker.set_value("Last 30 days").run()  # longer than the week held
    assert not at.exception
    assert "Hourly scores are held for the last 7 days only" in captions(at)
    assert len(risk_table(at)) == 6


def test_gpu_page_says_while_the_week_is_being_computed(known_url, monkeypatch):
    release = threading.Event()

    def slow_hourly(store, start, end):
        release.wait(30)
        return hourly_risk(store, start, end)

    bg = BackgroundScores(known_url, live, hourly=slow_hourly, every_s=3600)
    try:
        assert bg.wait(30) is not None and bg.history is not None
        deadline = time.monotonic() + 30
        while bg.history.state().status == PENDING and time.monotonic() < deadline:
            time.sleep(0.02)
        assert bg.history.state().status == RUNNING
        at = run(known_url, bg, monkeypatch, view="gpu", gpu=uuid_of(SBE))
        assert "computing the week's risk history" in captions(at)
        assert list(risk_table(at)["risk"]) == [0.9]  # the current score alone: a bar, no chart
        assert charts(at) == 5  # no risk chart
        assert [p.proto.text for p in at.get("progress")] == ["0.90 now"]
    finally:
        release.set()
        bg.stop()


def test_a_failed_backfill_is_a_caption_and_the_live_score_stays(known_url, monkeypatch):
    def broken(store, start, end):
        raise RuntimeError("panel too large")

    bg = BackgroundScores(known_url, live, hourly=broken, every_s=3600)
    try:
        assert bg.history is not None and bg.history.wait(30).status == "failed"
        at = run(known_url, bg, monkeypatch, view="gpu", gpu=uuid_of(SBE))
        assert "could not be computed (RuntimeError: panel too large)" in captions(at)
        assert {m.label: m.value for m in at.metric}["Risk"] == "0.90"
        assert "at risk" in at.title[0].value
    finally:
        bg.stop()


def test_a_scorer_with_risk_history_is_drawn(known_url, monkeypatch):
    class Scorer:
        def __call__(self, store, at):
            return live(store, at)

        def risk_history(self, store, uuid, start, end):
            return pd.DataFrame({"ts": [START_H, START_H + HOUR], "risk": [0.2, 0.6]})

    START_H = END - 3 * HOUR
    at = run(known_url, Scorer(), monkeypatch, view="gpu", gpu=uuid_of(SBE))
    risk = risk_table(at)
    assert list(risk["ts"]) == [START_H, START_H + HOUR, AS_OF]
    assert list(risk["risk"]) == [0.2, 0.6, 0.9]


def test_attention_caption_only_without_a_model(known_url, background, monkeypatch):
    at = run(known_url, None, monkeypatch, view="attention")
    assert NO_MODEL in captions(at)
    background.wait(30)
    at = run(known_url, background, monkeypatch, view="attention")
    assert NO_MODEL not in captions(at)
    flagged = next(d.value for d in at.dataframe if "reasons" in d.value.columns)
    assert list(flagged.loc[flagged["state"] == "at-risk", "risk"]) == [0.9]
