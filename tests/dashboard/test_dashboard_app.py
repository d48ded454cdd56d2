"""The Streamlit app, run in-process by ``streamlit.testing.v1.AppTest`` over the known store
(tests/dashboard/conftest.py): the numbers each page shows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from known_fleet import (
    DBE,
    END,
    LOST,
    MISSING,
    REMAP,
    SBE,
    UNHEALTHY,
    require_extra,
    run_app,
    serve_known,
    uuid_of,
)

require_extra("streamlit", "altair")
import streamlit as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from gpuwarden.dashboard import app as app_module  # noqa: E402
from gpuwarden.store.sqlite import SqliteStore  # noqa: E402

APP = Path(app_module.__file__)


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


def run(url: str, monkeypatch: pytest.MonkeyPatch, **query: str) -> AppTest:
    """Run the app over ``url`` without a risk model (hard signals only)."""
    return run_app(url, monkeypatch, **query)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def frame_with(at: AppTest, column: str) -> pd.DataFrame:
    frames = [d.value for d in at.dataframe if column in d.value.columns]
    assert frames, f"no table with a {column!r} column"
    return frames[0]


def test_overview_counts_states_and_fleet_numbers(known_url, monkeypatch):
    at = run(known_url, monkeypatch)
    assert at.title[0].value == "GPU fleet health"
    m = metrics(at)
    assert (m["OK"], m["At risk"], m["Unhealthy"], m["Missing"]) == ("11", "0", "4", "1")
    assert m["Utilisation now"] == f"{(13 * 50 + 90) / 14:.0f} %"
    assert m["Power now"] == "4.2 kW"
    # the store's newest sample is from 2026-01-01: the page says so instead of showing "missing"
    assert any("No sample for" in w.value and "2026-01-01 05:55 UTC" in w.value for w in at.warning)
    flagged = frame_with(at, "reasons")
    assert set(zip(flagged["hostname"], flagged["gpu"], strict=True)) == UNHEALTHY
    assert set(flagged["state"]) == {"unhealthy"}
    events = frame_with(at, "what")
    counts = dict(zip(events["what"], events["events"], strict=True))
    assert counts == {"Xid 79": 1, "GPU lost": 1, "Xid 48": 1, "Xid 13": 1}


def test_clicking_a_heatmap_cell_opens_the_gpu(known_url, monkeypatch):
    at = run(known_url, monkeypatch)
    # what the browser sends when a cell is clicked (the chart's point selection on uuid)
    at.session_state["heatmap"] = {"selection": {"gpu_cell": [{"uuid": uuid_of(REMAP)}]}}
    at.run()
    assert not at.exception
    assert at.query_params["view"] == "gpu" and at.query_params["gpu"] == uuid_of(REMAP)
    assert at.title[0].value.startswith("node002 · GPU 0")


def test_selecting_a_flagged_row_opens_the_gpu(known_url, monkeypatch):
    at = run(known_url, monkeypatch, view="attention")
    flagged = frame_with(at, "reasons")
    at.session_state["attention_flagged"] = {"selection": {"rows": [1], "columns": []}}
    at.run()
    assert not at.exception
    assert at.query_params["gpu"] == flagged["uuid"].iloc[1]
    assert at.selectbox(key="gpu_pick").value == flagged["uuid"].iloc[1]


def test_attention_page_lists_flagged_and_missing_gpus(known_url, monkeypatch):
    at = run(known_url, monkeypatch, view="attention")
    assert at.title[0].value == "GPUs needing attention"
    flagged = frame_with(at, "reasons")
    rows = {
        (h, g): r
        for h, g, r in zip(flagged["hostname"], flagged["gpu"], flagged["reasons"], strict=True)
    }
    assert set(rows) == UNHEALTHY
    assert "double-bit ECC error" in rows[DBE] and "Xid 79" in rows[LOST]
    assert "row remapping failed" in rows[REMAP]
    assert flagged["action"].str.len().gt(0).all()
    assert flagged["flagged_ts"].notna().all()
    missing = frame_with(at, "last_ts")
    assert list(zip(missing["hostname"], missing["gpu"], strict=True)) == [MISSING]


def test_gpu_page_shows_the_gpus_series(known_url, monkeypatch):
    at = run(known_url, monkeypatch, view="gpu", gpu=uuid_of(SBE))
    assert at.title[0].value.startswith("node000 · GPU 0")
    assert at.selectbox(key="gpu_pick").value == uuid_of(SBE)
    m = metrics(at)
    assert m["SBEs in range"] == "700"
    assert m["Peak spread"] == "20.0 °C"
    assert m["Peak memory temp"] == "70.0 °C"
    assert m["Xid / lost events"] == "1"
    numbers = frame_with(at, "sbe_per_h")
    assert len(numbers) == 72
    assert numbers["sbe_per_h"].max() == 120.0 and numbers["sbe_per_h"].min() == 0.0
    assert numbers["spread_c"].iloc[-1] == 20.0
    assert (numbers["pcie_limit_per_min"] == 0.96 * 16).all()


def test_gpu_page_of_an_unhealthy_gpu_says_what_to_do(known_url, monkeypatch):
    at = run(known_url, monkeypatch, view="gpu", gpu=uuid_of(LOST))
    assert "unhealthy" in at.title[0].value
    assert any("Xid 79" in e.value and "Recommended action" in e.value for e in at.error)


def test_gpu_page_with_an_unknown_uuid_warns(known_url, monkeypatch):
    at = run(known_url, monkeypatch, view="gpu", gpu="GPU-does-not-exist")
    assert any("GPU-does-not-exist" in w.value for w in at.warning)
    assert at.title[0].value.startswith("node")  # the worst GPU instead


def test_serves_verdicts_are_what_the_pages_show(known_url, monkeypatch):
    """serve's loop ran over the store: its verdicts (an at-risk GPU, four unhealthy) are the
    states, with its reasons, and no note about missing verdicts."""
    serve_known(known_url)
    at = run(known_url, monkeypatch)
    m = metrics(at)
    assert (m["OK"], m["At risk"], m["Unhealthy"], m["Missing"]) == ("10", "1", "4", "1")
    assert not any("No verdicts are stored yet" in i.value for i in at.info)
    at = run(known_url, monkeypatch, view="attention")
    flagged = frame_with(at, "reasons")
    row = flagged[flagged["state"] == "at-risk"].iloc[0]
    assert (row["hostname"], row["gpu"], row["reasons"]) == (
        "node000",
        0,
        "single-bit errors rising",
    )
    assert row["risk"] == pytest.approx(0.9875)


def test_a_store_without_verdicts_says_so_and_names_the_backfill(known_url, monkeypatch):
    at = run(known_url, monkeypatch, view="attention")
    assert any("No verdicts are stored yet" in i.value for i in at.info)
    backfill = [c.value for c in at.code if "--into" in c.value]
    assert backfill and backfill[0].startswith(f"gpuwarden score --store {known_url} --start ")
    assert backfill[0].endswith(f"--step 1h --into {known_url}")
    assert metrics_or_text(at)
    flagged = frame_with(at, "reasons")
    assert flagged["risk"].isna().all()  # hard signals only: risk unknown, never 0
    assert len(flagged[flagged["state"] == "unhealthy"]) == 4


def test_empty_store_says_how_to_start_collecting(tmp_path, monkeypatch):
    path = tmp_path / "empty.db"
    SqliteStore(path).close()
    at = run(f"sqlite:///{path}", monkeypatch)
    assert any("no GPU telemetry yet" in i.value for i in at.info)
    assert any("gpuwarden collect" in c.value for c in at.code)


def test_missing_store_file_is_not_created(tmp_path, monkeypatch):
    path = tmp_path / "nowhere.db"
    at = run(f"sqlite:///{path}", monkeypatch)
    assert any("no store at" in i.value for i in at.info)
    assert not path.exists()


def test_unreadable_store_is_one_clear_error(tmp_path, monkeypatch):
    path = tmp_path / "garbage.db"
    path.write_text("this is not a database")
    at = run(f"sqlite:///{path}", monkeypatch)
    assert any("Cannot read the store" in e.value for e in at.error)


def test_store_url_from_arguments():
    assert app_module.store_url(["--store", "sqlite:///a.db"]) == "sqlite:///a.db"
    assert app_module.store_url(["--store=sqlite:///b.db"]) == "sqlite:///b.db"


def test_a_broken_settings_file_is_one_clear_error(tmp_path, monkeypatch):
    bad = tmp_path / "gpuwarden.toml"
    bad.write_text("store = [unclosed")
    monkeypatch.delenv("GPUWARDEN_STORE", raising=False)
    monkeypatch.setenv("GPUWARDEN_CONFIG", str(bad))
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.run()
    assert not at.exception
    assert any("not valid TOML" in e.value for e in at.error)


def test_backfilled_verdicts_of_the_real_model_are_drawn(
    known_url, known_store, monkeypatch, tmp_path
):
    """``gpuwarden score --into`` with the shipped model stores hourly verdicts; the GPU page
    draws them, the same numbers ``gpuwarden.models.backtest`` gives for those hours."""
    from click.testing import CliRunner

    from gpuwarden.models import backtest, load_model
    from gpuwarden.models.cli import score

    hours = [END - h * 3600.0 for h in range(5, 0, -1)]  # 01:00 ... 05:00, the store's hours
    args = ["--store", known_url, "--start", str(hours[0]), "--end", str(hours[-1])]
    done = CliRunner().invoke(
        score, [*args, "--step", "1h", "--into", known_url, "--output", str(tmp_path / "risk.csv")]
    )
    assert done.exit_code == 0, done.output
    # the GPUs that reported in the 24 h before each hour, one board a slot: 16 slots (the
    # board swapped out is not scored once its successor reports)
    assert f"stored 80 verdicts in {known_url}" in done.output
    at = run(known_url, monkeypatch, view="gpu", gpu=uuid_of(SBE))
    risk = frame_with(at, "risk")
    assert list(risk["ts"]) == hours
    expected = backtest(known_store, load_model(), start=hours[0], end=hours[-1], step_s=3600)
    expected = expected[expected["uuid"] == uuid_of(SBE)].sort_values("at")
    assert list(risk["risk"]) == pytest.approx(list(expected["risk"]), abs=1e-4)


def metrics_or_text(at: AppTest) -> bool:
    return bool(at.title) and at.title[0].value == "GPUs needing attention"


def test_a_board_quiet_before_the_range_shows_its_last_hours(tmp_path, monkeypatch):
    """A board that stopped reporting a day and a half ago read "No sample of this GPU in the
    last 24 h": its page shows the 24 h up to its last sample, and says so."""
    from gpuwarden.telemetry import Batch, GpuId, Sample

    quiet, calm = (
        GpuId("n1", 0, "GPU-quiet", model="H100"),
        GpuId("n1", 1, "GPU-calm", model="H100"),
    )
    store = SqliteStore(tmp_path / "s.db")
    t0 = 1_767_225_600.0
    for k in range(12 * 40):  # 40 h at 5-minute steps; the quiet board stops after 3 h
        ts = t0 + 300 * k
        boards = (quiet, calm) if k < 36 else (calm,)
        store.write_batch(Batch(ts, tuple(
            Sample(ts, g, {"gpu_temp_c": 50.0, "ecc_sbe_volatile_total": float(k)}) for g in boards
        )))  # fmt: skip
    store.close()
    at = run(f"sqlite:///{tmp_path / 's.db'}", monkeypatch, view="gpu", gpu="GPU-quiet")
    assert "missing" in at.title[0].value
    assert any("Shown: the 24 h to its last sample" in c.value for c in at.caption), at.caption
    assert not any("No sample of this GPU" in i.value for i in at.info)
    assert metrics(at)["SBEs in range"] == "35"  # the 36 samples' increases
