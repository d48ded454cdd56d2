"""A local HTTP server that answers the Kubernetes API calls the tagger makes.

``GET /api/v1/nodes/{name}`` and ``PATCH /api/v1/nodes/{name}`` with a JSON merge patch
(RFC 7386, as the API server applies ``application/merge-patch+json``): ``null`` deletes a key,
lists are replaced whole, and a ``metadata.resourceVersion`` that is not the node's current one
is a 409 Conflict, as on a real API server. Every PATCH is recorded with its content type and
body; errors answer the API server's ``Status`` object.
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def node(name: str, *, labels=None, annotations=None, taints=None, unschedulable=None) -> dict:
    spec: dict[str, Any] = {}
    if taints is not None:
        spec["taints"] = taints
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "labels": labels or {"kubernetes.io/hostname": name},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


class FakeKubernetes:
    def __init__(self, nodes: list[dict]) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.patches: list[tuple[str, str, dict]] = []  # (node, content type, body)
        self.gets = 0
        self.auth: set[str] = set()
        self.edit_before_next_patch = False  # simulate another client writing in between
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _node_name(self) -> str | None:
                prefix = "/api/v1/nodes/"
                path = self.path.split("?", 1)[0]
                return path[len(prefix) :] if path.startswith(prefix) else None

            def do_GET(self) -> None:
                fake.auth.add(self.headers.get("Authorization", ""))
                name = self._node_name()
                with fake._lock:
                    fake.gets += 1
                    found = fake.nodes.get(name or "")
                    if found is None:
                        return self._status(404, "NotFound", f'nodes "{name}" not found')
                    self._send(200, found)

            def do_PATCH(self) -> None:
                fake.auth.add(self.headers.get("Authorization", ""))
                name = self._node_name() or ""
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                ctype = self.headers.get("Content-Type", "")
                with fake._lock:
                    fake.patches.append((name, ctype, body))
                    current = fake.nodes.get(name)
                    if current is None:
                        return self._status(404, "NotFound", f'nodes "{name}" not found')
                    if ctype != "application/merge-patch+json":
                        return self._status(415, "UnsupportedMediaType", ctype)
                    if fake.edit_before_next_patch:
                        fake.edit_before_next_patch = False
                        current["metadata"]["labels"]["someone-else"] = "was-here"
                        self._bump(current)
                    want_rv = (body.get("metadata") or {}).get("resourceVersion")
                    if want_rv is not None and want_rv != current["metadata"]["resourceVersion"]:
                        return self._status(
                            409, "Conflict", "the object has been modified; please retry"
                        )
                    updated = merge_patch(current, body)
                    updated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    self._bump(updated)
                    fake.nodes[name] = updated
                    self._send(200, updated)

            @staticmethod
            def _bump(n: dict) -> None:
                n["metadata"]["resourceVersion"] = str(int(n["metadata"]["resourceVersion"]) + 1)

            def _status(self, code: int, reason: str, message: str) -> None:
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
                self._send(code, {**status, "reason": reason, "message": message, "code": code})

            def _send(self, code: int, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def api(self, token: str = "t0k"):  # -> kubernetes.client.CoreV1Api
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
        return client.CoreV1Api(client.ApiClient(cfg))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
