"""Read GPUs through NVIDIA dcgm-exporter endpoints (``dcgm+http://node:9400/metrics``).

Each endpoint is scraped concurrently over HTTP, its Prometheus text is parsed, and every series
whose name is in the catalogue (``telemetry.FIELD_BY_DCGM``, current and legacy names) becomes a
field of that GPU's ``Sample`` (including the profiling ratios ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``
and ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE``). Other series (``DCGM_FI_PROF_SM_ACTIVE``,
``DCGM_FI_DEV_NAME``...) are ignored. An endpoint that is down, slow or answers garbage is named in ``Batch.problems``; the
other endpoints' samples are kept.

Labels: ``Hostname``/``hostname``, pod/namespace/container (``Batch.assignments``), MIG
instances (``GPU_I_ID``: keyed ``telemetry.mig_uuid``, their own fields only; the whole GPU's
fields stay on the parent) and ``DCGM_FI_DRIVER_VERSION`` (``Batch.nodes``).

Xids: a change of the last-Xid gauge ``DCGM_FI_DEV_XID_ERRORS`` to a non-zero code, and a rise
of 4.x's windowed ``DCGM_EXP_XID_ERRORS_COUNT``, become ``Event(kind="xid")``. A non-zero value
at a GPU's first scrape is recorded once per collector start as of unknown time
(``telemetry.TIME_UNKNOWN``), which is no hard signal. docs/collectors.md has the details.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from gpuwarden.collectors._promtext import ParseResult, PromSample, parse_text
from gpuwarden.config import redact_url
from gpuwarden.errors import ConfigError
from gpuwarden.readings import gpu_index, screen
from gpuwarden.telemetry import (
    DCGM_HEALTH_METRIC,
    DCGM_XID_COUNT_METRIC,
    DCGM_XID_METRIC,
    FIELD_BY_DCGM,
    MIG_INSTANCE_FIELDS,
    TIME_UNKNOWN,
    Assignment,
    Batch,
    Event,
    GpuId,
    NodeInfo,
    Sample,
    mig_uuid,
)
from gpuwarden.wording import counted

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
        self.url = "dcgm+" + ",".join(redact_url(e) for e in self.endpoints)
        self.timeout_s = timeout_s
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=timeout_s)
        self._clock = clock
        self._pool = ThreadPoolExecutor(
            max_workers=min(64, 2 * len(self.endpoints)), thread_name_prefix="dcgm-scrape"
        )
        self._last_xid: dict[_GpuKey, int] = {}
        self._xid_window: dict[tuple[_GpuKey, int], float] = {}
        self._seen: set[_GpuKey] = set()  # GPUs (and MIG instances) scraped before
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
            out = _Out()
            problems: list[str] = []
            for endpoint, future in futures.items():
                result, problem = self._outcome(endpoint, future)
                if problem:
                    problems.append(f"{redact_url(endpoint)}: {problem}")
                if result is not None:
                    host = urlsplit(endpoint).hostname or ""
                    self._convert(result, host, ts, out)
            return screen(
                Batch(
                    ts=ts,
                    samples=tuple(out.samples),
                    events=tuple(out.events),
                    problems=tuple(problems),
                    assignments=tuple(out.assignments),
                    nodes=tuple(NodeInfo(ts, h, driver_version=v) for h, v in out.drivers.items()),
                )
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
        if not any(s.name.startswith(("DCGM_FI_", "DCGM_EXP_")) for s in parsed.samples):
            return None, "no DCGM_FI_* series: is this a dcgm-exporter endpoint?"
        known_bad = [line for line in parsed.bad_lines if _known_metric(line)]
        if known_bad:
            return (
                parsed,
                f"{counted(len(known_bad), 'malformed line')} skipped, e.g. {known_bad[0][:80]!r}",
            )
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
        out: _Out,
    ) -> None:
        gpus: dict[_GpuKey, GpuId] = {}
        values: dict[_GpuKey, dict[str, float]] = {}
        pods: dict[_GpuKey, set[tuple[str, str, str]]] = {}
        xid_codes: list[tuple[_GpuKey, GpuId, int, str]] = []
        xid_counts: list[tuple[_GpuKey, GpuId, PromSample]] = []
        for s in parsed.samples:
            name = s.name
            special = _SPECIAL.get(name)
            field = FIELD_BY_DCGM.get(name)
            if (field is None and special is None) or math.isnan(s.value):
                continue
            if special is not None and math.isinf(s.value):
                continue  # an infinite field reading goes on, to be screened out and counted
            labels = s.labels
            gpu = _gpu_from_labels(labels, endpoint_host)
            if gpu is None:
                continue
            key = (gpu.hostname, gpu.index, gpu.uuid)
            if key not in gpus:
                gpus[key] = gpu
                values[key] = {}
            driver = labels.get("DCGM_FI_DRIVER_VERSION")
            if driver:
                out.drivers[gpu.hostname] = driver
            instance = labels.get("GPU_I_ID")
            own = key
            if instance and gpu.uuid:
                # A MIG instance: its own fields and pods under its own key, the whole GPU's
                # fields on the parent (once), so nothing is counted twice.
                own = (gpu.hostname, gpu.index, mig_uuid(gpu.uuid, instance))
                if own not in gpus:
                    profile = labels.get("GPU_I_PROFILE", "")
                    model = f"{gpu.model} MIG {profile}".strip() if profile else gpu.model
                    gpus[own] = gpu._replace(uuid=own[2], model=model)
                    values[own] = {}
            if "pod" in labels:
                pods.setdefault(own, set()).add(
                    (labels.get("namespace", ""), labels["pod"], labels.get("container", ""))
                )
            if special is not None:
                if special == "xid":
                    xid_codes.append((key, gpu, int(s.value), labels.get("err_msg", "")))
                elif special == "xid_count":
                    xid_counts.append((key, gpu, s))
                else:  # health: the worst watch
                    old = values[key].get("dcgm_health", -math.inf)
                    values[key]["dcgm_health"] = max(old, s.value)
            elif field is not None:
                target = own if field in MIG_INSTANCE_FIELDS else key
                # MIG instances and per-pod series repeat device-level fields; the first wins.
                values[target].setdefault(field, s.value)
        counted = self._xid_counts(gpus, xid_counts, ts, out.events)
        for key, gpu, code, msg in xid_codes:
            self._xid(key, gpu, code, msg, ts, out.events, counted)
        out.samples.extend(Sample(ts=ts, gpu=gpus[k], values=v) for k, v in values.items() if v)
        for key, found in pods.items():
            if len(found) > 1:
                found.discard(("", "", ""))  # unassigned only when no pod is named
            gpu = gpus[key]
            out.assignments.extend(Assignment(ts, gpu, *a) for a in sorted(found))
        self._seen.update(gpus)

    def _xid(
        self,
        key: _GpuKey,
        gpu: GpuId,
        code: int,
        msg: str,
        ts: float,
        events: list[Event],
        counted: set[tuple[_GpuKey, int]],
    ) -> None:
        previous = self._last_xid.get(key)
        self._last_xid[key] = code
        if code == 0 or code == previous or (key, code) in counted:
            return  # a windowed count for this Xid already made its event this scrape
        said = f": {msg}" if msg else ""
        if previous is None:
            detail = f"{TIME_UNKNOWN} ({DCGM_XID_METRIC} = {code}){said}"
        else:
            detail = f"{DCGM_XID_METRIC} changed from {previous} to {code}{said}"
        events.append(Event(ts=ts, gpu=gpu, kind="xid", code=code, detail=detail))

    def _xid_counts(
        self,
        gpus: Mapping[_GpuKey, GpuId],
        series: list[tuple[_GpuKey, GpuId, PromSample]],
        ts: float,
        events: list[Event],
    ) -> set[tuple[_GpuKey, int]]:
        """4.x ``DCGM_EXP_XID_ERRORS_COUNT``: Xids per code within a sliding window. An
        increase (or a code appearing) is that many new Xids; a fall is old ones leaving the
        window. The count at a GPU's first scrape is of unknown time."""
        now: dict[tuple[_GpuKey, int], float] = {}
        made: set[tuple[_GpuKey, int]] = set()
        for key, gpu, s in series:
            try:
                code = int(s.labels.get("xid", ""))
            except ValueError:
                continue
            count = now[(key, code)] = max(now.get((key, code), 0.0), s.value)
            if (key, code) in made or count <= 0:
                continue
            before = self._xid_window.get((key, code), 0.0)
            window = s.labels.get("window_size_in_ms", "")
            within = f" within {float(window) / 1000:g} s" if window.isdigit() else ""
            if key not in self._seen:
                detail = f"{TIME_UNKNOWN} ({s.name}{{xid={code}}} = {count:g}{within})"
            elif count > before:
                detail = f"{count - before:g} new ({s.name} {before:g} -> {count:g}{within})"
            else:
                continue
            made.add((key, code))
            events.append(Event(ts=ts, gpu=gpu, kind="xid", code=code, detail=detail))
        for pair in [p for p in self._xid_window if p[0] in gpus and p not in now]:
            del self._xid_window[pair]  # left the window: its next appearance is new
        self._xid_window.update(now)
        return made


