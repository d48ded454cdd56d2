"""What goes wrong with a store on a server: a bad URL, a server not there, credentials
refused, a query the server refuses. Each is one line for a command, and serve keeps serving
with the store reported unhealthy (real VictoriaMetrics and Prometheus)."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner
from conformance import DATA, HOURS, T0, frame_of
from tsdb_servers import daemons, history_series, start_prometheus_with, start_victoriametrics

from gpuwarden.cli import main
from gpuwarden.models import assess
from gpuwarden.serve.service import RiskService
from gpuwarden.store.prometheus import PrometheusStore
from gpuwarden.store.sqlite import SqliteStore

pytestmark = pytest.mark.integration


def _one_line_error(*args: str) -> str:
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 1, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    return lines[0]


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("prometheus+http://", "no host"),
        ("prometheus+http://host:99999", "not a usable URL"),
        ("victoriametrics://vm:8428?lookback=a+week", "lookback"),
        ("victoriametrics://vm:8428?colour=red", "unknown parameter 'colour'"),
        ("prometheus+http://p:9090?timeout=-1", "timeout must be a positive number"),
    ],
)
def test_a_bad_url_is_one_line(url: str, said: str) -> None:
    assert said in _one_line_error("score", "--store", url)


def test_a_server_that_is_not_there_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = _one_line_error(
        "summary", "--store", f"prometheus+http://127.0.0.1:{port}?retries=1&timeout=2"
    )
    assert f"Prometheus at prometheus+http://127.0.0.1:{port}" in line
    assert "cannot reach it (connection refused)" in line


def test_refused_credentials_are_one_line_without_the_password(tmp_path) -> None:
    vm = start_victoriametrics(
        tmp_path / "vm", args=("-httpAuth.username=gpuwarden", "-httpAuth.password=right")
    )
    port = vm.port
    try:
        line = _one_line_error(
            "score", "--store", f"victoriametrics://gpuwarden:wrong@127.0.0.1:{port}"
        )
        assert "refused the credentials (HTTP 401)" in line
        assert "wrong" not in line and "gpuwarden:***@" in line
        ok = CliRunner().invoke(
            main, ["score", "--store", f"victoriametrics://gpuwarden:right@127.0.0.1:{port}"]
        )
        assert "holds no telemetry" in ok.output  # past the credentials: an empty store
    finally:
        vm.stop()


def test_serve_survives_a_query_the_server_refuses(tmp_path) -> None:
    """A Prometheus that refuses heavy queries (--query.max-samples) answers 422: serve's
    round fails, its health says the store is failing, and the next round is tried again."""
    series = history_series([frame_of(DATA.samples)], DATA.events)
    prom = start_prometheus_with(tmp_path / "prom", series)
    prom.stop()
    argv = [a for a in prom.proc.args if not a.startswith("--log")] + ["--query.max-samples=50"]
    strict = daemons.start_daemon(
        "prometheus-strict", argv, port=prom.port, workdir=tmp_path / "prom"
    )
    now = T0 + HOURS * 3600
    store = PrometheusStore(strict.url, clock=lambda: now, retries=0)
    service = RiskService(store, assess=assess, verdicts=SqliteStore(":memory:"), clock=lambda: now)
    try:
        assert service.tick() == []
        ok, why = service.health()
        assert not ok and why.startswith("store failing: StoreRejected: Prometheus at ")
        assert "HTTP 422" in why and "too many samples" in why
        assert service.counters.assess_errors == 1
        assert service.tick() == [] and service.counters.assess_errors == 2  # still serving
    finally:
        store.close()
        strict.stop()
