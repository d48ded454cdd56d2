"""Read GPUs through NVIDIA dcgm-exporter endpoints (``dcgm+http://node:9400/metrics``).

Each endpoint is scraped concurrently over HTTP, its Prometheus text is parsed, and every series
whose name is in the catalogue (``telemetry.FIELD_BY_DCGM``, current and legacy names) becomes a
field of that GPU's ``Sample`` (including the profiling ratios ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``
and ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE``). Other series (``DCGM_FI_PROF_SM_ACTIVE``,
``DCGM_FI_DEV_NAME``...) are ignored. An endpoint that is down, slow or answers garbage is named in ``Batch.problems``; the
other endpoints' samples are kept.

Xid limitation: dcgm-exporter exports only the *last* Xid per GPU, as the gauge
``DCGM_FI_DEV_XID_ERRORS``. We turn a change of that value to a non-zero code into an
``Event(kind="xid")``. A repeat of the same Xid, or several Xids between two scrapes, cannot be
seen; and the value found at the first scrape is only a baseline, because nothing says when it
happened (emitting it would count the same old Xid again after every gpuwarden restart).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from gpuwarden.collectors._promtext import ParseResult, parse_text
from gpuwarden.errors import ConfigError
from gpuwarden.readings import screen
from gpuwarden.telemetry import DCGM_XID_METRIC, FIELD_BY_DCGM, Batch, Event, GpuId, Sample

DEFAULT_PORT = 9400
DEFAULT_PATH = "/metrics"
DEFAULT_TIMEOUT_S = 5.0

_GpuKey = tuple[str, int, str]  # (hostname, index, uuid)


def parse_dcgm_url(url: str) -> tuple[list[str], float | None]:
    """``dcgm+http://n1:9400/metrics,n2`` -> (``["http://n1:9400/metrics",
    "http://n2:9400/metrics"]``, timeout_s or None). Port defaults to 9400, path to /metrics;
    ``?timeout=3`` (seconds, on any endpoint) sets the per-endpoint timeout."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("dcgm+http", "dcgm+https"):
        raise ConfigError(
            f"not a dcgm-exporter URL: {url!r} (expected dcgm+http://host:9400/metrics)"
        )
    base = scheme.removeprefix("dcgm+")
    endpoints: list[str] = []
    timeout: float | None = None
    for part in rest.split(","):
        part = part.strip()
        if not part:
            raise ConfigError(f"empty endpoint in {url!r}")
        if "://" not in part:
            part = f"{base}://{part}"
        endpoint, part_timeout = _normalise_endpoint(part.removeprefix("dcgm+"), url)
        endpoints.append(endpoint)
        timeout = part_timeout if part_timeout is not None else timeout
    return endpoints, timeout


def _normalise_endpoint(endpoint: str, whole: str) -> tuple[str, float | None]:
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"endpoint {endpoint!r} in {whole!r} must be http or https")
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"bad port in endpoint {endpoint!r}: {exc}") from exc
    if not parts.hostname:
        raise ConfigError(f"endpoint {endpoint!r} in {whole!r} has no host")
    netloc = parts.netloc if port is not None else f"{parts.netloc}:{DEFAULT_PORT}"
    query = parse_qsl(parts.query, keep_blank_values=True)
    timeout: float | None = None
    kept = []
    for key, value in query:
        if key != "timeout":
            kept.append((key, value))
            continue
        try:
            timeout = float(value)
        except ValueError:
            timeout = -1.0
        if not timeout > 0 or math.isinf(timeout):
            raise ConfigError(f"timeout must be a positive number of seconds, got {value!r}")
    path = parts.path or DEFAULT_PATH
    return urlunsplit((parts.scheme, netloc, path, urlencode(kept), "")), timeout


def _redact(endpoint: str) -> str:
    """Drop a password from ``http://user:secret@host/...`` before it reaches logs."""
    parts = urlsplit(endpoint)
    if parts.password is None:
        return endpoint
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


