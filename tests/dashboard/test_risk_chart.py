"""The GPU page's risk chart and the attention page's note, run by ``AppTest`` over the known
store with stored verdicts whose risk depends on time (``known_fleet.risk_at``): the dashboard
draws what was stored and scores nothing itself."""

from __future__ import annotations

import json
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
    gpu_id,
    require_extra,
    risk_at,
    run_app,
    store_hourly_verdicts,
    uuid_of,
)

require_extra("streamlit", "altair")
import streamlit as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from gpuwarden.dashboard import app as app_module  # noqa: E402
from gpuwarden.health import GpuState, Verdict  # noqa: E402
from gpuwarden.store.sqlite import SqliteStore  # noqa: E402

APP = Path(app_module.__file__)
AS_OF = END - STEP  # the known store's newest sample: 2026-01-01 05:55 UTC
NO_VERDICTS = "No verdicts are stored yet"


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()


def run(url: str, monkeypatch: pytest.MonkeyPatch, **query: str) -> AppTest:
    return run_app(url, monkeypatch, **query)


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


def test_gpu_page_draws_the_stored_risk_against_the_verdicts_line(known_url, monkeypatch):
    store_hourly_verdicts(known_url, threshold=0.65)  # a model card that says 0.65
    at = run(known_url, monkeypatch, view="gpu", gpu=uuid_of(SBE))
    assert at.title[0].value.startswith("node000 · GPU 0")
    risk = risk_table(at)
    hours = [END - h * HOUR for h in range(5, 0, -1)]  # 01:00 ... 05:00, up to the newest sample
    assert list(risk["ts"]) == hours
    assert list(risk["risk"]) == [risk_at(uuid_of(SBE), h) for h in hours]
    assert charts(at) == 6  # SBEs, remaps, temperatures, spread, PCIe, and the risk over time
    layers = risk_chart_layers(at)
    mark, line = layers[0]
    assert mark == "line" and list(line["value"]) == list(risk["risk"])
    assert list(line["time"]) == list(pd.to_datetime(risk["ts"], unit="s", utc=True))
    mark, rule = layers[1]
    assert mark == "rule" and list(rule["limit"]) == [0.65] and list(rule["label"]) == ["at risk"]
    assert "at risk from 0.65" in captions(at)
    picker = next(s for s in at.selectbox if s.label == "Time range")
    picker.set_value("Last 3 days").run()
    assert not at.exception and len(risk_table(at)) == 5


def test_one_stored_score_is_a_bar(known_url, monkeypatch):
    with SqliteStore.from_url(known_url) as store:
        store.write_verdicts([Verdict(AS_OF - 60, gpu_id(SBE), GpuState.AT_RISK, 0.9)])
    at = run(known_url, monkeypatch, view="gpu", gpu=uuid_of(SBE))
    assert list(risk_table(at)["risk"]) == [0.9]
    assert charts(at) == 5  # no risk chart
    assert [p.proto.text for p in at.get("progress")] == ["0.90 now"]
    assert {m.label: m.value for m in at.metric}["Risk"] == "0.90"
    assert "at risk" in at.title[0].value


def test_without_verdicts_the_pages_say_how_to_store_them(known_url, monkeypatch):
    at = run(known_url, monkeypatch, view="gpu", gpu=uuid_of(SBE))
    assert "No verdict with a risk is stored for this GPU" in captions(at)
    assert charts(at) == 5
    at = run(known_url, monkeypatch, view="attention")
    assert any(NO_VERDICTS in i.value for i in at.info)
    store_hourly_verdicts(known_url)
    st.cache_data.clear()
    at = run(known_url, monkeypatch, view="attention")
    assert not any(NO_VERDICTS in i.value for i in at.info)
    flagged = next(d.value for d in at.dataframe if "reasons" in d.value.columns)
    assert list(flagged.loc[flagged["state"] == "at-risk", "risk"]) == [
        risk_at(uuid_of(SBE), END - HOUR)
    ]


def test_the_gpu_charts_axes_read_as_numbers():
    """A risk axis reads 0.8, not the SI "800m"; big counts keep SI prefixes; a series that
    is zero throughout gets an axis of 0 to 1, not the "NaN" of an empty domain."""
    from gpuwarden.dashboard._charts import gpu_chart

    def y_of(values: list[float]) -> dict:
        frame = pd.DataFrame({"ts": [0.0, 3600.0, 7200.0], "v": values})
        spec = gpu_chart(frame, {"v": "v"}, "v", pd.DataFrame()).to_dict()
        return spec["layer"][0]["encoding"]["y"]

    risk = y_of([0.41, 0.63, 0.83])
    assert risk["axis"]["format"] == ",~f" and "scale" not in risk
    assert y_of([12_000.0, 40_000.0, 1e6])["axis"]["format"] == "~s"
    assert y_of([0.0, 0.0, 0.0])["scale"] == {"domain": [0, 1]}
