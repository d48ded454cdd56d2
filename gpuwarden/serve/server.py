"""Run the risk service and its API under uvicorn in a background thread.

``ServeHandle.start(host, port)`` binds (port 0 picks a free one), waits until uvicorn answers,
and returns; ``stop()`` shuts uvicorn and the loop down. Tests and ``gpuwarden serve`` use the
same path; the command waits on Ctrl-C or SIGTERM in the main thread. The uvicorn part is
``gpuwarden.lifecycle.AppServer``, which the scheduler's server shares.
"""

from __future__ import annotations

import logging
import sys
import threading

from gpuwarden.lifecycle import AppServer, wait_for_stop
from gpuwarden.serve.api import DEFAULT_MAX_BODY_BYTES, create_app
from gpuwarden.serve.service import RiskService

logger = logging.getLogger("gpuwarden.serve")


class ServeHandle(AppServer[RiskService]):
    """The service's loop plus its HTTP API, started and stopped together."""

    def __init__(
        self,
        service: RiskService,
        *,
        token: str | None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        super().__init__(create_app(service, token=token, max_body_bytes=max_body_bytes), service)


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
