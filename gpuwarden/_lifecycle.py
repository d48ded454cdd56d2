"""Blocking until a long-running command is told to stop (Ctrl-C, SIGTERM, or a test's event)."""

from __future__ import annotations

import signal
import threading


def wait_for_stop(stop_event: threading.Event | None = None) -> None:
    """Block until Ctrl-C, SIGTERM or ``stop_event``. Containers stop with SIGTERM, so it ends
    the wait as cleanly as Ctrl-C does; the previous SIGTERM handler is restored afterwards."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        (stop_event or threading.Event()).wait()
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
