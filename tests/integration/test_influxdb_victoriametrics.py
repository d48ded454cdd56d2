"""``influxdb://`` writes into a real VictoriaMetrics, through its InfluxDB v2 write endpoint.

No InfluxDB 2 server installs here. VictoriaMetrics' ``/api/v2/write`` is a second, independent
reader of the line protocol the store sends (it names each series ``<measurement>_<field>`` and
keeps numbers, to the millisecond; text fields it stores as 0, so they are not compared). So:

- a simulated fleet written straight to VictoriaMetrics reads back from its export API point
  for point, value for value;
- the conformance suite's data, written through the fake InfluxDB 2 server that also forwards
  every write to VictoriaMetrics, is what VictoriaMetrics stored, for every numeric field: the
  fake, which answers the Flux reads, serves the points a real server parsed;
- VictoriaMetrics stopped is one clear error, and started again takes the writes;
- verdicts written as series are all the Grafana risk panels need.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from gpuwarden.collectors.sim import SimCollector
from gpuwarden.errors import StoreError
from gpuwarden.health import GpuState, Verdict
from gpuwarden.store.influxdb import InfluxStore
from gpuwarden.telemetry import Batch, GpuId

if TYPE_CHECKING:
    from conftest import Daemon

# the fake InfluxDB 2 server and the conformance data live with the store tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))
from conformance import DATA, load_writable  # noqa: E402
from influx2_fake import FakeInflux  # noqa: E402

pytestmark = pytest.mark.integration

DASHBOARDS = sorted((Path(__file__).resolve().parents[2] / "grafana" / "dashboards").glob("*.json"))
Series = dict[tuple[str, tuple[tuple[str, str], ...]], dict[int, float]]


def export(vm: Daemon, match: str = '{__name__=~"gpuwarden.*"}') -> Series:
    """Every sample VictoriaMetrics holds for ``match``: (name, labels) -> {ms: value}."""
    httpx.get(f"{vm.url}/internal/force_flush", timeout=10)
    got = httpx.get(f"{vm.url}/api/v1/export", params={"match[]": match, "start": "0"}, timeout=30)
    got.raise_for_status()
    out: Series = {}
    for text in got.text.splitlines():
        row = json.loads(text)
        labels = dict(row["metric"])
        name = labels.pop("__name__")
        key = (name, tuple(sorted(labels.items())))
        out.setdefault(key, {}).update(zip(row["timestamps"], row["values"], strict=True))
    return out


def same(got: Series, want: Series) -> None:
    """Equal series, values to 12 significant digits: VictoriaMetrics stores each value as a
    decimal of that precision (a 4.3e10 mJ energy counter loses its fifth decimal)."""
    assert got.keys() == want.keys()
    for key, points in want.items():
        assert got[key].keys() == points.keys(), key
        for ms, value in points.items():
            assert got[key][ms] == pytest.approx(value, rel=1e-11, abs=0), (key, ms)


def settled(read: Callable[[], Series], want: int, timeout_s: float = 30.0) -> Series:
    """``read()`` once it holds ``want`` samples (a new series takes VictoriaMetrics a moment)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = read()
        if sum(map(len, got.values())) >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def influx_url(daemon_url: str) -> str:
    return f"influxdb://{daemon_url.removeprefix('http://')}?org=gpuwarden&bucket=gpu&retries=1&timeout=5"


def test_a_simulated_fleet_reads_back_from_victoriametrics_value_for_value(
    victoria_metrics: Daemon,
) -> None:
    sim = SimCollector.from_url("sim://?nodes=2&gpus=2&seed=5&step=60")
    batches = [sim.collect() for _ in range(5)]
    store = InfluxStore(influx_url(victoria_metrics.url), token="")
    for b in batches:
        store.write_batch(b)
    want: Series = {}
    for b in batches:
        for s in b.samples:
            ids = (("gpu", str(s.gpu.index)), ("hostname", s.gpu.hostname), ("uuid", s.gpu.uuid))
            for field, value in s.values.items():
                if not math.isnan(value):
                    key = (f"gpuwarden_sample_{field}", ids)
                    want.setdefault(key, {})[round(s.ts * 1000)] = value
    n = sum(map(len, want.values()))
    got = settled(lambda: export(victoria_metrics, '{__name__=~"gpuwarden_sample_.*"}'), n)
    same(got, want)
    assert n > 5 * 4 * 20  # every GPU, every step, most fields
    store.close()


