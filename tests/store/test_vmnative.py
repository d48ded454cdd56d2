"""VictoriaMetrics' native export read by ``_vmnative`` against a real VictoriaMetrics 1.79:
series written through its import API come back through ``/api/v1/export/native`` exactly as
written (times and values, bit for bit) and exactly as its query API answers them, through
every way its blocks keep numbers; errors are one line and retried."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np
import pytest
from tsdb_servers import start_victoriametrics

from gpuwarden.errors import StoreRejected, StoreUnavailable
from gpuwarden.store import _vmnative
from gpuwarden.store._promapi import Flat, PromApi
from gpuwarden.store._remote import RemoteHttp
from gpuwarden.store.victoriametrics import NativeApi

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000  # ms
N_LONG = 20_000  # more than a block holds (8,192 rows)


def _series() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """name -> (ts ms, values): each chosen to make the server keep it a different way."""
    rng = np.random.default_rng(7)
    every = np.arange(N_LONG, dtype=np.int64)
    jitter = rng.integers(0, 900, N_LONG)
    return {
        # decimals of a gauge over many blocks: zstd nearest delta (a wave compresses; noise
        # does not, and is kept plain), negative exponents
        "gauge": (T0 + every * 15_000, (55.0 + 9.0 * np.sin(every / 40.0)).round(1)),
        "noise": (T0 + every[:3000] * 15_000, rng.normal(55.0, 9.0, 3000).round(3)),
        # a counter at irregular times: zstd nearest delta2 for both
        "counter": (T0 + every * 15_000 + jitter, np.cumsum(rng.integers(0, 7, N_LONG)) * 1.0),
        # a steady step and one value: delta-const times, const values
        "steady": (T0 + np.arange(500) * 60_000, np.full(500, 7.0)),
        "zeros": (T0 + np.arange(300) * 60_000, np.zeros(300)),
        "ramp": (T0 + np.arange(300) * 60_000, (np.arange(300) + 1) * -2.5),
        # too short to compress: plain nearest delta(2)
        "short": (T0 + np.array([0, 7, 19, 20]), np.array([1e-5, 3.25e12, -0.125, 42.0])),
        # magnitudes far from 1: large positive and negative exponents (and more digits than
        # the server keeps: it stores about 12 significant ones)
        "huge": (T0 + np.arange(200) * 1000, rng.normal(0.0, 1e15, 200)),
        "whole": (T0 + np.arange(200) * 1000, rng.integers(1, 999, 200) * 1e19),
        "tiny": (T0 + np.arange(200) * 1000, rng.normal(0.0, 1e-12, 200)),
        "mixed": (T0 + np.arange(600) * 7000, rng.random(600) * 10.0 ** rng.integers(-9, 9, 600)),
    }


#: label values a series name must escape (bytes 1 and 2 separate its parts) or decode
ODD = {"steady": "a\x01b\x02c", "short": "ünïcode ✓", "zeros": ""}


def _labels(name: str) -> dict[str, str]:
    labels = {"__name__": f"native_{name}", "case": name}
    if ODD.get(name):
        labels["odd"] = ODD[name]
    return labels


@pytest.fixture(scope="module")
def vm(tmp_path_factory):
    server = start_victoriametrics(tmp_path_factory.mktemp("vm-native"))
    lines = [
        json.dumps({"metric": _labels(n), "values": v.tolist(), "timestamps": t.tolist()})
        for n, (t, v) in _series().items()
    ]
    httpx.post(f"{server.url}/api/v1/import", content="\n".join(lines)).raise_for_status()
    httpx.get(f"{server.url}/internal/force_flush").raise_for_status()
    yield server
    server.stop()


def _apis(url: str, *, decode_all: bool = True, **kwargs) -> tuple[NativeApi, PromApi]:
    """A native reader and a query reader of ``url``; ``decode_all``: the native one decodes
    however few of its blocks' points a window holds (the tests of the decoder)."""
    native = NativeApi(RemoteHttp(url, what="VictoriaMetrics", **kwargs))
    if decode_all:
        native.QUERY_OVERREAD = math.inf
    return native, PromApi(RemoteHttp(url, what="VictoriaMetrics"))


def _by_series(flat: Flat) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    if not flat.labels:
        return {}
    cuts = np.cumsum(flat.counts)[:-1]
    return {
        lab["case"]: (t, v)
        for lab, t, v in zip(
            flat.labels, np.split(flat.ts, cuts), np.split(flat.values, cuts), strict=True
        )
    }


