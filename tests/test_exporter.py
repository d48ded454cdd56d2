"""The /metrics exporter: rendering, GPU liveness, Xid counters, health, HTTP."""

from __future__ import annotations

import math
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwarden.collectors._promtext import parse_text
from gpuwarden.collectors.dcgm import DcgmCollector
from gpuwarden.errors import ConfigError
from gpuwarden.exporter import CONTENT_TYPE, Exporter, run_exporter
from gpuwarden.telemetry import (
    FIELD_BY_DCGM,
    FIELDS_BY_NAME,
    Batch,
    Event,
    GpuId,
    Rejection,
    Sample,
)

G0 = GpuId("node1", 0, "GPU-aaaa", "00000000:18:00.0", "NVIDIA H100 80GB HBM3")
G1 = GpuId("node1", 1, "GPU-bbbb", "00000000:2A:00.0", "NVIDIA H100 80GB HBM3")
Step = Batch | Exception


class ScriptedCollector:
    """Returns (or raises) the scripted steps in order, then repeats the last one."""

    url = "test://fleet"

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.calls = 0

    def collect(self) -> Batch:
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        if isinstance(step, Exception):
            raise step
        return step

    def close(self) -> None:
        pass


class ListStore:
    url = "memory://"

    def __init__(self, fail: bool = False) -> None:
        self.batches: list[Batch] = []
        self.fail = fail

    def write_batch(self, batch: Batch) -> None:
        if self.fail:
            raise OSError("disk full")
        self.batches.append(batch)


def sample(gpu: GpuId, **values: float) -> Sample:
    return Sample(ts=100.0, gpu=gpu, values=values)


def both(**extra: float) -> Batch:
    return Batch(
        ts=100.0,
        samples=(
            sample(G0, gpu_temp_c=41, power_w=312.5, mem_temp_c=47, **extra),
            sample(G1, gpu_temp_c=44, power_w=298.0, mem_temp_c=math.nan),
        ),
    )


