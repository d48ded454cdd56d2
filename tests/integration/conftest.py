"""Start real servers from Debian packages on 127.0.0.1 for integration tests.

``start_daemon`` runs any such daemon (Prometheus today; Alertmanager and VictoriaMetrics the
same way) in a temporary directory on a free port, waits until its readiness URL answers 200,
and the ``daemons`` fixture stops each one by its PID at the end. A missing binary skips the
test on a developer machine but fails it when ``CI=true``: CI must never pass by skipping.
"""

from __future__ import annotations

import json
import os
import random
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


def require_binary(name: str, *, package: str | None = None, also_in: str | None = None) -> str:
    """Path of ``name`` (looked for on PATH, then in the ``os.pathsep``-separated ``also_in``);
    skip the test if it is not installed, fail instead when CI=true."""
    path = shutil.which(name) or (also_in and shutil.which(name, path=also_in))
    if not path:
        message = f"{name} is not installed (apt-get install -y {package or name}); see docs/ci.md"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}: CI=true, so integration tests may not skip")
        pytest.skip(message)
    return path


#: Ports each pytest-xdist worker hands out: its own block, under Linux's ephemeral range
#: (32768 up, where the kernel picks ports for ``bind(0)`` and outgoing connections). A port
#: picked with ``bind(0)`` is free only until someone binds it: another worker's daemon once
#: took one first, and this worker's readiness poll was answered by that worker's server.
PORT_BLOCK, PORT_BASE = 2000, 10000


def free_port() -> int:
    """A port on 127.0.0.1 free now, from this worker's own block (``PORT_BLOCK``)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    base = PORT_BASE + (int(worker) % 11 if worker.isdigit() else 0) * PORT_BLOCK
    start = random.randrange(PORT_BLOCK)
    for i in range(PORT_BLOCK):
        port = base + (start + i) % PORT_BLOCK
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # the whole block busy: any port the kernel gives
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening_inode(port: int) -> str | None:
    """The inode of the socket listening on 127.0.0.1:``port`` (or any address), from
    /proc/net/tcp; None when there is none or /proc cannot tell."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                return cols[9]
    return None


def _owns_port(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds the socket listening on ``port``; None when /proc does
    not say (another system)."""
    inode = _listening_inode(port)
    if inode is None:
        return None
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                return True
        except OSError:
            continue
    return False


def start_daemon(
    name: str,
    argv: Sequence[str],
    *,
    port: int,
    workdir: Path,
    ready_path: str = "/-/ready",
    ready_status: int = 200,
    timeout_s: float = 30.0,
) -> Daemon:
    """Run ``argv`` (which must listen on 127.0.0.1:``port``) and wait until ``ready_path``
    answers ``ready_status``."""
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
            if daemon.get(ready_path).status_code == ready_status:
                if _owns_port(proc.pid, port) is False:  # another process answered
                    daemon.stop()
                    pytest.fail(
                        f"{name}: 127.0.0.1:{port} is served by another process, not the one "
                        f"started:\n{daemon.log_tail()}"
                    )
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


def launch_influxdb(workdir: Path) -> Daemon:
    """Start InfluxDB 1.x (Debian's ``influxdb``: ``influxd``) with its data in ``workdir``,
    its HTTP API on a free port and its RPC port on another; reporting and self-monitoring off.
    The caller stops it."""
    binary = require_binary("influxd")
    port, rpc = free_port(), free_port()
    config = workdir / "influxdb.conf"
    workdir.mkdir(parents=True, exist_ok=True)
    config.write_text(
        "reporting-disabled = true\n"
        f'bind-address = "127.0.0.1:{rpc}"\n'
        f'[meta]\n  dir = "{workdir / "meta"}"\n'
        f'[data]\n  dir = "{workdir / "data"}"\n  wal-dir = "{workdir / "wal"}"\n'
        "  query-log-enabled = false\n"
        f'[http]\n  bind-address = "127.0.0.1:{port}"\n  log-enabled = false\n'
        "[monitor]\n  store-enabled = false\n"
        "[continuous_queries]\n  enabled = false\n"
    )
    argv = [binary, "run", "-config", str(config)]
    return start_daemon(
        "influxd", argv, port=port, workdir=workdir, ready_path="/ping", ready_status=204
    )


@pytest.fixture
def influxdb(daemons: list[Daemon], tmp_path: Path) -> Daemon:
    """A fresh InfluxDB 1.x for one test."""
    daemon = launch_influxdb(tmp_path / "influxdb")
    daemons.append(daemon)
    return daemon