class DcgmCollector:
    """Scrape dcgm-exporter endpoints; one ``Sample`` per GPU, Xid changes as events.

    ``endpoints``: http(s) URLs (port 9400 and path /metrics when left out). ``client``: an
    ``httpx.Client`` to use (TLS settings, auth); one is made when omitted and closed by
    ``close()``. ``timeout_s``: per endpoint. ``clock``: Unix seconds, stamped on the batch,
    its samples and events.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        client: httpx.Client | None = None,
        clock: Callable[[], float] = time.time,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        if not endpoints:
            raise ConfigError("dcgm collector needs at least one endpoint")
        self.endpoints = [_normalise_endpoint(e, e)[0] for e in endpoints]
        self.url = "dcgm+" + ",".join(_redact(e) for e in self.endpoints)
        self.timeout_s = timeout_s
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=timeout_s)
        self._clock = clock
        self._pool = ThreadPoolExecutor(
            max_workers=min(64, 2 * len(self.endpoints)), thread_name_prefix="dcgm-scrape"
        )
        self._last_xid: dict[_GpuKey, int] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str) -> DcgmCollector:
        endpoints, timeout = parse_dcgm_url(url)
        return cls(endpoints, timeout_s=timeout if timeout is not None else DEFAULT_TIMEOUT_S)

    def collect(self) -> Batch:
        """Scrape every endpoint once (concurrently); equivalent to ``curl host:9400/metrics``."""
        with self._lock:
            ts = self._clock()
            futures = {e: self._pool.submit(self._fetch, e) for e in self.endpoints}
            # httpx's timeout is per phase (connect, each read); this bounds the whole scrape.
            wait(futures.values(), timeout=2 * self.timeout_s + 1)
            samples: list[Sample] = []
            events: list[Event] = []
            problems: list[str] = []
            for endpoint, future in futures.items():
                result, problem = self._outcome(endpoint, future)
                if problem:
                    problems.append(f"{_redact(endpoint)}: {problem}")
                if result is not None:
                    host = urlsplit(endpoint).hostname or ""
                    self._convert(result, host, ts, samples, events)
            return screen(
                Batch(ts=ts, samples=tuple(samples), events=tuple(events), problems=tuple(problems))
            )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._owns_client:
            self._client.close()

    def _fetch(self, endpoint: str) -> tuple[ParseResult | None, str | None]:
        try:
            response = self._client.get(endpoint, timeout=self.timeout_s)
        except httpx.TimeoutException:
            return None, f"timed out after {self.timeout_s:g} s"
        except httpx.ConnectError as exc:
            return None, f"cannot connect ({exc})"
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"
        if response.status_code != 200:
            return None, f"HTTP {response.status_code} {response.reason_phrase}"
        body = response.text
        if not body.strip():
            return None, "empty response"
        parsed = parse_text(body)
        if not parsed.samples and parsed.bad_lines:
            first = parsed.bad_lines[0][:80]
            return None, f"not Prometheus text format (first line: {first!r})"
        if not any(s.name.startswith("DCGM_FI_") for s in parsed.samples):
            return None, "no DCGM_FI_* series: is this a dcgm-exporter endpoint?"
        known_bad = [line for line in parsed.bad_lines if _known_metric(line)]
        if known_bad:
            return parsed, f"{len(known_bad)} malformed line(s) skipped, e.g. {known_bad[0][:80]!r}"
        return parsed, None

    def _outcome(
        self, endpoint: str, future: Future[tuple[ParseResult | None, str | None]]
    ) -> tuple[ParseResult | None, str | None]:
        if not future.done():
            future.cancel()
            return None, f"no answer within {2 * self.timeout_s + 1:g} s"
        try:
            return future.result()
        except Exception as exc:  # a bug or an odd body must not lose the other endpoints
            return None, f"unreadable response ({type(exc).__name__}: {exc})"

    def _convert(
        self,
        parsed: ParseResult,
        endpoint_host: str,
        ts: float,
        samples: list[Sample],
        events: list[Event],
    ) -> None:
        gpus: dict[_GpuKey, GpuId] = {}
        values: dict[_GpuKey, dict[str, float]] = {}
        for s in parsed.samples:
            is_xid = s.name == DCGM_XID_METRIC
            field = FIELD_BY_DCGM.get(s.name)
            if (field is None and not is_xid) or math.isnan(s.value) or math.isinf(s.value):
                continue
            gpu = _gpu_from_labels(s.labels, endpoint_host)
            if gpu is None:
                continue
            key = (gpu.hostname, gpu.index, gpu.uuid)
            if key not in gpus:
                gpus[key] = gpu
                values[key] = {}
            if is_xid:
                self._xid(key, gpu, int(s.value), ts, events)
            elif field is not None:
                # MIG instances and per-pod series repeat device-level fields; the first wins.
                values[key].setdefault(field, s.value)
        samples.extend(Sample(ts=ts, gpu=gpus[k], values=v) for k, v in values.items() if v)

    def _xid(self, key: _GpuKey, gpu: GpuId, code: int, ts: float, events: list[Event]) -> None:
        previous = self._last_xid.get(key)
        self._last_xid[key] = code
        if previous is not None and code != previous and code != 0:
            detail = f"{DCGM_XID_METRIC} changed from {previous} to {code}"
            events.append(Event(ts=ts, gpu=gpu, kind="xid", code=code, detail=detail))


def _known_metric(line: str) -> bool:
    name = line.split("{", 1)[0].split(None, 1)[0]
    return name in FIELD_BY_DCGM or name == DCGM_XID_METRIC


def _gpu_from_labels(labels: Mapping[str, str], endpoint_host: str) -> GpuId | None:
    """GPU identity from dcgm-exporter's labels; the host falls back to the endpoint's."""
    get = labels.get
    index_text = get("gpu") or get("device", "").removeprefix("nvidia")
    try:
        index = int(index_text)
    except ValueError:
        return None  # a series not about one GPU (dcgm-exporter has none today)
    return GpuId(
        hostname=get("Hostname") or get("hostname") or endpoint_host,
        index=index,
        uuid=get("UUID", ""),
        pci_bus_id=get("pci_bus_id", ""),
        model=get("modelName", ""),
    )


__all__ = ["DcgmCollector", "parse_dcgm_url"]
