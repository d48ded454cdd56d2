"""``httpguard``: JSON depth without recursion, and the ASGI guard that refuses a body on its
headers (token, length) before reading it, and a chunked one as soon as it passes the limit."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.exceptions import HTTPException

from gpuwarden.errors import InputError
from gpuwarden.httpguard import MAX_JSON_DEPTH, BodyGuard, json_depth, loads_json

# strings full of what a naive bracket count would trip on
tricky_text = st.text(alphabet='[]{}"\\,: aé\n\x00', max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | tricky_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(tricky_text, inner, max_size=4),
    max_leaves=30,
)


def depth(value: Any) -> int:
    """The reference: nesting of a parsed value, by recursion."""
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(value=json_values, ascii_only=st.booleans(), indent=st.sampled_from([None, 1]))
def test_json_depth_matches_the_parsed_nesting(value, ascii_only, indent):
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode()
    assert json_depth(text) == depth(value)


def test_deep_nesting_is_measured_without_recursion():
    deep = b"[" * 1_000_000 + b"]" * 1_000_000
    assert json_depth(deep) == 1_000_000
    assert json_depth(b'{"a": "[[[[[[", "b": [["\\"[["]]}') == 3
    with pytest.raises(InputError, match=f"nested 1000000 levels deep; at most {MAX_JSON_DEPTH}"):
        loads_json(deep)
    with pytest.raises(InputError, match="body is not JSON"):
        loads_json(b"[1, 2")
    assert loads_json('{"a": [1]}') == {"a": [1]}


# ---- the ASGI guard, driven message by message ----------------------------------------------


class Exchange:
    """One request through ``BodyGuard`` around an app that echoes the body it got."""

    def __init__(self, headers: dict[str, str], chunks: list[bytes], *, token_ok: bool) -> None:
        self.headers = [(k.encode(), v.encode()) for k, v in headers.items()]
        self.chunks = chunks
        self.token_ok = token_ok
        self.received = 0  # body messages the guard asked for
        self.sent: list[dict[str, Any]] = []
        self.app_body: bytes | None = None
        self.app_type: str | None = None

    def authenticate(self, request: Any) -> None:
        if not self.token_ok:
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})

    async def receive(self) -> dict[str, Any]:
        i = self.received
        self.received += 1
        if i >= len(self.chunks):
            return {"type": "http.disconnect"}
        return {
            "type": "http.request",
            "body": self.chunks[i],
            "more_body": i + 1 < len(self.chunks),
        }

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.app_body = message["body"]
        self.app_type = dict(scope["headers"]).get(b"content-type", b"").decode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    def run(self, limit: int = 100) -> int:
        guard = BodyGuard(self.app, authenticate=self.authenticate, max_body_bytes=limit)
        scope = {"type": "http", "method": "POST", "path": "/x", "headers": self.headers,
                 "query_string": b"", "root_path": ""}  # fmt: skip
        asyncio.run(guard(scope, self.receive, self.send))
        return int(self.sent[0]["status"])

    @property
    def detail(self) -> str:
        return str(json.loads(self.sent[1]["body"])["detail"])


@pytest.mark.parametrize(
    "headers", [{"content-length": "80000000"}, {"transfer-encoding": "chunked"}]
)
def test_a_refused_token_is_answered_before_any_body_is_read(headers):
    ex = Exchange(headers, [b"x" * 1000] * 5, token_ok=False)
    assert ex.run() == 401
    assert ex.received == 0 and ex.app_body is None
    assert (b"www-authenticate", b"Bearer") in ex.sent[0]["headers"]


def test_a_declared_length_over_the_limit_is_413_before_reading():
    ex = Exchange({"content-length": "101"}, [b"x" * 101], token_ok=True)
    assert ex.run(limit=100) == 413 and ex.received == 0
    assert ex.detail == "body over 100 bytes"


def test_a_chunked_body_is_cut_off_as_soon_as_it_passes_the_limit():
    ex = Exchange({"transfer-encoding": "chunked"}, [b"x" * 40] * 1000, token_ok=True)
    assert ex.run(limit=100) == 413
    assert ex.received == 3 and ex.app_body is None  # 120 bytes read of 40,000


def test_too_deep_json_is_400_and_any_body_is_handed_on_as_json():
    deep = Exchange({"content-length": "200"}, [b"[" * 100 + b"]" * 100], token_ok=True)
    assert deep.run(limit=1000) == 400 and "nested 100 levels deep" in deep.detail
    assert deep.app_body is None
    # curl -d says form-urlencoded; the app gets the body, read as JSON
    form = {"content-length": "8", "content-type": "application/x-www-form-urlencoded"}
    ok = Exchange(form, [b'{"a": 1}'], token_ok=True)
    assert ok.run() == 200
    assert (ok.app_body, ok.app_type) == (b'{"a": 1}', "application/json")


def test_a_request_without_a_body_goes_straight_to_the_app():
    ex = Exchange({}, [b""], token_ok=False)  # the routes check their own tokens
    assert ex.run() == 200 and ex.app_body == b""