def _export(url: str, match: str, lo_ms: int, hi_ms: int) -> bytes:
    form = {"match[]": match, "start": str(lo_ms // 1000 - 1), "end": str(hi_ms // 1000 + 1)}
    got = httpx.post(f"{url}/api/v1/export/native", data=form, headers={"Accept-Encoding": ""})
    got.raise_for_status()
    return got.content


#: series with more significant digits than the server keeps
ROUNDED = {"huge", "whole", "tiny", "mixed"}


def test_every_series_comes_back_exactly_as_written_and_as_queried(vm) -> None:
    native, query = _apis(vm.url)
    lo, hi = (T0 - 60_000) / 1000, (T0 + N_LONG * 15_000 + 60_000) / 1000
    (flat,) = native.select_flat(['{case!=""}'], lo, hi)
    got = _by_series(flat)
    (answer,) = query.select_flat(['{case!=""}'], lo, hi)
    queried = _by_series(answer)
    assert got.keys() == queried.keys() == _series().keys()
    for name, (ts, values) in _series().items():
        t, v = got[name]
        assert t.tobytes() == queried[name][0].tobytes(), name
        assert v.tobytes() == queried[name][1].tobytes(), name  # bit for bit
        np.testing.assert_array_equal(t, ts / 1000.0, err_msg=name)
        if name not in ROUNDED:  # (a block keeps one exponent for all its values)
            assert v.tobytes() == values.tobytes(), name
    labels = {lab["case"]: lab for lab in flat.labels}
    for name in ODD:
        assert labels[name] == _labels(name), name


def test_the_answer_uses_every_encoding(vm) -> None:
    """The series above make the server keep numbers all six ways (and several blocks of a
    series): the test above read each of them."""
    body = _export(vm.url, '{case!=""}', T0 - 60_000, T0 + N_LONG * 15_000 + 60_000)
    names, series, starts, sizes = _vmnative._frame(body)
    blocks = _vmnative._headers(np.frombuffer(body, np.uint8), np.array(starts), np.array(sizes))
    kinds = set(blocks.kind[0].tolist()) | set(blocks.kind[1].tolist())
    assert kinds == {1, 2, 3, 4, 5, 6}
    assert (blocks.scale < 0).any() and (blocks.scale > 0).any()
    per_series = np.bincount(series)
    assert per_series.max() >= 3  # 20,000 points: three blocks or more


@pytest.mark.parametrize(
    ("lo", "hi"),
    [
        (T0, T0 + 15_000),  # one point, at the very start of the data
        (T0 + 3_600_000, T0 + 7_200_000 + 1),  # an hour and a millisecond inside blocks
        (T0 + 100_000_000, T0 + 200_000_000),  # across block boundaries
        (T0 - 10_000_000, T0 - 1),  # before everything: nothing
    ],
)
def test_a_window_is_cut_as_the_query_api_cuts_it(vm, lo: int, hi: int) -> None:
    native, query = _apis(vm.url)
    (mine,) = native.select_flat(['{case!=""}'], lo / 1000, hi / 1000)
    (answer,) = query.select_flat(['{case!=""}'], lo / 1000, hi / 1000)
    theirs = _by_series(answer)
    got = _by_series(mine)
    assert got.keys() == theirs.keys()
    for name, (t, v) in theirs.items():
        assert got[name][0].tobytes() == t.tobytes(), name
        assert got[name][1].tobytes() == v.tobytes(), name
        assert ((t >= lo / 1000) & (t < hi / 1000)).all()


def test_two_selectors_are_one_request(vm) -> None:
    native, _ = _apis(vm.url)
    got = native.select_flat(["native_gauge", '{case="steady"}'], T0 / 1000, T0 / 1000 + 3600)
    assert native.queries == 1 and len(got) == 1
    assert {lab["case"] for lab in got[0].labels} == {"gauge", "steady"}


def _stale_block(name: bytes, ts: list[int], mantissas: list[int]) -> bytes:
    """One series as a native export body, numbers kept as plain nearest deltas (way 6):
    what the server itself would send, written here to store a staleness marker."""

    def varint(v: int) -> bytes:
        u = ((v << 1) ^ (v >> 63)) & (2**64 - 1)
        return uvarint(u)

    def uvarint(u: int) -> bytes:
        out = bytearray()
        while u > 0x7F:
            out.append(0x80 | (u & 0x7F))
            u >>= 7
        return bytes(out) + bytes([u])

    def steps(xs: list[int]) -> bytes:
        wrap = [((b - a + 2**63) % 2**64) - 2**63 for a, b in zip(xs, xs[1:], strict=False)]
        return b"".join(varint(d) for d in wrap)

    t_data, v_data = steps(ts), steps(mantissas)
    block = (
        varint(ts[0]) + varint(mantissas[0]) + uvarint(len(ts)) + varint(-1) + bytes([6, 6])
        + uvarint(len(t_data)) + t_data + uvarint(len(v_data)) + v_data
    )  # fmt: skip
    zz = lambda v: (((v << 1) ^ (v >> 63)) & (2**64 - 1)).to_bytes(8, "big")  # noqa: E731
    size = lambda b: len(b).to_bytes(4, "big")  # noqa: E731
    return zz(ts[0] - 1000) + zz(ts[-1] + 1000) + size(name) + name + size(block) + block


def test_staleness_markers_and_infinities_come_back_as_the_query_api_gives_them(vm) -> None:
    ts = [T0 + 10_000_000 + k * 1000 for k in range(5)]
    stale = (1 << 63) - 2
    mantissas = [15, stale, -25, (1 << 63) - 1, -(1 << 63)]  # 1.5, marker, -2.5, +Inf, -Inf
    body = _stale_block(b"native_stale\x01case\x01stale\x01", ts, mantissas)
    httpx.post(f"{vm.url}/api/v1/import/native", content=body).raise_for_status()
    httpx.get(f"{vm.url}/internal/force_flush").raise_for_status()
    native, query = _apis(vm.url)
    lo, hi = ts[0] / 1000, ts[-1] / 1000 + 1
    (mine,) = native.select_flat(["native_stale"], lo, hi)
    (theirs,) = query.select_flat(["native_stale"], lo, hi)
    # the marker is NaN, as the query API gives it
    np.testing.assert_array_equal(mine.values, [1.5, np.nan, -2.5, np.inf, -np.inf])
    assert mine.ts.tobytes() == theirs.ts.tobytes()
    assert mine.values.tobytes() == theirs.values.tobytes()
    # and decode itself, on the server's own answer
    raw = _vmnative.decode(_export(vm.url, "native_stale", ts[0], ts[-1] + 1), ts[0], ts[-1] + 1)
    assert raw.flat.counts.tolist() == [5] and not raw.repeats


def test_a_millisecond_written_twice_is_left_to_the_query_api(proxy, vm) -> None:
    """Two unmerged parts with the same millisecond: which sample counts is the server's
    deduplication's choice, so the read asks the query API for that window. The server merges
    parts in the background when it likes, so the proxy sends every block of the export twice,
    as two parts not merged yet come."""
    t = T0 + 50_000_000
    line = {"metric": {"__name__": "native_twice", "case": "twice"}, "values": [1.0],
            "timestamps": [t]}  # fmt: skip
    httpx.post(f"{vm.url}/api/v1/import", content=json.dumps(line)).raise_for_status()
    httpx.get(f"{vm.url}/internal/force_flush").raise_for_status()
    body = _export(vm.url, "native_twice", t, t + 1)
    assert not _vmnative.decode(body, t, t + 1).repeats
    assert _vmnative.decode(body + body[16:], t, t + 1).repeats  # the 16-byte header once
    _Proxy.mode = "twice"
    native = NativeApi(RemoteHttp(proxy, what="VictoriaMetrics"))
    _, query = _apis(vm.url)
    assert not native.dialect.closed  # asked now: its queries are not counted below
    native.queries = 0
    (mine,) = native.select_flat(["native_twice"], t / 1000, (t + 1) / 1000)
    (theirs,) = query.select_flat(["native_twice"], t / 1000, (t + 1) / 1000)
    assert native.queries == 2  # the export, then the query
    assert mine.values.tolist() == theirs.values.tolist() and len(mine.values) == 1


def test_a_selector_the_server_refuses_is_one_line(vm) -> None:
    native, _ = _apis(vm.url)
    with pytest.raises(StoreRejected, match="rejected the request .*HTTP 400"):
        native.select_flat(['{__name__=~"("}'], T0 / 1000, T0 / 1000 + 60)


class _Proxy(BaseHTTPRequestHandler):
    """A proxy to the real server that sends each native export answer cut short
    (``mode`` "cut"), with its blocks twice ("twice"), or answers 404 for it ("missing": a
    server or proxy without it)."""

    upstream = ""
    mode = "cut"
    exports = 0

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length", 0))
        export = self.path.endswith("/export/native")
        type(self).exports += export
        if export and self.mode == "missing":
            self.send_error(404, "no such path")
            return
        got = httpx.post(
            self.upstream + self.path,
            content=self.rfile.read(length),
            headers={"Content-Type": self.headers["Content-Type"], "Accept-Encoding": ""},
        )
        body = got.content
        if export and self.mode == "cut":
            body = body[: len(body) - 5]
        elif export and self.mode == "twice":  # every block again, after the 16-byte header
            body = body + body[16:]
        self.send_response(got.status_code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def proxy(vm):
    _Proxy.upstream, _Proxy.exports = vm.url, 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_an_answer_cut_short_is_retried_then_one_line(proxy) -> None:
    _Proxy.mode = "cut"
    http = RemoteHttp(proxy, what="VictoriaMetrics", retries=2, sleep=lambda s: None)
    native = NativeApi(http)
    with pytest.raises(StoreUnavailable, match="export/native answered a body cut short"):
        native.select_flat(["native_gauge"], T0 / 1000, T0 / 1000 + 3600)
    assert http.retried == 2 and _Proxy.exports == 3


def test_a_server_without_native_export_is_read_through_queries(proxy, vm) -> None:
    _Proxy.mode = "missing"
    native = NativeApi(RemoteHttp(proxy, what="VictoriaMetrics"))
    _, query = _apis(vm.url)
    for _ in range(2):
        (got,) = native.select_flat(["native_gauge"], T0 / 1000, T0 / 1000 + 3600)
        (want,) = query.select_flat(["native_gauge"], T0 / 1000, T0 / 1000 + 3600)
        assert got.values.tobytes() == want.values.tobytes() and len(got.values) == 240
    assert _Proxy.exports == 1 and not native.native  # asked once, then queries only


@pytest.mark.parametrize("cut", [3, 17, 40])
def test_decode_refuses_a_body_cut_anywhere(vm, cut: int) -> None:
    body = _export(vm.url, "native_short", T0, T0 + 100)
    with pytest.raises(_vmnative.NativeFormatError):
        _vmnative.decode(body[: len(body) - cut], T0, T0 + 100)


def test_a_window_that_brings_whole_blocks_many_times_over_goes_to_queries(vm) -> None:
    """Ten minutes of the gauge (40 samples) come in blocks of 8,192: such short windows are
    asked of the query API afterwards, which cuts the blocks on the server."""
    native, query = _apis(vm.url, decode_all=False)
    lo = T0 / 1000 + 86_400
    (first,) = native.select_flat(["native_gauge"], lo, lo + 600)
    assert native.short_s == 600 and len(first.values) == 40
    exports = native.queries
    (again,) = native.select_flat(["native_gauge"], lo + 600, lo + 1200)
    (want,) = query.select_flat(["native_gauge"], lo + 600, lo + 1200)
    assert again.values.tobytes() == want.values.tobytes() and len(again.values) == 40
    assert native.queries == exports + 1  # one query, no export (the first read was queried too)
    native.select_flat(["native_gauge"], lo, lo + 86_400)  # a day: whole blocks pay
    assert native.short_s == 600


@pytest.mark.parametrize(
    ("lo", "hi"),
    [
        (T0 - 60_000, T0 + N_LONG * 15_000 + 60_000),  # everything
        (T0 + 3_600_000, T0 + 7_200_000 + 1),  # an hour inside blocks
        (T0 + 100_000_000, T0 + 200_000_000),  # across block boundaries
        (T0 - 10_000_000, T0 - 1),  # before everything
    ],
)
def test_the_estimate_from_block_headers_is_near_what_the_window_holds(vm, lo, hi) -> None:
    """The evenly stepped blocks (the steady, zeros and ramp series, and the gauge's) are
    estimated from their headers to within a point a block; the irregular ones (the counter,
    the short series: fewer than ``ESTIMATE_SAMPLE``, so all of them sampled) exactly."""
    for match in ('{case=~"gauge|steady|zeros|ramp"}', '{case=~"counter|short"}', '{case!=""}'):
        body = _export(vm.url, match, lo, hi)
        whole = _vmnative.decode(body, lo, hi)
        blocks = len(_vmnative._frame(body)[1])
        held = len(whole.flat.ts)
        slack = 0 if match == '{case=~"counter|short"}' else blocks
        assert abs(whole.estimate - held) <= slack, (match, whole.estimate, held)


def test_a_window_holding_a_sliver_of_its_blocks_is_asked_of_the_query_api(vm) -> None:
    """An hour of the gauge (240 samples) in blocks of 8,192: the headers say so, nothing is
    decoded, and the same points come from a query (which the server cuts); a window that
    holds most of its blocks is decoded here."""
    native, query = _apis(vm.url, decode_all=False)
    lo = T0 / 1000 + 3600
    calls: list[bool] = []
    real = _vmnative.decode

    def spy(body, start_ms, end_ms, **kwargs):
        got = real(body, start_ms, end_ms, **kwargs)
        calls.append(got.skipped)
        return got

    import gpuwarden.store.victoriametrics as vm_module

    original, vm_module.decode = vm_module.decode, spy
    try:
        (mine,) = native.select_flat(["native_gauge"], lo, lo + 3600)
        (whole,) = native.select_flat(["native_gauge"], T0 / 1000, T0 / 1000 + 86_400 * 4)
    finally:
        vm_module.decode = original
    assert calls == [True, False]
    (want,) = query.select_flat(["native_gauge"], lo, lo + 3600)
    assert mine.ts.tobytes() == want.ts.tobytes() and len(mine.ts) == 240
    assert mine.values.tobytes() == want.values.tobytes()
    assert len(whole.ts) == N_LONG and native.short_s == 0.0
