"""Running long-lived services: an HTTP app under uvicorn beside a service's loop, and waiting
for the stop (Ctrl-C, SIGTERM, or a test's event).

    server = AppServer(create_app(service), service).start("127.0.0.1", 0)   # port 0: any free
    wait_for_stop()
    server.stop()

``gpuwarden serve`` (``serve.server.ServeHandle``), ``gpuwarden scheduler serve``
(``scheduler.api.SchedulerServer``) and the exporter share it, so neither the scheduler nor the
exporter imports ``serve``. uvicorn is imported only when a server starts.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Generic, Protocol, Self, TypeVar

from gpuwarden.errors import ConfigError


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` for uvicorn; ``ConfigError`` if it cannot be bound.

    Made with ``IPPROTO_TCP`` named: asyncio sets ``TCP_NODELAY`` on the connections it accepts
    only when the socket says it is TCP, and without it a response written in two parts
    (headers, then body) waits for the client's delayed ACK: about 40 ms on every request."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


class Service(Protocol):
    """A loop that runs beside the HTTP API: ``start()`` returns at once, ``stop()`` joins it."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=Service)


class AppServer(Generic[S]):
    """An ASGI ``app`` under uvicorn in a background thread plus ``service``'s loop, started
    and stopped together."""

    def __init__(self, app: Any, service: S) -> None:
        self.app = app
        self.service = service
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.host = ""
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, host: str = "127.0.0.1", port: int = 0, *, loop: bool = True) -> Self:
        """Serve HTTP on ``host:port`` (bound before returning: port 0 picks a free one) and
        (``loop``) start the service's loop. ``ConfigError`` if the address cannot be bound."""
        import uvicorn

        sock = listening_socket(host, port)
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
            server.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=10)
            self._server = None
        self.service.stop()


@contextmanager
def stops_on_signal() -> Iterator[None]:
    """Ctrl-C or SIGTERM inside the block ends it quietly. Containers stop with SIGTERM, so it
    stops a service as cleanly as Ctrl-C; the previous SIGTERM handler is restored afterwards.
    Enter it before the service answers, so a stop sent as soon as it answers is not lost."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        yield
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def wait_for_stop(stop_event: threading.Event | None = None) -> None:
    """Block until Ctrl-C, SIGTERM or ``stop_event``."""
    with stops_on_signal():
        (stop_event or threading.Event()).wait()


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


__all__ = ["AppServer", "Service", "listening_socket", "stops_on_signal", "wait_for_stop"]
