"""Real gpuwarden processes to kill: start one on a free port, wait until it answers, SIGKILL it,
and drive load at it from threads while recording what it acknowledged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
# a port from this xdist worker's own block, as the integration tests' daemons get
from alerting_daemons import free_port  # noqa: E402, F401  (the fault tests import it here)


@dataclass
class Proc:
    """``python -m gpuwarden.cli ARGS`` with its output in ``log``."""

    args: Sequence[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpuwarden.cli", *self.args],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
            )  # fmt: skip
        return self

    def kill_9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(timeout=30) == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"{' '.join(self.args[:2])} exited {self.proc.returncode}:\n{self.tail()}")


def wait_for(what: str, check: Callable[[], Any], proc: Proc, timeout_s: float = 60.0) -> Any:
    """Poll ``check`` until it returns something true; fail naming ``what`` (and the log)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        proc.alive()
        try:
            if got := check():
                return got
        except (httpx.TransportError, OSError):
            pass
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}:\n{proc.tail()}")


class Load:
    """``threads`` workers calling ``send(worker, i)`` for i = 0, 1, ... until stopped. A call
    that returns is acknowledged (its result kept); one that raises a transport error is in
    flight when the server died (kept apart: it may or may not have happened)."""

    def __init__(self, threads: int, send: Callable[[int, int], Any]) -> None:
        self.send = send
        self.acked: dict[tuple[int, int], Any] = {}
        self.in_flight: list[tuple[int, int]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(w,)) for w in range(threads)]

    def _run(self, worker: int) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                result = self.send(worker, i)
            except httpx.TransportError:
                with self._lock:
                    self.in_flight.append((worker, i))
                return
            except Exception as exc:  # an answer that is not an acknowledgement: a test failure
                with self._lock:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                return
            with self._lock:
                self.acked[(worker, i)] = result
            i += 1

    def start(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def join(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)
        assert not self.errors, self.errors
