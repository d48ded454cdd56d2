"""A local HTTP server speaking Slack's incoming-webhook protocol.

POST a JSON message; Slack answers ``200 ok`` (text/html), ``400 invalid_blocks`` for Block Kit
it cannot render, ``429`` with ``Retry-After`` when rate-limited, ``500`` on its own trouble. The
server plays a scripted list of answers, then ``ok``, and keeps every accepted message.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET_PATH = "/services/T0000/B0000/s3cr3tT0k3nXyZ"


def invalid_blocks(blocks: list[dict]) -> str | None:
    """The Block Kit rules Slack enforces that our messages could break."""
    if len(blocks) > 50:
        return "more than 50 blocks"
    for b in blocks:
        if b.get("type") == "header" and len(b["text"]["text"]) > 150:
            return "header over 150 characters"
        if b.get("type") == "section":
            fields = b.get("fields", [])
            if len(fields) > 10 or any(len(f["text"]) > 2000 for f in fields):
                return "section fields too many or too long"
            if len(b.get("text", {}).get("text", "")) > 3000:
                return "section text over 3000 characters"
            if "text" not in b and not fields:
                return "section without text or fields"
    return None


class FakeSlack:
    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, str], str]] = []
        self.requests = 0
        self.messages: list[dict] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with fake._lock:
                    fake.requests += 1
                    if self.path != SECRET_PATH:
                        return self._answer(404, {}, "no_service")
                    if fake.script:
                        return self._answer(*fake.script.pop(0))
                    msg = json.loads(body)
                    problem = invalid_blocks(msg.get("blocks", []))
                    if problem:
                        return self._answer(400, {}, f"invalid_blocks: {problem}")
                    fake.messages.append(msg)
                    self._answer(200, {}, "ok")

            def _answer(self, code: int, headers: dict[str, str], text: str) -> None:
                data = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}{SECRET_PATH}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
