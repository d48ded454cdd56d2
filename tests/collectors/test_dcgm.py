"""DcgmCollector against recorded dcgm-exporter bodies served by a real local HTTP server."""

from __future__ import annotations

import math
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from gpuwarden.collectors import open_collector
from gpuwarden.collectors._promtext import parse_text
from gpuwarden.collectors.dcgm import DcgmCollector, parse_dcgm_url
from gpuwarden.errors import ConfigError
from gpuwarden.telemetry import FIELD_NAMES, Batch, Sample, time_unknown

DATA = Path(__file__).parent.parent / "data" / "dcgm"
V31 = (DATA / "dcgm-exporter-3.1.txt").read_text()
V4X = (DATA / "dcgm-exporter-4.x.txt").read_text()


@dataclass
class Route:
    body: str
    status: int = 200
    hang: bool = False  # answer only when the test ends


@dataclass
class FakeExporters:
    """Several dcgm-exporter endpoints on one real HTTP server, one path each."""

    port: int
    routes: dict[str, Route] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        route = self.server.exporters.routes.get(self.path)
        if route is None:
            self.send_error(404)
            return
        if route.hang:
            self.server.exporters.release.wait(30)
        body = route.body.encode()
        try:
            self.send_response(route.status)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up (timeout test)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    exporters: FakeExporters


