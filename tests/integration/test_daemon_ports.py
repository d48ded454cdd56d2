"""The integration tests' daemon launcher: each pytest-xdist worker hands out ports from its own
block, and a readiness URL answered by a server other than the one started fails the start
instead of letting a test read another test's server."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alerting_daemons import _conftest, free_port, start_daemon

PORT_BASE, PORT_BLOCK = _conftest.PORT_BASE, _conftest.PORT_BLOCK

SERVER = "import http.server as h, sys; h.HTTPServer(('127.0.0.1', int(sys.argv[1])), h.SimpleHTTPRequestHandler).serve_forever()"  # fmt: skip


def test_each_worker_has_its_own_block(monkeypatch) -> None:
    for worker, block in (("gw0", 0), ("gw1", 1), ("gw3", 3)):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        lo = PORT_BASE + block * PORT_BLOCK
        assert all(lo <= free_port() < lo + PORT_BLOCK for _ in range(20))
    assert PORT_BASE + 11 * PORT_BLOCK <= 32768  # under Linux's ephemeral ports


def test_a_port_answered_by_another_process_fails_the_start(tmp_path) -> None:
    port = free_port()
    other = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], cwd=tmp_path)
    try:
        # a daemon that never binds: the readiness URL answers, but from the other server
        with pytest.raises(pytest.fail.Exception, match="served by another process"):
            start_daemon(
                "late", [sys.executable, "-c", "import time; time.sleep(30)"], port=port,
                workdir=tmp_path, ready_path="/",
            )  # fmt: skip
        # the server that holds the port passes the same check
        free = free_port()
        mine = start_daemon("mine", [sys.executable, "-c", SERVER, str(free)], port=free,
                            workdir=tmp_path / "mine", ready_path="/")  # fmt: skip
        mine.stop()
    finally:
        other.terminate()
        other.wait(timeout=10)
