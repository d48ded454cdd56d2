"""Every gpuwarden HTTP service, as a real process on 127.0.0.1, refuses an 80 MB body without
holding it: unauthenticated with a Content-Length or chunked (401 before the body is read), and
authenticated but over the limit (413 while it streams in). The server's peak memory, read from
/proc (VmHWM after resetting it through clear_refs), stays within 10 MB of idle (plus the body
limit, when the token is right and the body is read up to it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

MB = 1 << 20
BODY_MB = 80
SERVE_TOKEN, TEAM_TOKEN = "serve-token-for-bodies", "team-token-for-bodies"
pytestmark = pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc"
)


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def memory_mb(self) -> dict[str, float]:
        """VmRSS and VmHWM (the peak since the last reset) of the server, in MiB."""
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
        return out

    def reset_peak(self) -> float:
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        return self.memory_mb()["VmHWM"]


sys.path.insert(0, str(Path(__file__).resolve().parent / "integration"))
# a port from this xdist worker's own block, as the integration tests' daemons get
from alerting_daemons import free_port as _free_port  # noqa: E402


def _start(argv: list[str], tmp: Path, port: int) -> Server:
    env = {**os.environ, "GPUWARDEN_API_TOKEN": SERVE_TOKEN,
           "GPUWARDEN_SCHEDULER_TOKENS_JSON": json.dumps({"team-a": TEAM_TOKEN})}  # fmt: skip
    log = tmp / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gpuwarden.cli", *argv], cwd=tmp,
                                env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            httpx.get(f"{server.url}/healthz", timeout=5)
            return server
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"not up after 60 s:\n{log.read_text()}"
            time.sleep(0.1)


@pytest.fixture(params=["serve", "scheduler", "exporter"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Server]]:
    port = _free_port()
    argv = {
        "serve": ["serve", "--no-collect", "--store", f"sqlite:///{tmp_path}/t.db",
                  "--listen", f"127.0.0.1:{port}", "--audit", f"{tmp_path}/audit.db"],
        "scheduler": ["scheduler", "serve", "--db", f"{tmp_path}/s.db", "--port", str(port)],
        "exporter": ["exporter", "--collector", "sim://fleet?nodes=1&gpus=2&seed=1",
                     "--listen", f"127.0.0.1:{port}"],
    }[request.param]  # fmt: skip
    server = _start(argv, tmp_path, port)
    yield request.param, server
    server.proc.terminate()
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


#: (path, token, body limit in MiB) of a route that takes a body, per service; the exporter
#: takes none
ROUTES = {
    "serve": ("/v1/gpus/GPU-x/state", SERVE_TOKEN, 1),
    "scheduler": ("/v1/jobs", TEAM_TOKEN, 32),
    "exporter": ("/metrics", None, 0),
}


def _chunks() -> Iterator[bytes]:
    chunk = b"[" * MB  # JSON that would nest 80 million deep, were it ever parsed
    for _ in range(BODY_MB):
        yield chunk


def _post(url: str, body: bytes | Iterator[bytes], token: str | None) -> int | str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        return httpx.post(url, content=body, headers=headers, timeout=120).status_code
    except httpx.TransportError as exc:  # a server may end the connection instead of reading on
        return type(exc).__name__


def test_bodies_over_the_limit_are_refused_without_being_held(server):
    name, srv = server
    path, token, limit_mb = ROUTES[name]
    url = srv.url + path
    _post(url, b'{"warm": "up"}', None)  # first requests import and allocate what they need
    _post(url, b'{"warm": "up"}', token)
    outcomes = {}
    for label, body, given in [
        ("no token, Content-Length", b"x" * (BODY_MB * MB), None),
        ("no token, chunked", _chunks(), None),
        ("wrong token, chunked", _chunks(), "not-the-token"),
        ("token, Content-Length", b"x" * (BODY_MB * MB), token),
        ("token, chunked", _chunks(), token),
    ]:
        idle = srv.reset_peak()
        outcomes[label] = _post(url, body, given)
        peak = srv.memory_mb()["VmHWM"]
        # refused unread: within 10 MiB; with the token, read up to the limit first
        allowed = 10 + (limit_mb if token is not None and given == token else 0)
        assert peak - idle <= allowed, f"{name}, {label}: {peak:.0f} MiB at peak, {idle:.0f} idle"
        assert httpx.get(f"{srv.url}/healthz", timeout=10).status_code == 200  # serving on
    if name == "exporter":  # GET only: a POST is refused, whatever it carries
        assert all(o in (501, "WriteError", "ReadError", "RemoteProtocolError")
                   for o in outcomes.values()), outcomes  # fmt: skip
    else:
        assert outcomes == {
            "no token, Content-Length": 401,
            "no token, chunked": 401,
            "wrong token, chunked": 401,
            "token, Content-Length": 413,
            "token, chunked": 413,
        }