@pytest.fixture
def exporters() -> Iterator[FakeExporters]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.exporters = FakeExporters(port=server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server.exporters
    server.exporters.release.set()
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MakeCollector = Callable[..., DcgmCollector]


@pytest.fixture
def make_collector() -> Iterator[MakeCollector]:
    made: list[DcgmCollector] = []

    def make(endpoints: list[str], timeout_s: float = 5.0, **kwargs: object) -> DcgmCollector:
        kwargs.setdefault("clock", lambda: 1_700_000_000.0)
        made.append(DcgmCollector(endpoints, timeout_s=timeout_s, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for collector in made:
        collector.close()


def _by_index(batch: Batch) -> dict[int, Sample]:
    return {s.gpu.index: s for s in batch.samples}


def test_dcgm_exporter_31_body_maps_fields_and_identity(
    exporters: FakeExporters, make_collector: MakeCollector
) -> None:
    exporters.routes["/metrics"] = Route(V31)
    batch = make_collector([exporters.url("/metrics")]).collect()

    assert batch.problems == ()
    assert batch.ts == 1_700_000_000.0
    gpus = _by_index(batch)
    assert sorted(gpus) == [0, 1]
    g1 = gpus[1]
    assert g1.gpu.hostname == "dgx-a100-07"
    assert g1.gpu.uuid == "GPU-3e7b5c10-8a2d-11f4-b6e9-0c4d2f8a7e53"
    assert g1.gpu.model == "NVIDIA A100-SXM4-80GB"
    assert g1.gpu.pci_bus_id == ""  # 3.1 has no pci_bus_id label
    assert g1.values["power_w"] == pytest.approx(298.112)
    assert g1.values["ecc_sbe_volatile_total"] == 17
    assert g1.values["pcie_replay_total"] == 3
    assert g1.values["energy_mj"] == 8190042513
    # legacy DCGM_FI_DEV_CLOCK_THROTTLE_REASONS lands in the current field
    assert g1.values["clock_event_reasons"] == 4
    # the two profiling fields of NVIDIA's dashboard 12239 are read, as ratios
    assert g1.values["gr_engine_active"] == pytest.approx(0.948820)
    assert g1.values["tensor_active"] == pytest.approx(0.498411)
    # other DCGM_FI_PROF_*, ENC/DEC util, NVLink bandwidth: not in the catalogue, ignored
    assert set(g1.values) <= set(FIELD_NAMES)
    assert "fb_total_mib" not in g1.values  # not exported by this exporter: absent, not 0
    assert batch.events == ()


def test_dcgm_exporter_4x_body_uses_new_hostname_label_and_clock_events(
    exporters: FakeExporters, make_collector: MakeCollector
) -> None:
    exporters.routes["/metrics"] = Route(V4X)
    batch = make_collector([exporters.url("/metrics")]).collect()

    gpus = _by_index(batch)
    assert sorted(gpus) == [0, 1, 2, 3]
    assert {s.gpu.hostname for s in batch.samples} == {"gpu-node-17"}
    assert gpus[2].gpu.pci_bus_id == "00000000:3A:00.0"
    assert gpus[3].values["clock_event_reasons"] == 1
    assert gpus[2].values["power_violation_us"] == 18342211
    # dcgm-exporter skipped GPU 2's memory temperature: it stays missing
    assert "mem_temp_c" not in gpus[2].values
    assert gpus[1].values["mem_temp_c"] == 61  # the GPU with pod labels is the same GPU


def test_endpoints_scraped_together_and_a_down_one_is_a_problem(
    exporters: FakeExporters, closed_port: int, make_collector: MakeCollector
) -> None:
    exporters.routes["/a"] = Route(V31)
    exporters.routes["/b"] = Route(V4X)
    down = f"http://127.0.0.1:{closed_port}/metrics"
    batch = make_collector([exporters.url("/a"), down, exporters.url("/b")]).collect()

    assert len(batch.samples) == 6
    assert len(batch.problems) == 1
    assert batch.problems[0].startswith(down + ": cannot connect")


def test_garbage_and_http_errors_name_the_endpoint(
    exporters: FakeExporters, make_collector: MakeCollector
) -> None:
    exporters.routes["/html"] = Route("<html><body>502 Bad Gateway</body></html>\n")
    exporters.routes["/500"] = Route("oops", status=500)
    exporters.routes["/empty"] = Route("")
    exporters.routes["/node"] = Route("# TYPE node_load1 gauge\nnode_load1 0.5\n")
    exporters.routes["/comments"] = Route("# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n")
    exporters.routes["/ok"] = Route(V4X)
    paths = ["/html", "/500", "/empty", "/node", "/comments", "/ok"]
    batch = make_collector([exporters.url(p) for p in paths]).collect()

    assert len(batch.samples) == 4
    problems = dict(p.split(": ", 1) for p in batch.problems)
    assert problems[exporters.url("/html")].startswith("not Prometheus text format")
    assert "<html>" in problems[exporters.url("/html")]
    assert problems[exporters.url("/500")] == "HTTP 500 Internal Server Error"
    assert problems[exporters.url("/empty")] == "empty response"
    assert "is this a dcgm-exporter endpoint" in problems[exporters.url("/node")]
    assert "is this a dcgm-exporter endpoint" in problems[exporters.url("/comments")]
    assert exporters.url("/ok") not in problems


def test_a_hung_endpoint_times_out_without_losing_the_others(
    exporters: FakeExporters, make_collector: MakeCollector
) -> None:
    exporters.routes["/hang"] = Route(V31, hang=True)
    exporters.routes["/ok"] = Route(V4X)
    batch = make_collector([exporters.url("/hang"), exporters.url("/ok")], timeout_s=0.3).collect()

    assert len(batch.samples) == 4
    assert batch.problems == (f"{exporters.url('/hang')}: timed out after 0.3 s",)


def test_xid_gauge_change_becomes_one_event(
    exporters: FakeExporters, make_collector: MakeCollector
) -> None:
    ticks = iter(range(100, 200))
    collector = make_collector([exporters.url("/metrics")], clock=lambda: float(next(ticks)))

    def serve_xids(gpu0: int, gpu1: int) -> None:
        lines = []
        for line in V31.splitlines():
            if line.startswith("DCGM_FI_DEV_XID_ERRORS{"):
                code = gpu0 if 'gpu="0"' in line else gpu1
                line = f"{line.rsplit(' ', 1)[0]} {code}"
            lines.append(line)
        exporters.routes["/metrics"] = Route("\n".join(lines) + "\n")

    serve_xids(0, 13)
    # first scrape: the Xid already there is recorded once, marked as of unknown time
    (old,) = collector.collect().events
    assert (old.gpu.index, old.code, old.ts) == (1, 13, 100.0)
    assert time_unknown(old.detail)
    serve_xids(0, 13)
    assert collector.collect().events == ()
    serve_xids(79, 13)
    (event,) = collector.collect().events
    assert (event.kind, event.code, event.ts) == ("xid", 79, 102.0)
    assert event.gpu.index == 0 and event.gpu.uuid.startswith("GPU-9c1d2a4e")
    assert "from 0 to 79" in event.detail
    serve_xids(79, 48)
    assert [(e.gpu.index, e.code) for e in collector.collect().events] == [(1, 48)]
    serve_xids(0, 48)  # driver reload clears the gauge: not an Xid
    assert collector.collect().events == ()


def test_hostname_falls_back_to_the_endpoint_host(
    exporters: FakeExporters, make_collector: MakeCollector
) -> None:
    body = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-x",device="nvidia0"} 40\n'
    exporters.routes["/metrics"] = Route(body)
    (sample,) = make_collector([exporters.url("/metrics")]).collect().samples
    assert sample.gpu.hostname == "127.0.0.1"
    assert sample.values == {"gpu_temp_c": 40.0}


def _collect_body(exporters: FakeExporters, make_collector: MakeCollector, body: str) -> Batch:
    """One collection from an exporter that serves ``body``."""
    exporters.routes["/metrics"] = Route(body)
    return make_collector([exporters.url("/metrics")]).collect()


def test_odd_lines_are_skipped_nan_is_missing(
    exporters: FakeExporters, make_collector: MakeCollector
) -> None:
    body = (
        'DCGM_FI_DEV_NAME{gpu="0",UUID="GPU-x",Hostname="h"} Tesla T4\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-x",Hostname="h"} 40\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-x",Hostname="h"} NaN\n'
    )
    batch = _collect_body(exporters, make_collector, body)
    assert batch.problems == ()  # a string-valued metric we do not use is not a problem
    assert batch.samples[0].values == {"gpu_temp_c": 40.0}

    exporters.routes["/metrics"] = Route(body + 'DCGM_FI_DEV_FB_USED{gpu="0" 12\n')
    batch = make_collector([exporters.url("/metrics")]).collect()
    assert batch.samples[0].values == {"gpu_temp_c": 40.0}
    assert "1 malformed line skipped" in batch.problems[0]


def test_parse_text_handles_escapes_timestamps_and_comments() -> None:
    body = (
        "# HELP m A metric.\n# TYPE m gauge\n\n"
        'm{a="x\\"y",b="back\\\\slash",c="new\\nline",d="}"} 1.5 1700000000000\n'
        "m 2\n"
        "m{} +Inf\n"
        'm{a="unterminated} 3\n'
    )
    result = parse_text(body)
    assert [s.value for s in result.samples[:2]] == [1.5, 2.0]
    first = result.samples[0]
    assert first.labels == {"a": 'x"y', "b": "back\\slash", "c": "new\nline", "d": "}"}
    assert first.timestamp_ms == 1_700_000_000_000
    assert math.isinf(result.samples[2].value)
    assert result.bad_lines == ['m{a="unterminated} 3']


def test_url_parsing() -> None:
    assert parse_dcgm_url("dcgm+http://n1:9400/metrics,n2:9500/metrics,n3") == (
        ["http://n1:9400/metrics", "http://n2:9500/metrics", "http://n3:9400/metrics"],
        None,
    )
    assert parse_dcgm_url("dcgm+https://n1/metrics?timeout=2.5") == (
        ["https://n1:9400/metrics"],
        2.5,
    )
    for bad in (
        "dcgm+http://",
        "dcgm+http://n1,,n2",
        "dcgm+ftp://n1",
        "dcgm+http://n1:99999",
        "dcgm+http://n1?timeout=-1",
        "dcgm+http://n1?timeout=soon",
    ):
        with pytest.raises(ConfigError):
            parse_dcgm_url(bad)


def test_open_collector_and_redacted_url() -> None:
    collector = open_collector("dcgm+http://user:s3cret@n1:9400/metrics,n2?timeout=1")
    try:
        assert isinstance(collector, DcgmCollector)
        assert collector.endpoints[1] == "http://n2:9400/metrics"
        assert collector.timeout_s == 1.0
        assert "s3cret" not in collector.url
        assert collector.url.startswith("dcgm+http://user:***@n1:9400/metrics")
    finally:
        collector.close()


def test_a_supplied_client_is_used_and_left_open(exporters: FakeExporters) -> None:
    exporters.routes["/metrics"] = Route(V4X)
    with httpx.Client(headers={"X-Test": "1"}) as client:
        collector = DcgmCollector([exporters.url("/metrics")], client=client)
        assert len(collector.collect().samples) == 4
        collector.close()
        assert not client.is_closed


def test_a_series_with_an_impossible_gpu_index_is_left_out_and_infinity_is_counted(
    exporters: FakeExporters, make_collector: MakeCollector
) -> None:
    # issue 15: an index no store can hold, and an infinite counter dropped without a count
    body = (
        'DCGM_FI_DEV_GPU_TEMP{gpu="99999999999999999999",UUID="GPU-y",Hostname="h"} 40\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-x",Hostname="h"} 40\n'
        'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu="0",UUID="GPU-x",Hostname="h"} +Inf\n'
    )
    batch = _collect_body(exporters, make_collector, body)
    assert [s.gpu.uuid for s in batch.samples] == ["GPU-x"]
    assert batch.samples[0].values == {"gpu_temp_c": 40.0}
    assert [(r.field, r.reason) for r in batch.rejected] == [("pcie_replay_total", "out_of_range")]
