"""Outbound hooks reach only what ``hook_allow`` allows, checked on the address connected to:
after DNS, on every redirect, never a cloud metadata address. Real HTTP servers on 127.0.0.x;
DNS answers come from a resolver passed in, the seam ``post_json`` takes."""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.config import SETTINGS_BY_NAME
from gpuwarden.errors import ConfigError, InputError, OutboundRefused
from gpuwarden.outbound import OutboundPolicy, kind_of, post_json
from gpuwarden.scheduler._agent_tasks import TaskTable
from gpuwarden.scheduler.jobs import CheckpointHook

DEFAULT = OutboundPolicy()
LOOPBACK_TOO = OutboundPolicy.parse("public,private,loopback")


@pytest.mark.parametrize(
    ("address", "kind", "allowed"),
    [
        ("169.254.169.254", "metadata", False),  # AWS, GCP, Azure, Oracle
        ("fd00:ec2::254", "metadata", False),  # AWS over IPv6
        ("169.254.170.2", "metadata", False),  # AWS ECS task credentials
        ("100.100.100.200", "metadata", False),  # Alibaba Cloud
        ("::ffff:169.254.169.254", "metadata", False),  # IPv4-mapped
        ("64:ff9b::a9fe:a9fe", "metadata", False),  # NAT64 of 169.254.169.254
        ("2002:a9fe:a9fe::1", "metadata", False),  # 6to4 of it
        ("169.254.1.1", "link-local", False),
        ("fe80::1", "link-local", False),
        ("127.0.0.1", "loopback", False),
        ("127.9.9.9", "loopback", False),
        ("::1", "loopback", False),
        ("::ffff:127.0.0.1", "loopback", False),
        ("0.0.0.0", "special", False),  # reaches the host itself on Linux
        ("::", "special", False),
        ("224.0.0.1", "special", False),
        ("10.1.2.3", "private", True),
        ("172.31.0.9", "private", True),
        ("192.168.1.1", "private", True),
        ("100.64.0.1", "private", True),
        ("fd12::1", "private", True),
        ("8.8.8.8", "public", True),
        ("2606:4700::1111", "public", True),
    ],
)
def test_kinds_and_the_default_policy(address, kind, allowed):
    ip = ipaddress.ip_address(address)
    assert kind_of(ip) == kind
    assert (DEFAULT.refusal(ip) is None) is allowed


def test_the_setting_default_is_the_policy_default_and_entries_are_checked():
    assert OutboundPolicy.parse(SETTINGS_BY_NAME["hook_allow"].default) == DEFAULT
    only = OutboundPolicy.parse("10.20.0.0/16, fd12::/64")
    assert only.refusal(ipaddress.ip_address("10.20.3.4")) is None
    assert only.refusal(ipaddress.ip_address("10.21.0.1")) == (
        "a private address, which hook_allow does not allow"
    )
    assert "public address" in str(only.refusal(ipaddress.ip_address("8.8.8.8")))
    # metadata is refused even when a listed network covers it
    wide = OutboundPolicy.parse("link-local,169.254.0.0/16,0.0.0.0/0")
    assert "cloud metadata" in str(wide.refusal(ipaddress.ip_address("169.254.169.254")))
    assert wide.refusal(ipaddress.ip_address("169.254.1.1")) is None
    with pytest.raises(ConfigError, match="'everything' is neither one of public"):
        OutboundPolicy.parse("public,everything")


# ---- real servers ---------------------------------------------------------------------------


class Hooked(ThreadingHTTPServer):
    """Records each request; answers ``redirect`` (status, Location) when set, else 204."""

    daemon_threads = True

    def __init__(self, host: str) -> None:
        super().__init__((host, 0), _Handler)
        self.requests: list[tuple[str, str, Any]] = []
        self.redirect: tuple[int, str] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.server_address[0]}:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Hooked

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.requests.append((self.command, self.path, body))
        if self.server.redirect:
            status, location = self.server.redirect
            self.send_response(status)
            self.send_header("Location", location)
        else:
            self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[dict[str, Hooked]]:
    started = {"a": Hooked("127.0.0.1"), "b": Hooked("127.0.0.1"), "other": Hooked("127.0.0.2")}
    for s in started.values():
        threading.Thread(target=s.serve_forever, args=(0.05,), daemon=True).start()
    yield started
    for s in started.values():
        s.shutdown()
        s.server_close()


def test_loopback_is_refused_unless_allowed(servers):
    a = servers["a"]
    with pytest.raises(OutboundRefused, match="127.0.0.1 is a loopback address"):
        post_json(f"{a.url}/ckpt", {"job_id": "j"}, policy=DEFAULT)
    assert a.requests == []
    assert post_json(f"{a.url}/ckpt", {"job_id": "j"}, policy=LOOPBACK_TOO) == 204
    assert a.requests == [("POST", "/ckpt", {"job_id": "j"})]


