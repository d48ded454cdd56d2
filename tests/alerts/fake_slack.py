"""A local HTTP server speaking Slack's incoming-webhook protocol, and the Web API's external
file upload.

Webhook: POST a JSON message; Slack answers ``200 ok`` (text/html), ``400 invalid_blocks`` for
Block Kit it cannot render, ``429`` with ``Retry-After`` when rate-limited, ``500`` on its own
trouble. The server plays a scripted list of answers, then ``ok``, and keeps every accepted
message.

Upload (``/api/``, bot token ``BOT_TOKEN`` in the Authorization header, else ``invalid_auth``):
``files.getUploadURLExternal`` (filename, length) returns an ``upload_url`` on this server and a
``file_id``; a POST of the bytes there answers ``200 OK - <length>``; then
``files.completeUploadExternal`` (files: JSON of ids and titles, channel_id) shares them, and
only files whose bytes arrived with the announced length complete. ``uploads`` keeps them.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

SECRET_PATH = "/services/T0000/B0000/s3cr3tT0k3nXyZ"
BOT_TOKEN = "xoxb-0000-test-bot-token"


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
        self.pending: dict[str, dict] = {}  # file_id -> filename, length, data
        self.uploads: list[dict] = []  # completed: filename, title, channel, data
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with fake._lock:
                    fake.requests += 1
                    if self.path.startswith(("/api/", "/upload/")):
                        return self._api(body)
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

            def _api(self, body: bytes) -> None:
                url = urlsplit(self.path)
                if url.path.startswith("/upload/"):
                    entry = fake.pending.get(url.path.rsplit("/", 1)[-1])
                    if entry is None:
                        return self._answer(404, {}, "unknown upload")
                    entry["data"] = body
                    return self._answer(200, {}, f"OK - {len(body)}")
                if self.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
                    return self._json({"ok": False, "error": "invalid_auth"})
                args = {k: v[-1] for k, v in parse_qs(url.query).items()}
                ctype = self.headers.get("Content-Type", "")
                if "json" in ctype and body:
                    args.update(json.loads(body))
                elif body:
                    args.update({k: v[-1] for k, v in parse_qs(body.decode()).items()})
                method = url.path.removeprefix("/api/")
                if method == "files.getUploadURLExternal":
                    if not args.get("filename") or not str(args.get("length", "")).isdigit():
                        return self._json({"ok": False, "error": "invalid_arguments"})
                    file_id = f"F{len(fake.pending) + 1:06d}"
                    fake.pending[file_id] = {
                        "filename": args["filename"],
                        "length": int(args["length"]),
                    }
                    host, port = self.server.server_address[:2]
                    return self._json({"ok": True, "file_id": file_id,
                                       "upload_url": f"http://{host}:{port}/upload/v1/{file_id}"})  # fmt: skip
                if method == "files.completeUploadExternal":
                    files = json.loads(args.get("files", "[]"))
                    done = []
                    for f in files:
                        entry = fake.pending.get(f.get("id", ""))
                        if entry is None or len(entry.get("data", b"")) != entry["length"]:
                            return self._json({"ok": False, "error": "file_upload_not_complete"})
                        done.append({"id": f["id"], "title": f.get("title", entry["filename"])})
                        fake.uploads.append({**entry, "title": f.get("title"),
                                             "channel": args.get("channel_id")})  # fmt: skip
                    return self._json({"ok": True, "files": done})
                return self._json({"ok": False, "error": "unknown_method"})

            def _json(self, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

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
        self.api_url = f"http://127.0.0.1:{self.server.server_port}/api/"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
