"""Loading a history into a real Prometheus through its remote-write receiver
(``--web.enable-remote-write-receiver``, ``POST /api/v1/write``): the fast way in for the
tests and the benchmark, about 10 times less CPU than backfilling blocks with promtool
(docs/benchmarks.md).

Prometheus 2.42 appends a remote write into its head like a scrape. A sample more than half a
block behind the newest one the head held when the request began is out of bounds, so the
history is sent in time order, one window (``WINDOW_MS``: half of ``BLOCK``) of every series at
a time, and the server cuts and compacts blocks as it goes. Blocks of a day (``BLOCK``) rather
than 2 hours let one request carry 12 hours of a series: the server's cost is mostly per series
and request, not per sample. A sample behind that (a failure recorded after the fact) goes to
the out-of-order head (``OUT_OF_ORDER``). A request that holds one refused sample is refused
whole (HTTP 400, nothing of it kept) and ``RemoteWriter.write`` raises.

The body is a ``prometheus.WriteRequest`` protobuf (remote.proto) built with numpy: a sample is
always 18 bytes (field tag and length, the double, the millisecond time as a 6-byte varint), so
only the labels and a short header per series and request are assembled in Python. It is sent
as a snappy block of literals: valid snappy that the server decodes, without the CPU that
compressing costs over a loopback connection.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import numpy as np

from gpuwarden.store import _series

#: Prometheus' shortest block (``--storage.tsdb.min-block-duration``); half of it is how far
#: behind its newest sample the head still appends in order
BLOCK = "24h"
WINDOW_MS = 12 * 3600 * 1000
#: the config that accepts samples older than that (out-of-order ingestion, Prometheus 2.39+)
OUT_OF_ORDER = {"tsdb": {"out_of_order_time_window": "3650d"}}
#: samples per request (a few MB each)
REQUEST_SAMPLES = 500_000
_HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}
_MIN_MS, _MAX_MS = 1 << 35, 1 << 42  # the times a 6-byte varint holds: 1971 to 2109


@functools.cache
def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + _varint(len(payload)) + payload


def _labels(labels: Iterable[tuple[str, str]]) -> bytes:
    """``repeated Label labels = 1`` of a TimeSeries, sorted by name as the server wants."""
    return b"".join(
        _field(0x0A, _field(0x0A, k.encode()) + _field(0x12, v.encode())) for k, v in sorted(labels)
    )


def _samples(ts_ms: np.ndarray, values: np.ndarray) -> bytes:
    """``repeated Sample samples = 2``: 18 bytes a sample."""
    rows = np.empty((len(ts_ms), 18), dtype=np.uint8)
    rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 11] = 0x12, 16, 0x09, 0x10
    rows[:, 3:11] = values.astype("<f8").view(np.uint8).reshape(-1, 8)
    t = ts_ms.astype(np.uint64)
    for k in range(6):
        rows[:, 12 + k] = ((t >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
    rows[:, 12:17] |= 0x80
    return rows.tobytes()


def snappy_literal(data: bytes) -> bytes:
    """``data`` as one snappy block holding it as a literal (snappy's format description: the
    uncompressed length as a varint, then a literal element)."""
    n = len(data) - 1
    if n < 60:
        return _varint(len(data)) + bytes([n << 2]) + data
    width = (n.bit_length() + 7) // 8
    return _varint(len(data)) + bytes([(59 + width) << 2]) + n.to_bytes(width, "little") + data


def _window(series: Sequence[_series.Series], labels: list[bytes]) -> Iterator[bytes]:
    """WriteRequest bodies for ``series`` (one window; ``labels`` their encoded labels), each
    a run of whole series: they may be appended together."""
    ts, values = [], []
    for s in series:
        t, v = s.ts_ms, s.values
        if len(t) > 1 and not (t[1:] > t[:-1]).all():
            order = np.argsort(t, kind="stable")
            t, v = t[order], v[order]
            last = np.append(t[1:] != t[:-1], True)  # a time written again: the last value
            t, v = t[last], v[last]
        ts.append(t)
        values.append(v)
    t_all, v_all = np.concatenate(ts), np.concatenate(values)
    id_all = np.repeat(np.arange(len(ts), dtype=np.int64), [len(t) for t in ts])
    if t_all.min() < _MIN_MS or t_all.max() >= _MAX_MS:
        raise ValueError("sample times must lie between 1971 and 2109")
    starts = np.r_[0, np.cumsum([len(t) for t in ts])]
    n = len(t_all)
    at = starts.tolist()
    cuts = np.unique(starts[np.searchsorted(starts, np.arange(0, n, REQUEST_SAMPLES), "right") - 1])
    for lo, hi in zip(cuts.tolist(), [*cuts[1:].tolist(), n], strict=True):
        rows = memoryview(_samples(t_all[lo:hi], v_all[lo:hi]))
        parts: list[bytes | memoryview] = []
        for i in range(int(id_all[lo]), int(id_all[hi - 1]) + 1):
            a, b = at[i] - lo, at[i + 1] - lo
            head = labels[i]
            parts += (b"\x0a", _varint(len(head) + 18 * (b - a)), head, rows[18 * a : 18 * b])
        yield snappy_literal(b"".join(parts))


class RemoteWriter:
    """Writes batches of series to the Prometheus at ``url``, each batch no older than the one
    before (a day of a simulation at a time, say); ``concurrency`` requests of one window go
    together. Use as a context manager, or call ``close``."""

    def __init__(self, url: str, *, concurrency: int = 2) -> None:
        self._client = httpx.Client(base_url=url, timeout=600, headers=_HEADERS)
        self._pool = ThreadPoolExecutor(concurrency)
        self._labels: dict[tuple[tuple[str, str], ...], bytes] = {}
        self.samples = 0

    def __enter__(self) -> RemoteWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pool.shutdown()
        self._client.close()

    def _post(self, body: bytes) -> None:
        reply = self._client.post("/api/v1/write", content=body)
        if reply.status_code >= 300:
            raise RuntimeError(f"remote write: HTTP {reply.status_code}: {reply.text[:500]}")

    def write(self, series: Iterable[_series.Series]) -> None:
        """Send ``series``, cut into windows, one window after the other."""
        windows: dict[int, dict[tuple[tuple[str, str], ...], list[_series.Series]]] = {}
        for s in series:
            key = tuple(sorted(s.labels.items()))
            which = s.ts_ms // WINDOW_MS
            if len(which) == 0:
                continue
            if which[0] == which[-1] and (len(which) < 3 or (which == which[0]).all()):
                windows.setdefault(int(which[0]), {}).setdefault(key, []).append(s)
                continue
            cuts = [0, *(np.flatnonzero(np.diff(which)) + 1).tolist(), len(which)]
            for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
                part = _series.Series(s.labels, s.ts_ms[lo:hi], s.values[lo:hi])
                windows.setdefault(int(which[lo]), {}).setdefault(key, []).append(part)
        for w in sorted(windows):
            merged = [
                _series.Series(parts[0].labels, *_joined(parts)) for parts in windows[w].values()
            ]
            labels = [self._encoded(k) for k in windows[w]]
            flying: list[Future[None]] = []
            for body in _window(merged, labels):  # encoded while the server appends
                flying.append(self._pool.submit(self._post, body))
            for f in flying:
                f.result()
            self.samples += sum(len(s.ts_ms) for s in merged)
            del windows[w]

    def _encoded(self, key: tuple[tuple[str, str], ...]) -> bytes:
        got = self._labels.get(key)
        if got is None:
            got = self._labels[key] = _labels(key)
        return got


def _joined(parts: list[_series.Series]) -> tuple[np.ndarray, np.ndarray]:
    if len(parts) == 1:
        return parts[0].ts_ms, parts[0].values
    return (
        np.concatenate([p.ts_ms for p in parts]),
        np.concatenate([p.values for p in parts]),
    )
