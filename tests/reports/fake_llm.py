"""A local HTTP server speaking OpenAI's chat-completions protocol, for the real openai client.

``POST /v1/chat/completions`` answers, in script order (then the last ``default``):

- ``Reply(text, prompt_tokens, completion_tokens)``: the text; streamed as server-sent events
  (``chat.completion.chunk`` objects, a final chunk with ``finish_reason``, a usage chunk when
  ``stream_options.include_usage`` asks, then ``data: [DONE]``) when the request streams, else
  one ``chat.completion`` object with ``usage``;
- ``Status(code, retry_after)``: an error body as OpenAI sends it (429 rate_limit_exceeded,
  500 server_error), with ``Retry-After`` when given;
- ``Hang(seconds)``: no answer for that long (the client's timeout fires first).

``FakeLLM(rejects=("stream_options",))`` answers 400 to any request that carries one of those
body fields, before the script, as vLLM does for a parameter it does not know (pydantic's
``extra_forbidden``). ``Reply(..., usage=False)`` leaves the token counts out, as servers that
do not report them do.

Every request is kept (path, headers, JSON body) so tests can read what was sent.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Reply:
    text: str
    prompt_tokens: int = 1200
    completion_tokens: int = 180
    usage: bool = True


@dataclass(frozen=True)
class Status:
    code: int
    retry_after: float | None = None


@dataclass(frozen=True)
class Hang:
    seconds: float


class FakeLLM:
    def __init__(
        self,
        default: Reply | Status | Hang = Reply("SUMMARY:\nNothing."),
        rejects: tuple[str, ...] = (),
    ) -> None:
        self.script: list[Reply | Status | Hang] = []
        self.default = default
        self.rejects = rejects
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                with fake._lock:
                    fake.requests.append(
                        {
                            "path": self.path,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "body": body,
                        }
                    )
                    refused = [k for k in fake.rejects if k in body]
                    step = fake.script.pop(0) if fake.script and not refused else fake.default
                if refused:
                    return self._json(400, {
                        "object": "error", "type": "BadRequestError", "param": None, "code": 400,
                        "message": str([{"type": "extra_forbidden", "loc": ("body", k),
                                         "msg": "Extra inputs are not permitted"} for k in refused]),
                    })  # fmt: skip
                if self.path != "/v1/chat/completions":
                    return self._json(
                        404, {"error": {"message": "not found", "type": "invalid_request_error"}}
                    )
                if isinstance(step, Hang):
                    time.sleep(step.seconds)
                    return self._json(200, {"error": "too late"})
                if isinstance(step, Status):
                    kind = {429: "rate_limit_exceeded", 400: "invalid_request_error"}.get(
                        step.code, "server_error"
                    )
                    headers = (
                        {"Retry-After": f"{step.retry_after:g}"}
                        if step.retry_after is not None
                        else {}
                    )
                    return self._json(
                        step.code, {"error": {"message": kind, "type": kind, "code": kind}}, headers
                    )
                if body.get("stream"):
                    return self._stream(step, body)
                return self._json(200, {
                    "id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", ""),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": step.text}}],
                    **({"usage": _usage(step)} if step.usage else {}),
                })  # fmt: skip

            def _stream(self, step: Reply, body: dict) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                base = {"id": "chatcmpl-1", "object": "chat.completion.chunk",
                        "created": int(time.time()), "model": body.get("model", "")}  # fmt: skip
                words = step.text.split(" ")
                pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
                events = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                "finish_reason": None}]}]  # fmt: skip
                events += [{**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
                           for p in pieces]  # fmt: skip
                events.append(
                    {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                )
                if step.usage and (body.get("stream_options") or {}).get("include_usage"):
                    events.append({**base, "choices": [], "usage": _usage(step)})
                for e in events:
                    self._chunk(f"data: {json.dumps(e)}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _json(
                self, code: int, payload: dict, headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (a timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def prompts(self) -> list[str]:
        return [
            "\n".join(m["content"] for m in r["body"].get("messages", [])) for r in self.requests
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


def _usage(step: Reply) -> dict:
    return {"prompt_tokens": step.prompt_tokens, "completion_tokens": step.completion_tokens,
            "total_tokens": step.prompt_tokens + step.completion_tokens}  # fmt: skip
