"""The HTTP helpers every remote store shares (``gpuwarden.store._remote``), against a local
HTTP server that answers as scripted."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuwarden.errors import ConfigError, StoreRejected, StoreUnavailable
from gpuwarden.store._remote import RemoteHttp, mask, parse_remote_url, token_header


class Script:
    """What the server answers, in order: (status, headers, body); the last one repeats."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, str], bytes]] = []
        self.seen: list[tuple[str, str, dict[str, str]]] = []


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            script.seen.append((self.command, self.path, dict(self.headers)))
            status, headers, body = (
                script.answers.pop(0) if len(script.answers) > 1 else script.answers[0]
            )
            if status == 0:  # no answer in time
                time.sleep(float(body))
                status, body = 200, b"late"
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    httpd.shutdown()
    httpd.server_close()


def _http(base: str, **kw: object) -> tuple[RemoteHttp, list[float]]:
    slept: list[float] = []
    return RemoteHttp(base, what="Test", sleep=slept.append, **kw), slept  # type: ignore[arg-type]


def test_5xx_and_429_are_retried_with_growing_backoff(server: tuple[str, Script]) -> None:
    base, script = server
    script.answers = [
        (503, {}, b"busy"),
        (429, {"Retry-After": "2"}, b"slow down"),
        (502, {}, b"bad gateway"),
        (200, {}, b"ok"),
    ]
    http, slept = _http(base, retries=4)
    assert http.request("GET", "/x").text == "ok"
    assert len(script.seen) == 4 and http.retried == 3
    assert 0.375 <= slept[0] <= 0.625  # BACKOFF_S with jitter
    assert 1.5 <= slept[1] <= 2.5  # the server's Retry-After
    assert slept[2] > slept[0]


def test_a_server_that_keeps_failing_gives_one_line(server: tuple[str, Script]) -> None:
    base, script = server
    script.answers = [(503, {}, json.dumps({"status": "error", "error": "overloaded"}).encode())]
    http, _ = _http(base, retries=2)
    with pytest.raises(StoreUnavailable) as err:
        http.request("GET", "/x")
    assert (
        str(err.value) == f"Test at {base}: HTTP 503 Service Unavailable after 3 tries: overloaded"
    )
    assert len(script.seen) == 3


def test_a_4xx_is_not_retried_and_says_what_the_server_said(server: tuple[str, Script]) -> None:
    base, script = server
    body = {"status": "error", "errorType": "bad_data", "error": 'parse error at char 4: "("'}
    script.answers = [(400, {}, json.dumps(body).encode())]
    http, slept = _http(base)
    with pytest.raises(StoreRejected, match="HTTP 400 Bad Request.*parse error at char 4") as err:
        http.request("GET", "/api/v1/query")
    assert err.value.status == 400 and slept == [] and len(script.seen) == 1


def test_refused_credentials_say_so_without_the_password(server: tuple[str, Script]) -> None:
    base, script = server
    script.answers = [(401, {}, b"Unauthorized\n")]
    url = parse_remote_url(
        base.replace("http://", "prom://alice:hunter2@") + "?token=abc",
        schemes={"prom": ("http", 9090)},
        params=("token",),
    )
    http, _ = _http(url.base, auth=url.auth, shown=url.shown)
    with pytest.raises(StoreRejected) as err:
        http.request("GET", "/x")
    line = str(err.value)
    assert "refused the credentials (HTTP 401)" in line and "\n" not in line
    assert "hunter2" not in line and "abc" not in line and "alice:***@" in line
    assert script.seen[0][2]["Authorization"].startswith("Basic ")


def test_an_unreachable_server_is_one_line_after_the_retries() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    http, slept = _http(f"http://127.0.0.1:{port}", retries=1, timeout_s=2)
    with pytest.raises(StoreUnavailable, match=r"cannot reach it \(connection refused\)"):
        http.request("GET", "/x")
    assert len(slept) == 1


def test_a_bearer_token_comes_from_the_environment(
    server: tuple[str, Script], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, script = server
    script.answers = [(200, {}, b"ok")]
    monkeypatch.setenv("GPUWARDEN_TEST_TOKEN", "s3cret")
    http, _ = _http(base, headers=token_header("GPUWARDEN_TEST_TOKEN"))
    http.request("GET", "/x")
    assert script.seen[0][2]["Authorization"] == "Bearer s3cret"
    monkeypatch.delenv("GPUWARDEN_TEST_TOKEN")
    assert token_header("GPUWARDEN_TEST_TOKEN") == {}


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("prom://", "no host"),
        ("prom://host:notaport", "not a usable URL"),
        ("prom://host:9090?retries=3&colour=blue", "unknown parameter 'colour'; known: retries"),
        ("other://host", "scheme must be one of prom"),
    ],
)
def test_a_bad_url_is_one_line(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        parse_remote_url(url, schemes={"prom": ("http", 9090)}, params=("retries",))
    assert "\n" not in str(err.value)


def test_urls_are_split_and_masked() -> None:
    url = parse_remote_url(
        "prom+https://bob:pw@[::1]/prefix/?retries=2",
        schemes={"prom+https": ("https", 443)},
        params=("retries",),
    )
    assert url.base == "https://[::1]:443/prefix" and url.auth == ("bob", "pw")
    assert url.params == {"retries": "2"} and "pw" not in url.shown
    assert mask("http://h:1/?token=x&step=2") == "http://h:1/?token=***&step=2"


def test_a_server_that_does_not_answer_in_time_is_tried_again_then_one_line(
    server: tuple[str, Script],
) -> None:
    base, script = server
    script.answers = [(0, {}, b"1.0")]
    http, slept = _http(base, retries=1, timeout_s=0.3)
    with pytest.raises(StoreUnavailable, match=r"no answer within 0.3 s \(2 tries\)"):
        http.request("GET", "/x")
    assert len(script.seen) == 2 and len(slept) == 1