def series(body: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every series in a /metrics body. prometheus_client's parser must accept the body too
    (it renames counters to end in _total, so the lookup uses our own lenient parser)."""
    list(text_string_to_metric_families(body.decode()))
    parsed = parse_text(body.decode())
    assert parsed.bad_lines == []
    return {(s.name, frozenset(s.labels.items())): s.value for s in parsed.samples}


def values_of(body: bytes, name: str, **labels: str) -> dict[str, float]:
    """{UUID: value} of ``name`` series matching ``labels``."""
    return {
        dict(lab)["UUID"]: v
        for (n, lab), v in series(body).items()
        if n == name and set(labels.items()) <= lab
    }


def test_render_uses_dcgm_names_and_labels_and_skips_missing() -> None:
    exporter = Exporter(ScriptedCollector(both()), clock=lambda: 1234.5)
    exporter.poll_once()
    body = exporter.render()

    labels = {
        "gpu": "0",
        "UUID": "GPU-aaaa",
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "node1",
    }
    assert series(body)[("DCGM_FI_DEV_GPU_TEMP", frozenset(labels.items()))] == 41
    assert b"DCGM_FI_DEV_POWER_USAGE{" in body and b"} 312.5\n" in body
    # GPU 1's memory temperature was NaN: not exported for it; never exported as 0
    assert values_of(body, "DCGM_FI_DEV_MEMORY_TEMP") == {"GPU-aaaa": 47}
    # a field no GPU has gets no HELP/TYPE either
    assert b"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" not in body
    assert b"# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n" in body
    assert values_of(body, "gpuwarden_gpu_up") == {"GPU-aaaa": 1, "GPU-bbbb": 1}
    health = {n: v for (n, _), v in series(body).items() if n.startswith("gpuwarden_collect")}
    assert health["gpuwarden_collector_up"] == 1
    assert health["gpuwarden_collector_errors_total"] == 0
    assert health["gpuwarden_collector_last_success_timestamp_seconds"] == 1234.5
    assert health["gpuwarden_collect_duration_seconds"] >= 0


def test_counter_types_follow_the_catalogue() -> None:
    batch = Batch(ts=1.0, samples=(sample(G0, ecc_sbe_volatile_total=17, pcie_replay_total=0),))
    exporter = Exporter(ScriptedCollector(batch))
    exporter.poll_once()
    body = exporter.render()
    assert b"# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter\n" in body
    assert values_of(body, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER") == {"GPU-aaaa": 0}


def test_before_the_first_poll_only_the_error_counter_is_shown() -> None:
    exporter = Exporter(ScriptedCollector(both()))
    names = {name for name, _ in series(exporter.render())}
    assert names == {"gpuwarden_collector_errors_total"}
    assert exporter.health() == (True, "starting: no collection yet")


def test_every_xid_is_counted_per_code() -> None:
    def xids(*codes: int) -> Batch:
        events = tuple(Event(ts=100.0, gpu=G0, kind="xid", code=c) for c in codes)
        return Batch(ts=100.0, samples=both().samples, events=events)

    collector = ScriptedCollector(xids(48), xids(48, 79), xids())
    exporter = Exporter(collector)
    for _ in range(3):
        exporter.poll_once()
    body = exporter.render()
    assert values_of(body, "gpuwarden_xid_errors_total", xid="48") == {"GPU-aaaa": 2}
    assert values_of(body, "gpuwarden_xid_errors_total", xid="79") == {"GPU-aaaa": 1}
    assert b'UUID="GPU-bbbb",' not in body.split(b"gpuwarden_xid_errors_total counter")[1]


def test_a_gpu_that_disappears_or_is_lost_is_down() -> None:
    only_g0 = Batch(ts=2.0, samples=(sample(G0, gpu_temp_c=41),))
    lost = Batch(
        ts=3.0,
        samples=(sample(G0, gpu_temp_c=41), sample(G1, gpu_temp_c=44)),
        events=(Event(ts=3.0, gpu=G0, kind="gpu_lost", detail="fell off the bus"),),
    )
    exporter = Exporter(ScriptedCollector(both(), only_g0, lost, both()))

    exporter.poll_once()
    exporter.poll_once()
    body = exporter.render()
    assert values_of(body, "gpuwarden_gpu_up") == {"GPU-aaaa": 1, "GPU-bbbb": 0}
    assert values_of(body, "DCGM_FI_DEV_GPU_TEMP") == {"GPU-aaaa": 41}  # no stale value

    exporter.poll_once()
    assert values_of(exporter.render(), "gpuwarden_gpu_up") == {"GPU-aaaa": 0, "GPU-bbbb": 1}
    exporter.poll_once()
    assert values_of(exporter.render(), "gpuwarden_gpu_up") == {"GPU-aaaa": 1, "GPU-bbbb": 1}


def test_a_failing_collect_is_counted_and_last_values_stay() -> None:
    clock = iter([10.0, 20.0, 30.0])
    collector = ScriptedCollector(both(), RuntimeError("NVML went away"))
    exporter = Exporter(collector, clock=lambda: next(clock))
    assert exporter.poll_once() is not None
    assert exporter.poll_once() is None
    assert exporter.poll_once() is None

    body = exporter.render()
    health = {n: v for (n, _), v in series(body).items() if n.startswith("gpuwarden_collector")}
    assert health["gpuwarden_collector_errors_total"] == 2
    assert health["gpuwarden_collector_up"] == 0
    assert health["gpuwarden_collector_last_success_timestamp_seconds"] == 10.0
    assert values_of(body, "DCGM_FI_DEV_GPU_TEMP") == {"GPU-aaaa": 41, "GPU-bbbb": 44}
    assert exporter.health() == (False, "last collection failed: RuntimeError: NVML went away")


def test_problems_are_shown_but_the_batch_is_used() -> None:
    batch = Batch(ts=1.0, samples=both().samples, problems=("http://n2:9400/metrics: down",))
    exporter = Exporter(ScriptedCollector(batch))
    exporter.poll_once()
    body = exporter.render()
    assert (
        series(body)[("gpuwarden_collector_problems", frozenset({("collector", "test://fleet")}))]
        == 1
    )
    assert exporter.health() == (True, "ok")


def test_a_new_problem_is_a_warning_once(caplog) -> None:
    """An endpoint that went down was logged at INFO only: `serve --once` against an
    unreachable dcgm-exporter said "0 GPUs scored" and nothing else."""
    down = Batch(ts=1.0, samples=both().samples, problems=("http://n2:9400/metrics: down",))
    exporter = Exporter(ScriptedCollector(down, down, both()))
    with caplog.at_level("INFO", logger="gpuwarden.exporter"):
        for _ in range(3):
            exporter.poll_once()
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "n2:9400" in r.getMessage()]
    assert [level for level, _ in said] == ["WARNING", "INFO"]


def test_batches_go_to_the_store_and_store_failures_are_counted() -> None:
    store = ListStore()
    exporter = Exporter(ScriptedCollector(both()), store=store)  # type: ignore[arg-type]
    exporter.poll_once()
    assert store.batches == [both()]
    assert b"gpuwarden_store_write_errors_total{" in exporter.render()

    broken = Exporter(ScriptedCollector(both()), store=ListStore(fail=True))  # type: ignore[arg-type]
    broken.poll_once()
    body = broken.render()
    assert [
        v for (n, _), v in series(body).items() if n == "gpuwarden_store_write_errors_total"
    ] == [1]
    assert values_of(body, "DCGM_FI_DEV_GPU_TEMP") == {"GPU-aaaa": 41, "GPU-bbbb": 44}


def test_a_new_board_in_a_slot_starts_fresh() -> None:
    swapped = G0._replace(uuid="GPU-cccc")
    first = Batch(
        ts=1.0,
        samples=(sample(G0, gpu_temp_c=41),),
        events=(Event(ts=1.0, gpu=G0, kind="xid", code=79),),
    )
    second = Batch(ts=2.0, samples=(sample(swapped, gpu_temp_c=30),))
    exporter = Exporter(ScriptedCollector(first, second))
    exporter.poll_once()
    exporter.poll_once()
    body = exporter.render()
    assert values_of(body, "gpuwarden_gpu_up") == {"GPU-cccc": 1}
    assert b"gpuwarden_xid_errors_total" not in body


def test_label_values_are_escaped() -> None:
    odd = GpuId('node"7\\a', 0, "GPU-x", model="line\nbreak")
    exporter = Exporter(ScriptedCollector(Batch(ts=1.0, samples=(sample(odd, gpu_temp_c=1),))))
    exporter.poll_once()
    ((_, labels),) = [k for k in series(exporter.render()) if k[0] == "DCGM_FI_DEV_GPU_TEMP"]
    assert dict(labels)["Hostname"] == 'node"7\\a'
    assert dict(labels)["modelName"] == "line\nbreak"


def test_bad_interval_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="interval"):
        Exporter(ScriptedCollector(both()), interval_s=0)


@pytest.fixture
def serving() -> Iterator[Callable[..., tuple[Exporter, str]]]:
    started: list[Exporter] = []

    def serve(collector: ScriptedCollector, interval_s: float = 15.0) -> tuple[Exporter, str]:
        exporter = Exporter(collector, interval_s=interval_s)
        server = exporter.serve("127.0.0.1", 0)
        started.append(exporter)
        return exporter, f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for exporter in started:
        exporter.stop()


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_http_metrics_healthz_and_404(serving: Callable[..., tuple[Exporter, str]]) -> None:
    collector = ScriptedCollector(both())
    exporter, base = serving(collector)
    wait_for(lambda: collector.calls >= 1, "the first poll")

    plain = httpx.get(f"{base}/metrics", headers={"Accept-Encoding": "identity"})
    assert plain.status_code == 200
    assert plain.headers["content-type"] == CONTENT_TYPE
    assert plain.content == exporter.render()
    zipped = httpx.get(f"{base}/metrics")  # httpx asks for gzip and decodes it
    assert zipped.headers["content-encoding"] == "gzip"
    assert zipped.content == exporter.render()
    health = httpx.get(f"{base}/healthz")
    assert (health.status_code, health.text) == (200, "ok\n")
    assert httpx.get(f"{base}/metrics/extra").status_code == 404
    assert httpx.get(f"{base}/").status_code == 404


def test_healthz_is_503_while_collect_fails(serving: Callable[..., tuple[Exporter, str]]) -> None:
    collector = ScriptedCollector(RuntimeError("boom"))
    _, base = serving(collector)
    wait_for(lambda: collector.calls >= 1, "the first poll")
    wait_for(lambda: httpx.get(f"{base}/healthz").status_code == 503, "healthz to fail")
    assert "RuntimeError: boom" in httpx.get(f"{base}/healthz").text


def test_healthz_is_503_while_the_only_source_is_unreachable(
    serving: Callable[..., tuple[Exporter, str]],
) -> None:
    """A dcgm-exporter that refuses connections makes collect() return a batch of problems and
    nothing else: the source is down, not up with no GPUs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        collector = DcgmCollector([f"http://127.0.0.1:{s.getsockname()[1]}/metrics"], timeout_s=2)
        exporter, base = serving(collector)
        try:
            wait_for(lambda: httpx.get(f"{base}/healthz").status_code == 503, "healthz to fail")
        finally:
            collector.close()
    health = httpx.get(f"{base}/healthz").text
    assert health.startswith("last collection failed: nothing could be read: http://127.0.0.1:")
    assert "cannot connect" in health
    body = httpx.get(f"{base}/metrics").content
    up = {n: v for (n, _), v in series(body).items() if n.startswith("gpuwarden_collector")}
    assert up["gpuwarden_collector_up"] == 0 and up["gpuwarden_collector_errors_total"] >= 1
    assert up["gpuwarden_collector_problems"] == 1
    assert "gpuwarden_collector_last_success_timestamp_seconds" not in up


def test_a_batch_of_only_problems_is_a_failure_but_some_data_is_not() -> None:
    down = Batch(ts=2.0, problems=("http://n1:9400/metrics: cannot connect",))
    partly = Batch(ts=3.0, samples=both().samples, problems=("http://n2:9400/metrics: down",))
    exporter = Exporter(ScriptedCollector(both(), down, partly), clock=lambda: 5.0)
    exporter.poll_once()
    exporter.poll_once()
    assert exporter.health() == (
        False,
        "last collection failed: nothing could be read: http://n1:9400/metrics: cannot connect",
    )
    body = exporter.render()
    assert values_of(body, "gpuwarden_gpu_up") == {"GPU-aaaa": 0, "GPU-bbbb": 0}
    exporter.poll_once()
    assert exporter.health() == (True, "ok")


def test_background_polling_survives_exceptions(
    serving: Callable[..., tuple[Exporter, str]],
) -> None:
    collector = ScriptedCollector(*[both(), RuntimeError("flaky")] * 3, both())
    exporter, base = serving(collector, interval_s=0.01)
    wait_for(lambda: collector.calls >= 8, "eight polls")
    body = httpx.get(f"{base}/metrics").content
    errors = [v for (n, _), v in series(body).items() if n == "gpuwarden_collector_errors_total"]
    assert errors == [3]
    assert values_of(body, "DCGM_FI_DEV_GPU_TEMP") == {"GPU-aaaa": 41, "GPU-bbbb": 44}


def test_stop_closes_the_port(serving: Callable[..., tuple[Exporter, str]]) -> None:
    exporter, base = serving(ScriptedCollector(both()))
    assert httpx.get(f"{base}/healthz").status_code == 200
    exporter.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{base}/healthz")


def test_a_busy_port_is_a_config_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(ConfigError, match="cannot listen on 127.0.0.1"):
            Exporter(ScriptedCollector(both())).serve("127.0.0.1", s.getsockname()[1])


def test_run_exporter_serves_until_stopped() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stop = threading.Event()
    collector = ScriptedCollector(both())
    thread = threading.Thread(
        target=run_exporter, args=(collector, "127.0.0.1", port, 60.0), kwargs={"stop_event": stop}
    )
    thread.start()
    try:
        wait_for(lambda: collector.calls >= 1, "the first poll")
        assert b"DCGM_FI_DEV_GPU_TEMP" in httpx.get(f"http://127.0.0.1:{port}/metrics").content
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics")


SERVE_SCRIPT = """
import sys
from gpuwarden.exporter import run_exporter
from gpuwarden.telemetry import Batch

class Empty:
    url = "test://empty"
    def collect(self):
        return Batch(ts=0.0)
    def close(self):
        pass

run_exporter(Empty(), "127.0.0.1", int(sys.argv[1]), 60.0)
print("stopped cleanly")
"""


def test_run_exporter_stops_cleanly_on_sigterm() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE_SCRIPT, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def answers() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                return False

        wait_for(answers, "the exporter subprocess to answer", timeout_s=20)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out == "stopped cleanly\n"
    assert f"http://127.0.0.1:{port}/metrics" in err


def test_dcgm_exporter_output_round_trips_through_our_exporter() -> None:
    """dcgm-exporter body -> DcgmCollector -> Exporter: same names, labels and values."""
    fixture = (Path(__file__).parent / "data" / "dcgm" / "dcgm-exporter-3.1.txt").read_text()
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=fixture))
    with httpx.Client(transport=transport) as client:
        collector = DcgmCollector(["http://dgx-a100-07:9400/metrics"], client=client)
        exporter = Exporter(collector)
        exporter.poll_once()
        collector.close()
    ours = series(exporter.render())

    expected = {}
    for s in parse_text(fixture).samples:
        if s.name in FIELD_BY_DCGM:
            name = FIELDS_BY_NAME[FIELD_BY_DCGM[s.name]].dcgm  # legacy names come out current
            keep = {k: v for k, v in s.labels.items() if k != "DCGM_FI_DRIVER_VERSION"}
            expected[(name, frozenset(keep.items()))] = s.value
    # 17 device fields, 2 profiling ratios and 5 of the 4.x default counters in the fixture
    assert len(expected) == 2 * 24
    assert {k: v for k, v in ours.items() if k[0].startswith("DCGM_")} == expected


