"""The Prometheus HTTP API, as Prometheus, Thanos Query, Mimir and VictoriaMetrics answer it.

    api = PromApi(http)                      # a _remote.RemoteHttp to the server
    api.query_range(expr, start, end, 3600)  # -> [Raw(labels, ts, values)]
    api.query(expr, at)
    api.dialect                              # how its range selectors and functions behave

Queries go as POST forms (gpuwarden's are long), several at once (``concurrency``). A query
the server rejects raises ``StoreRejected`` with the server's message; ``max_points`` bounds
what one query may return, and ``MAX_STEPS`` Prometheus' limit of 11,000 points per series,
so callers chunk by time and by host before asking; ``largest`` is the most points one answer
held (the check that they did). ``imap`` hands answers over as they come, so that at most
``concurrency`` answers are held at a time, each decoded into numpy arrays (``Flat``) as it
arrives and its JSON dropped.
"""

from __future__ import annotations

import io
import json
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Any, TypeVar
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from gpuwarden.errors import StoreError, StoreRejected
from gpuwarden.store._promql import Dialect
from gpuwarden.store._remote import RemoteHttp
from gpuwarden.store._series import Raw

#: Prometheus refuses a query_range of more than 11,000 points per series.
MAX_STEPS = 11_000
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
#: Points one query may return (series x steps) unless the URL says otherwise. An answer costs
#: the client about 40 bytes a point while parsed (JSON text, then its numbers) and the server
#: a fixed cost per query, so larger is cheaper for the server and dearer in memory:
#: docs/benchmarks.md, "Prometheus: answers bounded in points".
DEFAULT_MAX_POINTS = 500_000
#: answers asked for or waiting per thread of ``PromApi.imap``
IN_FLIGHT = 2
_T = TypeVar("_T")
_R = TypeVar("_R")