class _Out:
    """What one collection gathers across endpoints."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self.events: list[Event] = []
        self.assignments: list[Assignment] = []
        self.drivers: dict[str, str] = {}


#: Series read for something other than a plain field.
_SPECIAL: dict[str, str] = {
    DCGM_XID_METRIC: "xid",
    DCGM_XID_COUNT_METRIC: "xid_count",
    "DCGM_FI_DEV_XID_ERRORS_ACTIVE": "xid_count",  # its name in dcgm-exporter PR 239's build
    DCGM_HEALTH_METRIC: "health",
}


def _known_metric(line: str) -> bool:
    name = line.split("{", 1)[0].split(None, 1)[0]
    return name in FIELD_BY_DCGM or name in _SPECIAL


def _gpu_from_labels(labels: Mapping[str, str], endpoint_host: str) -> GpuId | None:
    """GPU identity from dcgm-exporter's labels; the host falls back to the endpoint's."""
    get = labels.get
    index = gpu_index(get("gpu") or get("device", "").removeprefix("nvidia"))
    if index is None:  # a series not about one GPU (dcgm-exporter has none today), or no index
        return None
    return GpuId(
        hostname=get("Hostname") or get("hostname") or endpoint_host,
        index=index,
        uuid=get("UUID", ""),
        pci_bus_id=get("pci_bus_id", ""),
        model=get("modelName", ""),
    )


__all__ = ["DcgmCollector", "parse_dcgm_url"]