def test_the_address_a_name_resolves_to_is_checked(servers):
    a = servers["a"]
    port = a.server_address[1]
    answers = {"hooks.example": ["169.254.169.254"], "mixed.example": ["10.0.0.5", "127.0.0.1"],
               "fine.example": ["127.0.0.1"]}  # fmt: skip

    def resolve(host: str, port: int, **kw: Any) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)) for ip in answers[host]]

    with pytest.raises(
        OutboundRefused, match="hooks.example resolves to 169.254.169.254, a cloud metadata address"
    ):
        post_json(f"http://hooks.example:{port}/", {}, policy=LOOPBACK_TOO, resolve=resolve)
    with pytest.raises(
        OutboundRefused, match="mixed.example resolves to 127.0.0.1, a loopback address"
    ):
        post_json(f"http://mixed.example:{port}/", {}, policy=DEFAULT, resolve=resolve)
    # a name that passes is connected to at the address checked, with its own Host header
    assert post_json(f"http://fine.example:{port}/x", {"n": 1}, policy=LOOPBACK_TOO,
                     resolve=resolve) == 204  # fmt: skip
    assert a.requests == [("POST", "/x", {"n": 1})]
    for url in ("http://metadata.google.internal/computeMetadata/v1/", "http://[fd00:ec2::254]/"):
        with pytest.raises(OutboundRefused, match="cloud metadata"):
            post_json(url, {}, policy=LOOPBACK_TOO, resolve=resolve)


def test_every_redirect_is_checked_again(servers):
    a, b, other = servers["a"], servers["b"], servers["other"]
    only_a_and_b = OutboundPolicy.parse("127.0.0.1/32")
    a.redirect = (307, f"{other.url}/elsewhere")  # 127.0.0.2: loopback, not listed
    with pytest.raises(OutboundRefused, match="127.0.0.2 is a loopback address"):
        post_json(f"{a.url}/hook", {"k": 1}, policy=only_a_and_b)
    assert other.requests == []
    a.redirect = (302, "http://169.254.169.254/latest/meta-data/iam/")
    with pytest.raises(OutboundRefused, match="cloud metadata"):
        post_json(f"{a.url}/hook", {"k": 1}, policy=OutboundPolicy.parse("0.0.0.0/0"))
    a.redirect = (308, f"{b.url}/moved")  # allowed: followed, POST and body kept
    assert post_json(f"{a.url}/hook", {"k": 2}, policy=only_a_and_b) == 204
    assert b.requests == [("POST", "/moved", {"k": 2})]
    b.redirect = (303, f"{b.url}/moved")  # a loop ends after a few hops
    with pytest.raises(Exception, match="more than 3 redirects"):
        post_json(f"{b.url}/moved", {}, policy=only_a_and_b)


@pytest.mark.parametrize(
    "url",
    ["http://169.254.169.254/latest/meta-data/", "http://metadata.google.internal/",
     "http://[fd00:ec2::254]/", "http://[::ffff:169.254.169.254]/", "https://METADATA.GOOG./x"],
)  # fmt: skip
def test_a_job_cannot_name_a_metadata_address_as_its_hook(url):
    with pytest.raises(InputError, match="cloud metadata"):
        CheckpointHook("url", url).check_new()
    CheckpointHook("url", url)  # a job stored before this check still loads


def test_the_agent_delivers_a_url_hook_only_where_allowed(servers, tmp_path):
    a = servers["a"]
    hook = {"kind": "url", "target": f"{a.url}/ckpt"}
    script = "import time; print('up', flush=True); time.sleep(30)"
    for name, policy in (("refused", None), ("allowed", LOOPBACK_TOO)):
        table = TaskTable(tmp_path / name, kill_after_s=0.1, hook_policy=policy)
        table.start({"job_id": name, "attempt": 1, "task": 0, "command": [sys.executable, "-c",
                     script], "gpus": [], "env": {}})  # fmt: skip
        log, deadline = Path(table.tasks[(name, 1, 0)].log), time.monotonic() + 10
        while "up" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        table.checkpoint({"job_id": name, "attempt": 1, "task": 0, "hook": hook})
        table.stop({"job_id": name, "attempt": 1, "task": 0})
        if policy is None:
            assert a.requests == []
            assert "checkpoint hook refused: 127.0.0.1 is a loopback address" in log.read_text()
        else:
            assert a.requests == [("POST", "/ckpt", {"job_id": name, "attempt": 1, "task": 0})]