class PromApi:
    """Queries against one server's ``/api/v1``; ``dialect`` is probed on first use."""

    def __init__(
        self,
        http: RemoteHttp,
        *,
        max_points: int = DEFAULT_MAX_POINTS,
        concurrency: int = 4,
        prefix: str = "",
    ) -> None:
        self.http = http
        self.max_points = int(max_points)
        self.concurrency = max(1, int(concurrency))
        self.prefix = prefix.rstrip("/")
        self._dialect: Dialect | None = None
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        #: queries sent, points answered in all and the most in one answer: for tests and
        #: the benchmark
        self.queries = 0
        self.points = 0
        self.largest = 0
        # answers from this machine come uncompressed: inflating a week of a fleet's JSON
        # cost more than a third of parsing it, and the server's deflating as much again
        host = urlsplit(http.base).hostname or ""
        self._plain = {"Accept-Encoding": "identity"} if host in LOOPBACK else None

    # -- the calls -------------------------------------------------------------------------

    def _post(self, path: str, form: dict[str, str]) -> bytes:
        self.queries += 1
        return self.http.request("POST", self.prefix + path, data=form, headers=self._plain).content

    def _answer(self, path: str, body: bytes) -> Any:
        """The ``data`` of a JSON answer; an ``error`` status raises ``StoreRejected``."""
        try:
            answer = json.loads(body)
        except ValueError as exc:
            raise StoreError(f"{self.http.name}: {path} answered something not JSON") from exc
        if not isinstance(answer, dict) or answer.get("status") != "success":
            said = answer.get("error", answer) if isinstance(answer, dict) else answer
            raise StoreRejected(f"{self.http.name}: {path} failed: {said}")
        return answer.get("data")

    def _flat(self, path: str, form: dict[str, str]) -> Flat:
        body = self._post(path, form)
        fast = _fast_flat(body)
        flat = fast if fast is not None else Flat.of(_raws(self._answer(path, body)))
        del body  # the answer's text goes as soon as its numbers are out
        n = int(flat.counts.sum())
        with self._count_lock:
            self.points += n
            self.largest = max(self.largest, n)
        return flat

    def _result(self, path: str, form: dict[str, str]) -> list[Raw]:
        return self._flat(path, form).raws()

    def query(self, expr: str, at: float) -> list[Raw]:
        """An instant query at ``at`` (Unix s): a vector (one point per series) or, for a
        range selector, the raw samples."""
        return self._result("/api/v1/query", {"query": expr, "time": _ts(at)})

    def query_flat(self, expr: str, at: float) -> Flat:
        """``query``, every series' points in one pair of arrays (no array per series: a
        read of many short series spends its time there)."""
        return self._flat("/api/v1/query", {"query": expr, "time": _ts(at)})

    def select_flat(self, selectors: Sequence[str], start: float, end: float) -> list[Flat]:
        """The raw samples in ``[start, end)`` of the series each of ``selectors`` selects
        (range selectors, one query each); ``NativeApi`` reads VictoriaMetrics' blocks."""
        width = end - start
        return [self.query_flat(self.dialect.window(s, width), end) for s in selectors]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Raw]:
        """``expr`` at ``start``, ``start + step``, ... up to ``end`` (inclusive)."""
        return self.query_range_flat(expr, start, end, step).raws()

    def query_range_flat(self, expr: str, start: float, end: float, step: float) -> Flat:
        """``query_range``, every series' points in one pair of arrays."""
        form = {"query": expr, "start": _ts(start), "end": _ts(end), "step": f"{step:g}"}
        return self._flat("/api/v1/query_range", form)

    def label_sets(self, match: Sequence[str], start: float, end: float) -> list[dict[str, str]]:
        """``/api/v1/series``: the label sets of the series ``match`` selects in the window."""
        form = {"match[]": list(match), "start": _ts(start), "end": _ts(end)}
        data = self._answer("/api/v1/series", self._post("/api/v1/series", form))  # type: ignore[arg-type]
        return [dict(d) for d in data or []]

    @property
    def dialect(self) -> Dialect:
        """Whether range selectors include their left end, and whether ``tlast_over_time``
        exists: asked once, with two queries that need no data."""
        with self._lock:
            if self._dialect is None:
                got = self.query("count_over_time(vector(1)[2s:1s])", 1_700_000_000.0)
                closed = bool(got) and got[0].values[0] >= 3
                try:
                    self.query("tlast_over_time(vector(1)[2s:1s])", 1_700_000_000.0)
                    tfuncs = True
                except StoreRejected:
                    tfuncs = False
                self._dialect = Dialect(closed=closed, tfuncs=tfuncs)
            return self._dialect

    # -- many at once ----------------------------------------------------------------------

    def map(self, fn: Callable[[_T], _R], items: Iterable[_T]) -> list[_R]:
        """``fn`` over ``items``, ``concurrency`` at a time, results in order; the first
        error raised is raised here."""
        return list(self.imap(fn, items))

    def imap(self, fn: Callable[[_T], _R], items: Iterable[_T]) -> Iterator[_R]:
        """``map``, each result given as soon as it and those before it are in: the caller
        works on one answer while the next ones are asked and decoded. At most
        ``IN_FLIGHT`` times ``concurrency`` answers are asked for or waiting, so memory
        stays bounded however many there are. The first error raised is raised here, and
        the calls not started yet are dropped."""
        items = list(items)
        if self.concurrency == 1 or len(items) < 2:
            yield from (fn(i) for i in items)
            return
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="promql")
        pool, todo = self._pool, iter(items)
        window: deque[Future[_R]] = deque(
            pool.submit(fn, i) for i in islice(todo, IN_FLIGHT * self.concurrency)
        )
        try:
            while window:
                got = window.popleft().result()
                for i in islice(todo, 1):
                    window.append(pool.submit(fn, i))
                yield got
        finally:
            for f in window:
                f.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self.http.close()


def _ts(t: float) -> str:
    """Unix seconds with millisecond precision, as the API takes them."""
    return f"{round(float(t) * 1000) / 1000:.3f}"


_CSV_READ = pa_csv.ReadOptions(column_names=["t", "v"])
_CSV_TYPES = pa_csv.ConvertOptions(column_types={"t": pa.float64(), "v": pa.float64()})
_SUCCESS = b'{"status":"success"'
_METRIC = b'{"metric":'