def test_impossible_readings_are_not_re_exported_and_are_counted() -> None:
    t4 = GpuId("node2", 0, "GPU-t4", "00000000:37:00.0", "Tesla T4")
    unscreened = Batch(  # as a plugin collector might send it: nothing checked yet
        ts=1.0,
        samples=(
            sample(G0, gpu_temp_c=41, mem_temp_c=9223372036854775794, power_w=140737488355328.0),
            sample(t4, gpu_temp_c=74, mem_temp_c=0, energy_mj=2147483632),
        ),
        rejected=(Rejection(1.0, G0, "gpu_util_pct", "sentinel", 2.0**63),),  # seen upstream
    )
    exporter = Exporter(ScriptedCollector(unscreened, unscreened))
    exporter.poll_once()
    exporter.poll_once()
    body = exporter.render()
    assert b"9223372036854775" not in body and b"140737488355" not in body
    assert b"e+18" not in body and b"e+14" not in body
    assert values_of(body, "DCGM_FI_DEV_GPU_TEMP") == {"GPU-aaaa": 41, "GPU-t4": 74}
    assert values_of(body, "DCGM_FI_DEV_MEMORY_TEMP") == {}
    assert values_of(body, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == {"GPU-t4": 2147483632}
    counted = {
        (dict(lab)["UUID"], dict(lab)["field"], dict(lab)["reason"]): v
        for (n, lab), v in series(body).items()
        if n == "gpuwarden_rejected_readings_total"
    }
    assert counted == {
        ("GPU-aaaa", "mem_temp_c", "sentinel"): 2,
        ("GPU-aaaa", "power_w", "sentinel"): 2,
        ("GPU-aaaa", "gpu_util_pct", "sentinel"): 2,
        ("GPU-t4", "mem_temp_c", "no_sensor"): 2,
    }
    assert b"# TYPE gpuwarden_rejected_readings_total counter\n" in body
    labels = dict(
        next(lab for (n, lab) in series(body) if n == "gpuwarden_rejected_readings_total")
    )
    assert labels["modelName"] and labels["Hostname"] and labels["gpu"]


def test_no_rejected_counter_without_rejections() -> None:
    exporter = Exporter(ScriptedCollector(both()))
    exporter.poll_once()
    assert b"gpuwarden_rejected_readings_total" not in exporter.render()
