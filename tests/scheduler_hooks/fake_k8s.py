"""A local HTTP server answering the Kubernetes API calls gpuwarden makes, as the API documents.

No real API server runs in CI (Debian 12 ships none, nothing can be downloaded), so this server
keeps to the documented REST semantics for the calls we use, driven by the real ``kubernetes``
client:

- ``GET`` an object or a collection (``/api/v1/nodes``, ``/api/v1/pods``,
  ``/api/v1/namespaces/NS/pods``, ``/apis/GROUP/VERSION/...``), lists filtered by
  ``labelSelector`` (``k=v``, ``k!=v``, ``k``, ``!k``) and ``fieldSelector`` (``spec.nodeName``,
  ``status.phase``, ``metadata.name``, ``metadata.namespace``; ``=`` and ``!=``);
- ``POST`` creates (409 ``AlreadyExists`` when the name is taken, 404 when its namespace does
  not exist), ``DELETE`` deletes (404 ``NotFound``);
- ``PATCH`` with ``application/merge-patch+json`` (RFC 7386: ``null`` deletes, lists replaced
  whole) or ``application/apply-patch+yaml`` (server-side apply: needs ``fieldManager``, else
  422; creates a missing object; the fake merges the applied configuration like a merge patch
  and does not track field ownership). A ``metadata.resourceVersion`` in the body that is not
  the object's current one is a 409 ``Conflict``. Other patch types answer 415.
- Every write bumps ``resourceVersion``; errors are the API server's ``Status`` object.

Every PATCH is recorded as ``(name, content type, body)``; every request as ``(method, path)``.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

#: kind -> (API prefix, plural, namespaced): what the tests create through ``add``.
KINDS: dict[str, tuple[str, str, bool]] = {
    "Node": ("/api/v1", "nodes", False),
    "Namespace": ("/api/v1", "namespaces", False),
    "Pod": ("/api/v1", "pods", True),
    "ResourceQuota": ("/api/v1", "resourcequotas", True),
    "LimitRange": ("/api/v1", "limitranges", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "StorageClass": ("/apis/storage.k8s.io/v1", "storageclasses", False),
    "PriorityClass": ("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "DeviceTaintRule": ("/apis/resource.k8s.io/v1alpha3", "devicetaintrules", False),
}


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


def node(
    name: str,
    *,
    labels=None,
    annotations=None,
    taints=None,
    unschedulable=None,
    allocatable=None,
) -> dict:
    spec: dict[str, Any] = {}
    if taints is not None:
        spec["taints"] = taints
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    out = {
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
    if allocatable is not None:
        out["status"] = {"allocatable": allocatable, "capacity": allocatable}
    return out


def _split(path: str) -> tuple[str, str | None, str, str | None] | None:
    """(api prefix, namespace, plural, name) of a REST path, None if it is not one."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        prefix, rest = "/api/v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        prefix, rest = "/" + "/".join(parts[:3]), parts[3:]
    else:
        return None
    if len(rest) >= 3 and rest[0] == "namespaces":
        return prefix, rest[1], rest[2], rest[3] if len(rest) > 3 else None
    if len(rest) in (1, 2):
        return prefix, None, rest[0], rest[1] if len(rest) > 1 else None
    return None