@dataclass(frozen=True)
class Flat:
    """A query's answer: each series' labels and point count, every point in one array;
    ``ts_ms``: the times as int64 milliseconds too, where they came so (native export)."""

    labels: list[dict[str, str]]
    counts: np.ndarray
    ts: np.ndarray
    values: np.ndarray
    ts_ms: np.ndarray | None = None

    def milliseconds(self) -> np.ndarray:
        """The times as int64 milliseconds."""
        if self.ts_ms is not None:
            return self.ts_ms
        return np.rint(np.asarray(self.ts, dtype=np.float64) * 1000).astype(np.int64)

    @classmethod
    def of(cls, raws: list[Raw]) -> Flat:
        counts = np.array([len(r.ts) for r in raws], dtype=np.int64)
        ts = np.concatenate([r.ts for r in raws]) if raws else np.empty(0)
        values = np.concatenate([r.values for r in raws]) if raws else np.empty(0)
        return cls([r.labels for r in raws], counts, ts, values)

    def raws(self) -> list[Raw]:
        ends = np.cumsum(self.counts).tolist()
        starts = [0, *ends[:-1]] if ends else []
        return [
            Raw(lab, self.ts[a:b], self.values[a:b])
            for lab, a, b in zip(self.labels, starts, ends, strict=True)
        ]


def _fast_flat(body: bytes) -> Flat | None:
    """A successful matrix or vector answer parsed without a Python object per point: the
    labels are JSON, every series' points go to numpy in one call. None for anything else,
    which ``json`` then reads. Label values cannot hold ``{"metric":`` or ``]]``: quotes in
    JSON strings are escaped."""
    if not body.startswith(_SUCCESS):
        return None
    head = body[:120]
    if b'"resultType":"matrix"' in head:
        key, close = b',"values":[', b"]]"
    elif b'"resultType":"vector"' in head:
        key, close = b',"value":[', b"]"
    else:
        return None
    heads: list[bytes] = []
    texts: list[bytes] = []
    at = body.find(_METRIC)
    while at >= 0:
        split = body.find(key, at)
        if split < 0:
            return None
        heads.append(body[at + len(_METRIC) : split])
        start = split + len(key)
        end = body.find(close, start)
        if end <= start or body.find(b"{", start, end) >= 0:  # no points: let json read it
            return None
        texts.append(body[start:end])
        at = body.find(_METRIC, end)
    if not texts:
        return Flat([], np.zeros(0, dtype=np.int64), np.empty(0), np.empty(0))
    # every series' labels in one parse: a call per series was a third of the time
    labels: list[dict[str, str]] = json.loads(b"[" + b",".join(heads) + b"]")
    # points per series: one more than its "],[" separators; then every point, one per line,
    # read by Arrow's CSV reader (ten times numpy's text parser here)
    counts = np.array([t.count(b"],[") + 1 for t in texts], dtype=np.int64)
    text = b"\n".join(texts).replace(b"],[", b"\n")
    text = text.replace(b'"', b"").replace(b"[", b"").replace(b"]", b"")
    try:
        table = pa_csv.read_csv(
            io.BytesIO(text), read_options=_CSV_READ, convert_options=_CSV_TYPES
        )
    except pa.ArrowInvalid:
        return None
    if table.num_rows != counts.sum():
        return None
    ts = table.column("t").to_numpy(zero_copy_only=False)
    values = table.column("v").to_numpy(zero_copy_only=False)
    return Flat(labels, counts, ts, values)


def _raws(data: Any) -> list[Raw]:
    if not isinstance(data, dict):
        return []
    kind = data.get("resultType")
    out = []
    for item in data.get("result") or []:
        labels = item.get("metric") or {}
        if kind == "matrix":
            points = item.get("values") or []
        elif kind == "vector":
            points = [item["value"]]
        else:
            continue
        n = len(points)
        ts = np.fromiter((p[0] for p in points), dtype=np.float64, count=n)
        values = np.array([p[1] for p in points], dtype=np.float64) if n else np.empty(0)
        out.append(Raw(labels, ts, values))
    return out


def chunks(items: Sequence[_T], size: int) -> list[list[_T]]:
    """``items`` in lists of at most ``size`` (at least one item each)."""
    size = max(1, int(size))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def time_spans(start: float, end: float, span: float) -> list[tuple[float, float]]:
    """``[start, end)`` cut into consecutive spans of at most ``span`` seconds."""
    span = max(span, 1e-3)
    n = max(1, math.ceil((end - start) / span))
    cuts = [min(end, start + k * span) for k in range(n + 1)]
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


__all__ = ["DEFAULT_MAX_POINTS", "MAX_STEPS", "Flat", "PromApi", "chunks", "time_spans"]
