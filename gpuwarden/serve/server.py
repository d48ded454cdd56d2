"""Run the service and its API under uvicorn in a background thread.

``ServeHandle.start(host, port)`` binds (port 0 picks a free one), waits until uvicorn answers,
and returns; ``stop()`` shuts uvicorn and the loop down. Tests and ``gpuwarden serve`` use the
same path; the command waits on Ctrl-C or SIGTERM in the main thread.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time

from gpuwarden._lifecycle import wait_for_stop
from gpuwarden.errors import ConfigError
from gpuwarden.serve.api import DEFAULT_MAX_BODY_BYTES, create_app
from gpuwarden.serve.service import RiskService

logger = logging.getLogger("gpuwarden.serve")


class ServeHandle:
    """The service's loop plus its HTTP API, started and stopped together."""

    def __init__(
        self,
        service: RiskService,
        *,
        token: str | None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.service = service
        self.app = create_app(service, token=token, max_body_bytes=max_body_bytes)
        self._server: object | None = None
        self._thread: threading.Thread | None = None
        self.host = ""
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, host: str = "127.0.0.1", port: int = 0, *, loop: bool = True) -> ServeHandle:
        """Serve HTTP on ``host:port`` and (``loop``) start collecting and scoring."""
        import uvicorn

        try:
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        self.host, self.port = host, sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=5
        )
        server = uvicorn.Server(config)
        self._server = server
        # uvicorn only installs signal handlers in the main thread; this one is not
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="gpuwarden-api", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"the API did not start on {host}:{self.port}")
            time.sleep(0.01)
        if loop:
            self.service.start()
        return self

    def stop(self) -> None:
        """Stop HTTP first (no new inputs), then the loop."""
        server = self._server
        if server is not None:
            server.should_exit = True  # type: ignore[attr-defined]
            if self._thread is not None:
                self._thread.join(timeout=10)
            self._server = None
        self.service.stop()


def run_serve(
    handle: ServeHandle, host: str, port: int, *, stop_event: threading.Event | None = None
) -> None:
    """Serve until Ctrl-C or SIGTERM (``gpuwarden serve``); ``stop_event`` ends it too."""
    handle.start(host, port)
    print(
        f"gpuwarden serve: {handle.url} (/metrics, /v1/gpus, /v1/audit, /alertmanager); "
        f"scoring every {handle.service.interval_s:g} s; Ctrl-C to stop",
        file=sys.stderr,
    )
    try:
        wait_for_stop(stop_event)
    finally:
        handle.stop()


__all__ = ["ServeHandle", "run_serve"]