def test_the_fake_serves_what_victoriametrics_parsed(victoria_metrics: Daemon) -> None:
    fake = FakeInflux(forward_to=victoria_metrics.url).start()
    store = InfluxStore(
        f"influxdb://{fake.url.removeprefix('http://')}?org=gpuwarden&bucket=gpu", token=fake.token
    )
    load_writable(store)
    numeric: Series = {}
    for (measurement, tags, field), points in fake.snapshot("gpu").items():
        values = list(points.values())
        if isinstance(values[0], str):
            continue  # VictoriaMetrics keeps numbers only
        name = f"{measurement}_{field}"
        numeric[(name, tags)] = {ns // 1_000_000: float(v) for ns, v in points.items()}
    n = sum(map(len, numeric.values()))
    got = settled(lambda: export(victoria_metrics), n)
    got = {k: v for k, v in got.items() if k in numeric or not _text_field(fake, k[0])}
    same(got, numeric)
    assert {k[0] for k in numeric} >= {
        "gpuwarden_sample_gpu_temp_c",
        "gpuwarden_sample_ecc_sbe_volatile_total",
        "gpuwarden_risk_score",
        "gpuwarden_gpu_state",
        "gpuwarden_gpu_transition",
        "gpuwarden_event_code",
        "gpuwarden_failure_xid",
    }
    assert len(DATA.samples) * 3 < n  # several fields per sample
    store.close()
    fake.stop()


def _text_field(fake: FakeInflux, name: str) -> bool:
    return any(f"{m}_{f}" == name and kind == "string" for (_, m, f), kind in fake.types.items())


def test_victoriametrics_down_is_one_line_and_back_up_takes_writes(
    victoria_metrics: Daemon, daemons: list[Daemon]
) -> None:
    from alerting_daemons import launch_victoria_metrics  # this folder's conftest, by path

    sim = SimCollector.from_url("sim://?nodes=1&gpus=2&seed=2&step=60")
    first, second = sim.collect(), sim.collect()
    store = InfluxStore(influx_url(victoria_metrics.url), token="")
    store.write_batch(first)
    victoria_metrics.stop()
    with pytest.raises(StoreError, match="cannot reach") as err:
        store.write_batch(second)
    assert "\n" not in str(err.value)
    again = launch_victoria_metrics(victoria_metrics.workdir, port=victoria_metrics.port)
    daemons.append(again)
    store.write_batch(second)
    stamps = {round(b.ts * 1000) for b in (first, second)}
    got = settled(lambda: export(again, '{__name__="gpuwarden_sample_gpu_temp_c"}'), 2 * 2)
    assert {ms for points in got.values() for ms in points} == stamps
    store.close()


def test_a_whole_batch_is_one_request_when_it_fits(victoria_metrics: Daemon) -> None:
    sim = SimCollector.from_url("sim://?nodes=2&gpus=4&seed=1&step=60")
    batch: Batch = sim.collect()
    store = InfluxStore(influx_url(victoria_metrics.url), token="")
    store.write_batch(batch)  # would raise on any refused line
    got = settled(lambda: export(victoria_metrics, '{__name__="gpuwarden_sample_power_w"}'), 8)
    assert len(got) == 8
    store.close()


VERDICT_SERIES = re.compile(r"gpuwarden_(risk_score|gpu_state|gpu_transition|decisions_total)\b")


def test_the_grafana_risk_panels_read_verdicts_written_to_victoriametrics(
    victoria_metrics: Daemon,
) -> None:
    """serve writing verdicts into a time-series store is enough for the risk panels: no
    Prometheus scraping serve. Every query of theirs returns data from VictoriaMetrics."""
    from test_grafana_queries import _result, dashboard_queries, substitute

    now = time.time()
    a, b = GpuId("node1", 0, "GPU-a"), GpuId("node1", 1, "GPU-b")
    ok, at_risk, unhealthy = GpuState.OK, GpuState("at-risk"), GpuState("unhealthy")
    store = InfluxStore(influx_url(victoria_metrics.url), token="")
    store.write_verdicts(
        [
            Verdict(now - 600, a, ok, risk=0.2, threshold=0.7),
            Verdict(now - 600, b, ok, risk=0.3, threshold=0.7),
            Verdict(now - 300, a, at_risk, risk=0.8, since=now - 300, changed_from=ok),
            Verdict(now - 120, b, unhealthy, cause="hard-signal", since=now - 120, changed_from=ok),
        ]
    )
    settled(lambda: export(victoria_metrics, '{__name__="gpuwarden_gpu_state"}'), 4 * 3)
    values = {
        "datasource": "gpuwarden-victoriametrics",
        "Hostname": "node1",
        "gpu": "0",
        "modelName": ".*",
        "__rate_interval": "5m",
        "__interval": "1m",
    }
    checked, failures = 0, []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for where, expr, instant in dashboard_queries(board):
            if not VERDICT_SERIES.search(expr):
                continue
            checked += 1
            promql = substitute(expr, values)
            ok_, why = _result(victoria_metrics, promql, instant=instant)
            if not ok_:
                failures.append(f"{path.name} {where}: {why}\n    {promql}")
    assert checked >= 6, checked
    assert not failures, "\n".join(failures)
    store.close()


def test_collect_spools_while_victoriametrics_is_stopped_and_catches_up(
    victoria_metrics: Daemon, daemons: list[Daemon], tmp_path: Path
) -> None:
    """``gpuwarden collect --spool`` into a real VictoriaMetrics that is stopped halfway and
    started again: every collection arrives, in order, none twice."""
    from alerting_daemons import launch_victoria_metrics  # this folder's conftest, by path
    from click.testing import CliRunner

    from gpuwarden.cli import main

    start = 1_767_225_600.0
    spool = tmp_path / "spool"

    def collect(vm: Daemon, resume: float, n: int) -> str:
        sim = f"sim://?nodes=1&gpus=2&seed=4&step=60&start={start}&resume={resume}"
        args = ["collect", "--collector", sim, "--store", influx_url(vm.url), "--spool", str(spool),
                "--spool-max-age", "36500d", "--iterations", str(n), "--interval", "0.01"]  # fmt: skip
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        return result.output

    assert f"spool {spool}: 0 waiting" in collect(victoria_metrics, start, 2)
    victoria_metrics.stop()
    assert f"spool {spool}: 3 waiting, 3 spooled, 0 replayed" in collect(
        victoria_metrics, start + 120, 3
    )
    again = launch_victoria_metrics(victoria_metrics.workdir, port=victoria_metrics.port)
    daemons.append(again)
    assert f"spool {spool}: 0 waiting, 1 spooled, 4 replayed" in collect(again, start + 300, 2)
    got = settled(lambda: export(again, '{__name__="gpuwarden_sample_gpu_temp_c"}'), 2 * 7)
    assert len(got) == 2
    for points in got.values():
        assert sorted(points) == [round((start + 60 * k) * 1000) for k in range(7)]
    raw = httpx.get(
        f"{again.url}/api/v1/export",
        params={"match[]": '{__name__="gpuwarden_sample_gpu_temp_c"}', "start": "0"},
        timeout=30,
    ).text.splitlines()
    assert sum(len(json.loads(line)["timestamps"]) for line in raw) == 2 * 7  # none twice
