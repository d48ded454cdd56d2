"""Serve any collector's GPUs at /metrics in dcgm-exporter's format, plus gpuwarden's own series.

Series keep dcgm-exporter's names (``DCGM_FI_DEV_GPU_TEMP``) and labels (``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName``, ``Hostname``) so existing dcgm-exporter Grafana
dashboards work unchanged, whatever the source (NVML, nvidia-smi, dcgm-exporter, the simulator).
Added on top:

- ``gpuwarden_xid_errors_total{..., xid="48"}``: every Xid counted per code (dcgm-exporter's
  ``DCGM_FI_DEV_XID_ERRORS`` only shows the last one);
- ``gpuwarden_gpu_up``: 0 when a GPU seen before is gone, or fell off the bus;
- collector health: ``gpuwarden_collector_up``, ``..._last_success_timestamp_seconds``,
  ``..._errors_total``, ``..._problems``, ``gpuwarden_collect_duration_seconds``.

A background thread calls ``collector.collect()`` every ``interval_s``; a collection that raises
is counted and the last good values stay served. HTTP is the standard library's
``ThreadingHTTPServer``: ``/metrics``, ``/healthz``, 404 elsewhere.
"""

from __future__ import annotations

import gzip
import logging
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gpuwarden._exporter_render import CONTENT_TYPE, ExporterState
from gpuwarden.collectors.base import Collector
from gpuwarden.collectors.silence import SilenceWatch
from gpuwarden.errors import ConfigError
from gpuwarden.lifecycle import stops_on_signal
from gpuwarden.store.base import Store
from gpuwarden.telemetry import Batch

logger = logging.getLogger(__name__)


