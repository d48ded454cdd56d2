"""``gpuwarden serve --spool``: verdicts wait on disk while their store is down and reach it
once it is back; a spool left for another store is refused; /metrics shows the spool."""

from __future__ import annotations

import sqlite3

import pytest
from click.testing import CliRunner
from influx2_fake import FakeInflux
from test_serve_cli import SIM

from gpuwarden.health import GpuState
from gpuwarden.serve.cli import serve
from gpuwarden.serve.metrics import render
from gpuwarden.serve.service import RiskService
from gpuwarden.store.influxdb import InfluxStore
from gpuwarden.store.spool import Spool
from gpuwarden.store.sqlite import SqliteStore


@pytest.fixture
def fake(monkeypatch):
    server = FakeInflux().start()
    monkeypatch.setenv("GPUWARDEN_INFLUX_TOKEN", server.token)
    yield server
    server.stop()


def once(tmp_path, *args):
    base = ["--once", "--collector", SIM, "--store", f"sqlite:///{tmp_path / 'g.db'}"]
    return CliRunner().invoke(serve, [*base, "--audit", str(tmp_path / "audit.db"), *args])


def waiting(directory) -> int:
    with sqlite3.connect(directory / "spool.db") as db:
        return db.execute("SELECT count(*) FROM spool").fetchone()[0]


def test_verdicts_wait_while_their_store_is_down_and_arrive_when_it_is_back(tmp_path, fake):
    url = f"influxdb://{fake.url.removeprefix('http://')}?org=gpuwarden&bucket=gpu&retries=0"
    spool = tmp_path / "spool"
    fake.fail(10**6, 503)  # down
    r = once(tmp_path, "--verdicts", url, "--spool", str(spool))
    assert r.exit_code == 0, r.output
    assert r.output.strip().endswith("4 GPUs scored, 0 changed")
    assert waiting(spool / "verdicts") == 1  # the round's 4 verdicts, one write
    assert waiting(spool / "telemetry") == 0  # the SQLite telemetry store was up
    fake.recover()
    r = once(tmp_path, "--verdicts", url, "--spool", str(spool))
    assert r.exit_code == 0, r.output
    assert waiting(spool / "verdicts") == 0
    with InfluxStore(url, token=fake.token) as store:
        got = store.read_verdicts()
    assert len(got) == 8 and set(got["state"]) == {GpuState.OK}  # both rounds, in order
    assert got["ts"].is_monotonic_increasing


def test_a_spool_left_for_another_store_is_refused_in_one_line(tmp_path, fake):
    url = f"influxdb://{fake.url.removeprefix('http://')}?org=gpuwarden&bucket=gpu&retries=0"
    spool = tmp_path / "spool"
    fake.fail(10**6, 503)
    assert once(tmp_path, "--verdicts", url, "--spool", str(spool)).exit_code == 0
    r = once(tmp_path, "--verdicts", f"sqlite:///{tmp_path / 'v.db'}", "--spool", str(spool))
    assert r.exit_code == 1
    assert "holds 1 batch(es) for influxdb://" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_metrics_show_each_spool(tmp_path):
    store = Spool(SqliteStore(tmp_path / "t.db"), tmp_path / "spool")
    service = RiskService(store, verdicts=store)
    body = render(service).decode()
    where = f'spool="{tmp_path / "spool"}"'
    assert f"gpuwarden_spool_pending_batches{{{where}}} 0.0" in body
    assert f"gpuwarden_spool_bytes{{{where}}} 0.0" in body
    for reason in ("size", "age", "rejected"):
        assert f'gpuwarden_spool_dropped_batches_total{{reason="{reason}",{where}}} 0.0' in body
    assert body.count("# TYPE gpuwarden_spool_pending_batches gauge") == 1  # one spool, once
    store.close()