def _field(obj: dict, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _matches(obj: dict, labels: str, fields: str) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (t.strip() for t in labels.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if have.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if have.get(k.rstrip("=")) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in have:
                return False
        elif term not in have:
            return False
    for term in filter(None, (t.strip() for t in fields.split(","))):
        neg = "!=" in term
        k, v = term.split("!=" if neg else "=", 1)
        if (_field(obj, k.rstrip("=")) == v) == neg:
            return False
    return True


class FakeKubernetes:
    def __init__(self, nodes: list[dict] = (), objects: list[dict] = ()) -> None:  # type: ignore[assignment]
        # collection key "(prefix, namespace, plural)" -> name -> object
        self.store: dict[tuple[str, str | None, str], dict[str, dict]] = {}
        self.patches: list[tuple[str, str, dict]] = []  # (name, content type, body)
        self.requests: list[tuple[str, str]] = []  # (method, path with query)
        self.gets = 0
        self.auth: set[str] = set()
        self.edit_before_next_patch = False  # simulate another client writing in between
        self._rv = itertools.count(100)
        self._lock = threading.Lock()
        for obj in [*nodes, *objects]:
            self.add(obj)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _begin(self, method: str) -> tuple[Any, dict[str, list[str]]]:
                fake.auth.add(self.headers.get("Authorization", ""))
                url = urlsplit(self.path)
                fake.requests.append((method, self.path))
                return _split(url.path), parse_qs(url.query)

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n)) if n else None

            def do_GET(self) -> None:
                where, query = self._begin("GET")
                with fake._lock:
                    fake.gets += 1
                    if where is None:
                        return self._status(404, "NotFound", "the server could not find it")
                    prefix, ns, plural, name = where
                    if name is not None:
                        found = fake.store.get((prefix, ns, plural), {}).get(name)
                        if found is None:
                            return self._status(404, "NotFound", f'{plural} "{name}" not found')
                        return self._send(200, found)
                    labels = (query.get("labelSelector") or [""])[0]
                    fields = (query.get("fieldSelector") or [""])[0]
                    items = [
                        o
                        for (p, n, pl), objs in fake.store.items()
                        if p == prefix and pl == plural and (ns is None or n == ns)
                        for o in objs.values()
                        if _matches(o, labels, fields)
                    ]
                    kind = items[0]["kind"] if items else plural.title()
                    self._send(
                        200,
                        {
                            "kind": f"{kind}List",
                            "apiVersion": prefix.removeprefix("/api/").removeprefix("/apis/"),
                            "metadata": {"resourceVersion": str(next(fake._rv))},
                            "items": items,
                        },
                    )

            def do_POST(self) -> None:
                where, _ = self._begin("POST")
                body = self._body()
                with fake._lock:
                    if where is None or where[3] is not None:
                        return self._status(405, "MethodNotAllowed", "POST to a collection")
                    prefix, ns, plural, _ = where
                    name = body["metadata"]["name"]
                    if ns is not None and ns not in fake.store.get(
                        ("/api/v1", None, "namespaces"), {}
                    ):
                        return self._status(404, "NotFound", f'namespaces "{ns}" not found')
                    coll = fake.store.setdefault((prefix, ns, plural), {})
                    if name in coll:
                        return self._status(
                            409, "AlreadyExists", f'{plural} "{name}" already exists'
                        )
                    coll[name] = fake._stamp(body, ns)
                    self._send(201, coll[name])

            def do_DELETE(self) -> None:
                where, _ = self._begin("DELETE")
                with fake._lock:
                    if where is None or where[3] is None:
                        return self._status(405, "MethodNotAllowed", "DELETE of a collection")
                    prefix, ns, plural, name = where
                    gone = fake.store.get((prefix, ns, plural), {}).pop(name, None)
                    if gone is None:
                        return self._status(404, "NotFound", f'{plural} "{name}" not found')
                    self._send(200, gone)

            def do_PATCH(self) -> None:
                where, query = self._begin("PATCH")
                body = self._body()
                ctype = self.headers.get("Content-Type", "")
                with fake._lock:
                    if where is None or where[3] is None:
                        return self._status(405, "MethodNotAllowed", "PATCH of a collection")
                    prefix, ns, plural, name = where
                    fake.patches.append((name, ctype, body))
                    coll = fake.store.setdefault((prefix, ns, plural), {})
                    current = coll.get(name)
                    if ctype == "application/apply-patch+yaml":
                        if not query.get("fieldManager"):
                            return self._status(
                                422,
                                "Invalid",
                                "fieldManager: Required value: is required for apply patch",
                            )
                        if current is None:
                            if ns is not None and not fake._has_namespace(ns):
                                return self._status(404, "NotFound", f'namespaces "{ns}" not found')
                            coll[name] = fake._stamp(body, ns)
                            return self._send(201, coll[name])
                    elif ctype != "application/merge-patch+json":
                        return self._status(415, "UnsupportedMediaType", ctype)
                    if current is None:
                        return self._status(404, "NotFound", f'{plural} "{name}" not found')
                    if fake.edit_before_next_patch:
                        fake.edit_before_next_patch = False
                        current["metadata"].setdefault("labels", {})["someone-else"] = "was-here"
                        fake._bump(current)
                    want_rv = (body.get("metadata") or {}).get("resourceVersion")
                    if want_rv is not None and want_rv != current["metadata"]["resourceVersion"]:
                        return self._status(
                            409, "Conflict", "the object has been modified; please retry"
                        )
                    updated = merge_patch(current, body)
                    updated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    fake._bump(updated)
                    coll[name] = updated
                    self._send(200, updated)

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
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def nodes(self) -> dict[str, dict]:
        return self.store.setdefault(("/api/v1", None, "nodes"), {})

    def objects(self, kind: str, namespace: str | None = None) -> dict[str, dict]:
        prefix, plural, namespaced = KINDS[kind]
        return self.store.get((prefix, namespace if namespaced else None, plural), {})

    def add(self, obj: dict) -> dict:
        prefix, plural, namespaced = KINDS[obj["kind"]]
        ns = (obj.get("metadata") or {}).get("namespace") if namespaced else None
        coll = self.store.setdefault((prefix, ns, plural), {})
        coll[obj["metadata"]["name"]] = obj = copy.deepcopy(obj)
        obj["metadata"].setdefault("resourceVersion", "1")
        return obj

    def _has_namespace(self, ns: str) -> bool:
        return ns in self.store.get(("/api/v1", None, "namespaces"), {})

    def _stamp(self, obj: dict, ns: str | None) -> dict:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if ns is not None:
            meta["namespace"] = ns
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("uid", f"uid-{meta['resourceVersion']}")
        return obj

    @staticmethod
    def _bump(n: dict) -> None:
        n["metadata"]["resourceVersion"] = str(int(n["metadata"]["resourceVersion"]) + 1)

    def api_client(self, token: str = "t0k"):  # -> kubernetes.client.ApiClient
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(cfg)

    def api(self, token: str = "t0k"):  # -> kubernetes.client.CoreV1Api
        from kubernetes import client

        return client.CoreV1Api(self.api_client(token))

    def kubeconfig(self, path, token: str):  # -> Path
        """A kubeconfig file at ``path`` for this server and a bearer ``token``."""
        path.write_text(
            f"""apiVersion: v1
kind: Config
clusters: [{{name: test, cluster: {{server: "{self.url}"}}}}]
users: [{{name: u, user: {{token: {token}}}}}]
contexts: [{{name: test, context: {{cluster: test, user: u}}}}]
current-context: test
"""
        )
        return path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