class Exporter:
    """Poll ``collector`` every ``interval_s`` seconds and serve what it saw.

    ``store``: when given, each batch is also written with ``store.write_batch`` (a failure is
    counted in ``gpuwarden_store_write_errors_total``, never stops the exporter). ``clock``:
    Unix seconds, for ``gpuwarden_collector_last_success_timestamp_seconds``.
    """

    def __init__(
        self,
        collector: Collector,
        *,
        interval_s: float = 15.0,
        store: Store | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError(
                f"exporter interval must be a positive number of seconds, got {interval_s!r}"
            )
        self.collector = collector
        self.interval_s = interval_s
        self.store = store
        self._clock = clock
        self._state = ExporterState(collector.url, has_store=store is not None)
        self._silence = SilenceWatch()  # under _poll_lock: one batch at a time
        self._lock = threading.Lock()  # guards _state and the cached bodies
        self._poll_lock = threading.Lock()  # one collect() at a time
        self._problems: frozenset[str] = frozenset()  # the last batch's, under _poll_lock
        self._body: bytes | None = None
        self._gzipped: bytes | None = None
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._servers: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    def poll_once(self) -> Batch | None:
        """Collect once and update what /metrics shows. Returns the batch, or None if
        ``collect()`` raised (counted in ``gpuwarden_collector_errors_total``)."""
        with self._poll_lock:
            started = time.perf_counter()
            try:
                batch = self.collector.collect()
            except Exception as exc:  # any failure of the source: keep serving the last values
                duration = time.perf_counter() - started
                logger.warning("collect from %s failed: %s", self.collector.url, exc, exc_info=True)
                with self._lock:
                    self._state.record_failure(f"{type(exc).__name__}: {exc}", duration)
                    self._body = self._gzipped = None
                return None
            duration = time.perf_counter() - started
            batch = self._silence.observe(batch)
            store_failed = self._write_store(batch)
            with self._lock:
                self._state.apply(batch, duration, now=self._clock())
                self._state.health.store_errors_total += store_failed
                self._body = self._gzipped = None
            # a new problem (an endpoint down) is a warning once; while it lasts, info
            for problem in batch.problems:
                level = logging.INFO if problem in self._problems else logging.WARNING
                logger.log(level, "collect from %s: %s", self.collector.url, problem)
            self._problems = frozenset(batch.problems)
            return batch

    def _write_store(self, batch: Batch) -> int:
        if self.store is None:
            return 0
        try:
            self.store.write_batch(batch)
        except Exception as exc:  # the exporter keeps serving even if the disk is full
            logger.warning("writing batch to %s failed: %s", self.store.url, exc, exc_info=True)
            return 1
        return 0

    def render(self) -> bytes:
        """The /metrics body (Prometheus text format 0.0.4); rebuilt only after a poll."""
        with self._lock:
            if self._body is None:
                self._body = self._state.render()
            return self._body

    def _render_gzip(self) -> bytes:
        with self._lock:
            if self._body is None:
                self._body = self._state.render()
            if self._gzipped is None:
                # level 1: a 1,024-GPU body (7 MB) shrinks about 20x in about 20 ms, once per poll
                self._gzipped = gzip.compress(self._body, compresslevel=1)
            return self._gzipped

    def health(self) -> tuple[bool, str]:
        """(healthy, reason) for /healthz: unhealthy while the last collection raised or read
        nothing (its only source unreachable)."""
        with self._lock:
            h = self._state.health
            if not h.attempts:
                return True, "starting: no collection yet"
            if not h.last_ok:
                return False, f"last collection failed: {h.last_error}"
            return True, "ok"

    def serve(
        self,
        host: str,
        port: int,
        *,
        bound: Callable[[ThreadingHTTPServer], None] | None = None,
    ) -> ThreadingHTTPServer:
        """Start polling (if not yet) and serve HTTP on ``host:port`` in a thread; ``port`` 0
        picks a free port (``server.server_address[1]``). Stop both with ``stop()``.
        ``bound`` is called once the port is bound, before the first request is answered."""
        try:
            server = _Server((host, port), _Handler)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        server.exporter = self
        if bound is not None:
            bound(server)
        thread = threading.Thread(
            target=server.serve_forever, args=(0.1,), name="gpuwarden-http", daemon=True
        )
        thread.start()
        self._servers.append((server, thread))
        self.start_polling()
        return server

    def start_polling(self) -> None:
        """Start the background poll thread (``serve`` does this)."""
        if self._poller is None:
            self._stop.clear()
            self._poller = threading.Thread(
                target=self._poll_loop, name="gpuwarden-poll", daemon=True
            )
            self._poller.start()

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.poll_once()
            except Exception:  # a bug in apply or logging must not end the exporter
                logger.exception("poll failed")
                with self._lock:
                    self._state.health.errors_total += 1
                    self._body = self._gzipped = None
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def stop(self) -> None:
        """Stop polling and every server ``serve`` started. The collector is left open."""
        self._stop.set()
        for server, thread in self._servers:
            server.shutdown()
            server.server_close()
            thread.join()
        self._servers.clear()
        if self._poller is not None:
            # a collect() in flight (nvidia-smi on a sick GPU) is not waited for past this
            self._poller.join(timeout=10)
            self._poller = None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    exporter: Exporter


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "gpuwarden"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        exporter = self.server.exporter
        if path == "/metrics":
            if "gzip" in self.headers.get("Accept-Encoding", ""):
                self._send(200, exporter._render_gzip(), CONTENT_TYPE, gzipped=True)
            else:
                self._send(200, exporter.render(), CONTENT_TYPE)
        elif path == "/healthz":
            ok, reason = exporter.health()
            self._send(200 if ok else 503, f"{reason}\n".encode(), "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found: try /metrics or /healthz\n", "text/plain; charset=utf-8")

    def _send(self, status: int, body: bytes, content_type: str, gzipped: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        logger.debug("%s %s", self.address_string(), format % args)


def run_exporter(
    collector: Collector,
    host: str,
    port: int,
    interval_s: float,
    store: Store | None = None,
    *,
    stop_event: threading.Event | None = None,
) -> None:
    """Serve until Ctrl-C or SIGTERM (``gpuwarden exporter``); the caller closes the collector.

    Raises ``ConfigError`` when the port cannot be bound. ``stop_event`` (tests, embedding):
    setting it returns as Ctrl-C would.
    """
    exporter = Exporter(collector, interval_s=interval_s, store=store)
    try:
        with stops_on_signal():  # before it answers: a SIGTERM right after is not lost
            # said before the first answer: a client that saw one, then stopped us, saw it
            exporter.serve(
                host,
                port,
                bound=lambda server: print(
                    f"gpuwarden exporter: http://{host}:{server.server_port}/metrics "
                    f"(collector {collector.url}, every {interval_s:g} s); Ctrl-C to stop",
                    file=sys.stderr,
                    flush=True,
                ),
            )
            (stop_event or threading.Event()).wait()
    finally:
        exporter.stop()


__all__ = ["Exporter", "run_exporter", "CONTENT_TYPE"]
