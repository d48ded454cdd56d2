"""gpuwarden's commands on history kept in a real VictoriaMetrics and a real Prometheus, with
gpuwarden collecting nothing itself: the same simulated fleet in SQLite, in VictoriaMetrics
(written by ``gpuwarden simulate``) and in Prometheus (backfilled by promtool), scored,
summarised and served from each.

``gpuwarden score`` must agree with SQLite: no GPU in another state, and the risk within 0.01
for at least 99% of GPUs (the servers roll up themselves: a mean summed in another order, a
value kept to VictoriaMetrics' precision).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from tsdb_servers import history_series, start_prometheus_with, start_victoriametrics

from gpuwarden.cli import main
from gpuwarden.demo import fleet_spec
from gpuwarden.sim import Fleet
from gpuwarden.store import open_store

pytestmark = pytest.mark.integration

# small: 16 GPUs, 8 days at 10-minute samples, failures sped up so some GPUs are not ok
FLEET = {"nodes": 4, "gpus_per_node": 4, "models": "H100-80GB,A100-80GB", "days": 8.0,
         "step_s": 600, "seed": 11, "accel": 300.0}  # fmt: skip
END = math.floor(time.time() / 3600) * 3600 - 1800.0  # half an hour ago, mid-hour


def _cli(*args: str) -> str:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """The fleet in each backend: {"sqlite": url, "victoriametrics": url, "prometheus": url}."""
    tmp = tmp_path_factory.mktemp("tsdb")
    sim = ["simulate", "--nodes", "4", "--gpus", "4", "--models", FLEET["models"], "--days",
           "8", "--step", "600", "--seed", "11", "--accel", "300", "--end", str(END)]  # fmt: skip
    sqlite = f"sqlite:///{tmp / 'fleet.db'}"
    _cli(*sim, "--store", sqlite)
    vm = start_victoriametrics(tmp / "vm")
    vm_url = vm.url.replace("http://", "victoriametrics://")
    _cli(*sim, "--store", vm_url)
    fleet = Fleet(fleet_spec(**FLEET, end_ts=END))
    frames, events = [], []
    for chunk in fleet.chunks(progress=False):
        frames.append(chunk.samples)
        events += chunk.events
    prom = start_prometheus_with(tmp / "prom", history_series(frames, events, fleet.failures))
    yield {"sqlite": sqlite, "victoriametrics": vm_url,
           "prometheus": prom.url.replace("http://", "prometheus+http://")}  # fmt: skip
    vm.stop()
    prom.stop()


def _score(url: str, *args: str) -> pd.DataFrame:
    rows = json.loads(_cli("score", "--store", url, "--format", "json", *args))
    return pd.DataFrame(rows).set_index("uuid")


@pytest.mark.parametrize("backend", ["victoriametrics", "prometheus"])
def test_score_agrees_with_sqlite(stores, backend) -> None:
    want = _score(stores["sqlite"])
    got = _score(stores[backend])
    assert len(want) > 10 and sorted(got.index) == sorted(want.index)
    assert got["at"].iloc[0] == want["at"].iloc[0]  # the same newest sample found
    # and at the newest hour (of the last three days) where a GPU in the fleet is not ok: a
    # failed board is out of the fleet once its successor reports, so the end may hold none
    for hours_back in range(0, 72, 6):
        at = str(END - hours_back * 3600)
        want = _score(stores["sqlite"], "--at", at)
        if (want["state"] != "ok").any():
            break
    assert (want["state"] != "ok").any(), "the fleet should have GPUs that are not ok"
    got = _score(stores[backend], "--at", at)
    assert sorted(got.index) == sorted(want.index)
    got = got.reindex(want.index)
    assert (got["state"] == want["state"]).all(), pd.concat([got, want], axis=1)
    close = np.abs(got["risk"] - want["risk"]) <= 0.01
    assert close.mean() >= 0.99


@pytest.mark.parametrize("backend", ["victoriametrics", "prometheus"])
def test_a_backtest_agrees_with_sqlite(stores, backend) -> None:
    span = ["--start", str(END - 2 * 86400 - 1800), "--end", str(END - 1800), "--step", "12h"]
    want = _score(stores["sqlite"], *span).reset_index().set_index(["uuid", "at"])
    got = _score(stores[backend], *span).reset_index().set_index(["uuid", "at"])
    got = got.reindex(want.index)
    assert (got["state"] == want["state"]).all()
    assert (np.abs(got["risk"] - want["risk"]) <= 0.01).mean() >= 0.99


@pytest.mark.parametrize("backend", ["victoriametrics", "prometheus"])
def test_summary_counts_the_same_fleet_and_xids(stores, backend) -> None:
    want = _cli("summary", "--store", stores["sqlite"])
    got = _cli("summary", "--store", stores[backend])

    def section(text: str, head: str) -> list[str]:
        lines = text.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(head))
        rest = lines[at:] + [""]
        return rest[: rest.index("")]

    assert got.splitlines()[0] == want.splitlines()[0]
    assert want.startswith("Fleet: 4 nodes, 16 GPU slots")
    assert section(got, "Xid events") == section(want, "Xid events")
    assert section(got, "Failures recorded") == section(want, "Failures recorded")
    assert section(got, "GPUs to watch") == section(want, "GPUs to watch")


def test_serve_scores_prometheus_and_keeps_verdicts_elsewhere(stores, tmp_path) -> None:
    from gpuwarden.store.sqlite import SqliteStore

    out = _cli(
        "serve", "--once", "--no-collect", "--store", stores["prometheus"],
        "--verdicts", f"sqlite:///{tmp_path / 'verdicts.db'}", "--audit", str(tmp_path / "a.db"),
    )  # fmt: skip
    scored = int(out.strip().splitlines()[-1].split()[0])
    assert scored >= 10  # serve scores at the wall clock: the GPUs seen in the last 24 h
    with SqliteStore(tmp_path / "verdicts.db") as verdicts:
        assert len(verdicts.read_verdicts(latest=True)) == scored


def test_serve_writes_verdicts_into_victoriametrics(stores, tmp_path) -> None:
    out = _cli(
        "serve", "--once", "--no-collect", "--store", stores["victoriametrics"],
        "--audit", str(tmp_path / "audit.db"),
    )  # fmt: skip
    scored = int(out.strip().splitlines()[-1].split()[0])
    store = open_store(stores["victoriametrics"])
    try:
        assert len(store.read_verdicts(latest=True)) == scored
    finally:
        store.close()


@pytest.mark.parametrize("backend", ["victoriametrics", "prometheus"])
def test_the_dashboard_shows_the_same_fleet(stores, backend, monkeypatch) -> None:
    if importlib.util.find_spec("streamlit") is None:  # the dashboard extra
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("streamlit is not installed; CI=true, so the dashboard test may not skip")
        pytest.skip("streamlit is not installed: pip install -e '.[dashboard]'")
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from gpuwarden.dashboard import app as app_module

    def overview(url: str) -> dict[str, str]:
        st.cache_data.clear()
        st.cache_resource.clear()
        monkeypatch.setenv("GPUWARDEN_STORE", url)
        at = AppTest.from_file(str(app_module.__file__), default_timeout=60)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return {m.label: m.value for m in at.metric}

    want, got = overview(stores["sqlite"]), overview(stores[backend])
    assert got == want and set(want) >= {"OK", "At risk", "Unhealthy", "Missing"}


def test_train_reads_victoriametrics(stores, tmp_path) -> None:
    out = _cli("train", "--store", stores["victoriametrics"], "--out", str(tmp_path / "model"),
               "--step", "6h", "--no-progress")  # fmt: skip
    assert "trained on" in out and (tmp_path / "model" / "model.skops").is_file()
