"""Start real servers from Debian packages on 127.0.0.1 for integration tests.

``start_daemon`` runs any such daemon (Prometheus today; Alertmanager and VictoriaMetrics the
same way) in a temporary directory on a free port, waits until its readiness URL answers 200,
and the ``daemons`` fixture stops each one by its PID at the end. A missing binary skips the
test on a developer machine but fails it when ``CI=true``: CI must never pass by skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    workdir: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, **params: str) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", params=params, timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def require_binary(name: str) -> str:
    """Path of ``name``; skip the test if it is not installed, fail instead when CI=true."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (apt-get install -y {name}); see docs/exporter.md"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}: CI=true, so integration tests may not skip")
        pytest.skip(message)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daemon(
    name: str,
    argv: Sequence[str],
    *,
    port: int,
    workdir: Path,
    ready_path: str = "/-/ready",
    timeout_s: float = 30.0,
) -> Daemon:
    """Run ``argv`` (which must listen on 127.0.0.1:``port``) and wait for ``ready_path``."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    daemon = Daemon(name, proc, port, workdir, log)
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{name} exited with {proc.returncode}:\n{daemon.log_tail()}")
        try:
            if daemon.get(ready_path).status_code == 200:
                return daemon
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            daemon.stop()
            pytest.fail(f"{name} not ready after {timeout_s:g} s:\n{daemon.log_tail()}")
        time.sleep(0.05)


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    """Append each started daemon here; all are stopped (by PID) when the test ends."""
    started: list[Daemon] = []
    yield started
    for daemon in reversed(started):
        daemon.stop()


def launch_prometheus(
    workdir: Path, targets: list[str], *, extra: dict | None = None, args: tuple[str, ...] = ()
) -> Daemon:
    """Start Prometheus in ``workdir`` scraping ``targets`` every 1 s; ``extra`` is merged into
    its config (rule files, Alertmanagers). The caller stops it."""
    binary = require_binary("prometheus")
    config = {  # JSON is YAML, so no YAML library is needed
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "gpuwarden",
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "static_configs": [{"targets": targets}],
            }
        ],
        **(extra or {}),
    }
    (workdir / "prometheus.yml").write_text(json.dumps(config, indent=2))
    port = free_port()
    argv = [
        binary,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        *args,
    ]
    return start_daemon("prometheus", argv, port=port, workdir=workdir)


@pytest.fixture
def start_prometheus(daemons: list[Daemon], tmp_path: Path) -> Callable[[list[str]], Daemon]:
    """``start_prometheus(["127.0.0.1:PORT"])``: Prometheus scraping those targets every 1 s."""

    def start(targets: list[str]) -> Daemon:
        workdir = tmp_path / f"prometheus-{len(daemons)}"
        workdir.mkdir()
        daemon = launch_prometheus(workdir, targets, args=("--web.enable-lifecycle",))
        daemons.append(daemon)
        return daemon

    return start


def launch_victoria_metrics(
    workdir: Path, *, port: int | None = None, args: tuple[str, ...] = ()
) -> Daemon:
    """Start VictoriaMetrics with its data in ``workdir`` (started again on the same ``port``
    and ``workdir``, it finds what it stored); retention long enough for simulated dates, and
    queries that see the newest samples (docs: /work/shared/INTEGRATION.md); ``args`` are
    more flags. The caller stops it."""
    binary = require_binary("victoria-metrics")
    port = port or free_port()
    argv = [
        binary,
        f"-storageDataPath={workdir / 'data'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-retentionPeriod=100y",
        "-search.latencyOffset=0s",
        "-search.disableCache",
        *args,
    ]
    return start_daemon("victoria-metrics", argv, port=port, workdir=workdir, ready_path="/health")


@pytest.fixture
def victoria_metrics(daemons: list[Daemon], tmp_path: Path) -> Daemon:
    """A fresh VictoriaMetrics for one test."""
    daemon = launch_victoria_metrics(tmp_path / "victoria-metrics")
    daemons.append(daemon)
    return daemon
