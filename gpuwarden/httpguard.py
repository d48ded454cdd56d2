"""What every gpuwarden HTTP API checks before a handler sees a request body.

``BodyGuard`` is an ASGI middleware that ``gpuwarden serve`` and the scheduler service both
install, so no route can forget it:

1. a request that carries a body (a ``Content-Length`` above 0, or ``Transfer-Encoding``) is
   authenticated first, from its headers alone: a refused token is answered (401 or 403) before
   one byte of the body is read, so an anonymous client cannot make the server hold anything;
2. a ``Content-Length`` over ``max_body_bytes`` is answered 413 at once, and a chunked body is
   counted as it arrives and answered 413 as soon as it passes the limit, so at most
   ``max_body_bytes`` (plus one chunk) is ever held;
3. the body is JSON no deeper than ``max_json_depth`` (``json_depth``, without recursion), else
   400 naming the depth: Python's parser and pydantic recurse on nesting, and a RecursionError
   would be a 500;
4. the body is read as JSON whatever its ``Content-Type`` says (``curl -d`` sends a form type):
   these APIs take nothing else.

A refused body is never handed to the app: the server (uvicorn) discards what the client still
sends, without holding it, and the client gets the answer once it has sent its request.
``loads_json`` is the same depth-bounded parse for code that reads JSON itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gpuwarden.errors import InputError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Deepest JSON nesting accepted: gpuwarden's own bodies are 4 levels deep at most.
MAX_JSON_DEPTH = 64

_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")  # +1 and -1, shifted by one


def json_depth(body: bytes) -> int:
    """How deeply the arrays and objects of JSON text nest (0 for a scalar), in linear time
    and without recursion (``bench/bench_httpguard.py``). For text that is not JSON the figure
    is a bound on what a parser would recurse into before it failed."""
    import numpy as np

    # escapes out first (an escaped quote ends no string); then all but quotes and brackets;
    # then what lies between quotes, since a bracket inside a string does not nest. Dropping
    # each '""' first is safe (an empty string, or one string ending where the next begins)
    # and leaves few quotes to split on.
    if b"\\" in body:
        body = _ESCAPE.sub(b"", body)
    skeleton = body.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    if b'"' in skeleton:
        skeleton = b"".join(skeleton.split(b'"')[0::2])
    if len(skeleton) <= 1:
        return len(skeleton)
    steps = np.frombuffer(skeleton.translate(_STEP), dtype=np.uint8).astype(np.int64) - 1
    return max(0, int(np.cumsum(steps).max()))


def check_json_depth(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> None:
    """InputError when ``body`` nests deeper than ``max_depth``."""
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return  # too few openings to nest that deep: most bodies stop here
    depth = json_depth(body)
    if depth > max_depth:
        raise InputError(f"body is JSON nested {depth} levels deep; at most {max_depth} are taken")


def loads_json(body: bytes | str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that refuses nesting deeper than ``max_depth`` (InputError) before
    parsing, and turns a parse failure into InputError("body is not JSON: ...")."""
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    check_json_depth(raw, max_depth)
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"body is not JSON: {exc}") from None


#: Checks a request from its headers alone; raises starlette's ``HTTPException`` (401, 403) to
#: refuse it. It is given a ``Request`` without a body: it cannot read one.
Authenticate = Callable[["Request"], None]


class BodyGuard:
    """ASGI middleware: bodies only from whom ``authenticate`` accepts, at most
    ``max_body_bytes`` of them, JSON at most ``max_json_depth`` deep (see the module).

    ``on_refuse(path, status)``: told of every request this refuses (serve counts its webhook's).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticate: Authenticate,
        max_body_bytes: int,
        max_json_depth: int = MAX_JSON_DEPTH,
        on_refuse: Callable[[str, int], None] | None = None,
    ) -> None:
        self.app = app
        self.authenticate = authenticate
        self.max_body_bytes = max_body_bytes
        self.max_json_depth = max_json_depth
        self.on_refuse = on_refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers
        from starlette.exceptions import HTTPException
        from starlette.requests import Request

        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        if "transfer-encoding" not in headers and declared in (None, "0"):
            await self.app(scope, receive, send)  # no body: the routes check tokens themselves
            return
        try:
            self.authenticate(Request(scope))
        except HTTPException as exc:
            await self._refuse(scope, send, exc.status_code, exc.detail, exc.headers)
            return
        limit = self.max_body_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(scope, send, 413, f"body over {limit} bytes")
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away: nobody to answer
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > limit:  # a chunked body (or a lying length): stop reading here
                await self._refuse(scope, send, 413, f"body over {limit} bytes")
                return
        body = b"".join(chunks)  # no copy for a body that came in one piece
        try:
            check_json_depth(body, self.max_json_depth)
        except InputError as exc:
            await self._refuse(scope, send, 400, str(exc))
            return
        await self.app(_as_json(scope), _replay(body, receive), send)

    async def _refuse(
        self,
        scope: Scope,
        send: Send,
        status: int,
        detail: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        from starlette.responses import JSONResponse

        if self.on_refuse is not None:
            self.on_refuse(scope["path"], status)
        response = JSONResponse({"detail": detail}, status_code=status, headers=dict(headers or {}))
        await response(scope, _no_body, send)


def _as_json(scope: Scope) -> Scope:
    """``scope`` with ``content-type: application/json`` in place of what the client said."""
    kept = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
    return {**scope, "headers": [*kept, (b"content-type", b"application/json")]}


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the client's own messages
    (a disconnect, for apps that wait on one)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _no_body() -> Message:
    return {"type": "http.disconnect"}


__all__ = ["MAX_JSON_DEPTH", "BodyGuard", "check_json_depth", "json_depth", "loads_json"]
