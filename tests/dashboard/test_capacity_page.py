"""The Capacity page on the vendored openb trace: forecast metrics, the TCO chart and table,
and what it says when nothing is configured or the files are bad."""

from __future__ import annotations

from pathlib import Path

import pytest
from known_fleet import require_extra

require_extra("streamlit", "altair", "statsmodels")
import streamlit as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from gpuwarden.dashboard import app as app_module  # noqa: E402
from gpuwarden.dashboard._capacity_page import sources  # noqa: E402

APP = Path(app_module.__file__)
OPENB = Path(__file__).resolve().parents[1] / "data" / "openb" / "openb_pod_list_default.csv"


def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> AppTest:
    monkeypatch.setenv("GPUWARDEN_STORE", f"sqlite:///{tmp_path / 'none.db'}")
    for name in ("GPUWARDEN_PLAN_DEMAND", "GPUWARDEN_PLAN_PRICES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    st.cache_data.clear()
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params["view"] = "capacity"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_forecast_and_tco_from_the_openb_trace(monkeypatch, tmp_path):
    at = run(monkeypatch, tmp_path, GPUWARDEN_PLAN_DEMAND=str(OPENB))
    assert at.title[0].value == "Capacity"
    m = {x.label: x.value for x in at.metric}
    assert m["Requested now"].endswith("GPUs")
    mean = float(m["Forecast mean"].split()[0])
    assert 20 < mean < 60  # the trace asks for 23-60 GPUs an hour
    assert float(m["Capacity x1.3"].split()[0]) == pytest.approx(
        1.3 * mean, abs=0.1
    )  # both rounded to 0.1
    assert m["Break-even utilisation (own vs on-demand)"] == "38%"  # the shipped H100 prices
    assert m["Own vs on-demand at 70%"] == "44% cheaper"
    assert "Split: own / elastic" in m
    (table,) = [df.value for df in at.dataframe]
    assert table.loc["cloud_on_demand"].tolist() == [3.9, 3.9, 3.9, 3.9]
    assert any("seasons modelled" in c.value for c in at.caption)


def test_without_demand_the_page_says_how_and_still_prices(monkeypatch, tmp_path):
    at = run(monkeypatch, tmp_path)
    assert any("No demand history is configured" in i.value for i in at.info)
    assert any("--plan-demand" in c.value for c in at.code)
    assert "Break-even utilisation (own vs on-demand)" in {x.label for x in at.metric}


def test_bad_files_are_said_plainly(monkeypatch, tmp_path):
    bad = tmp_path / "prices.toml"
    bad.write_text("[H100\n")
    at = run(monkeypatch, tmp_path, GPUWARDEN_PLAN_DEMAND=str(tmp_path / "none.db"),
             GPUWARDEN_PLAN_PRICES=str(bad))  # fmt: skip
    errors = [e.value for e in at.error]
    assert any("Cannot read the demand history" in e for e in errors)
    assert any("not valid TOML" in e for e in errors)


def test_sources_from_arguments_or_environment():
    assert sources(["--plan-demand", "a.db"], {"GPUWARDEN_PLAN_PRICES": "p.toml"}) == (
        "a.db",
        "p.toml",
    )
    assert sources(["--plan-prices=q.toml"], {}) == ("", "q.toml")
