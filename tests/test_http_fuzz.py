"""Property test of every HTTP route of ``gpuwarden serve`` and the scheduler service, in
process through httpx's ASGI transport (a chunked body arrives in pieces, as over a socket):
random methods, paths, query strings, headers, tokens and bodies. Never a 5xx, never a
traceback in the answer; a body sent without a token the service knows is a 401 or 403; and
afterwards each service still answers (serve's /metrics still parses)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gpuwarden.alerts.base import RiskAssessment
from gpuwarden.scheduler._auth import TokenBook, node_token
from gpuwarden.scheduler.api import create_app as scheduler_app
from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.state import SchedulerDB
from gpuwarden.serve.api import create_app as serve_app
from gpuwarden.serve.service import RiskService
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import GpuId

SERVE_TOKEN, TEAM, ADMIN, SECRET = "fuzz-serve-token", "fuzz-team-a", "fuzz-admin", "s" * 20
GPUS = [GpuId("node1", 0, "GPU-a"), GpuId('no"de\\2', 3, "GPU-\nb", model="x{y}")]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))


@dataclass
class Api:
    """An app behind httpx's ASGI transport, driven from sync tests on one event loop."""

    app: FastAPI
    tokens: list[str]  # tokens some route takes
    path_values: list[str]  # realistic values for path parameters
    loop: asyncio.AbstractEventLoop
    client: httpx.AsyncClient

    @classmethod
    def over(cls, app: FastAPI, tokens: list[str], path_values: list[str]) -> Api:
        loop = asyncio.new_event_loop()
        transport = httpx.ASGITransport(app=app)  # raises what the app raises: no 500 hides it
        client = httpx.AsyncClient(transport=transport, base_url="http://api")
        return cls(app, tokens, path_values, loop, client)

    @property
    def routes(self) -> list[APIRoute]:
        return [r for r in self.app.routes if isinstance(r, APIRoute)]

    def send(self, req: dict[str, Any]) -> httpx.Response:
        body, content = req["body"], None
        if body is not None:
            content = _pieces(body) if req["chunked"] else body
        call = self.client.request(req["method"], req["url"], params=req["params"],
                                   headers=req["headers"], content=content)  # fmt: skip
        return self.loop.run_until_complete(call)

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


async def _pieces(body: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(body), 64):
        yield body[i : i + 64]


# ---- the two services -----------------------------------------------------------------------


def _risks(store: Any, at: float) -> list[RiskAssessment]:
    return [RiskAssessment(GPUS[0], at, 0.91, reasons=("SBE rate up",)),
            RiskAssessment(GPUS[1], at, float("nan"))]  # fmt: skip


@pytest.fixture(scope="module")
def serve() -> Iterator[Api]:
    service = RiskService(SqliteStore(":memory:"), assess=_risks)
    service.tick()
    api = Api.over(serve_app(service, token=SERVE_TOKEN, max_body_bytes=4096), [SERVE_TOKEN],
                   [g.uuid for g in GPUS])  # fmt: skip
    yield api
    api.close()


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    db = SchedulerDB(tmp_path_factory.mktemp("fuzz") / "s.db")
    tokens = TokenBook({"team-a": TEAM}, admin=ADMIN, agent=SECRET)
    app = scheduler_app(SchedulerService(db), tokens, max_body_bytes=4096)
    api = Api.over(app, [TEAM, ADMIN, node_token(SECRET, "n1"), SECRET],
                   ["n1", "team-a", "0", "1", "j-000000000000"])  # fmt: skip
    # a node and a job, so routes that need them have something to find
    agent = {"Authorization": f"Bearer {node_token(SECRET, 'n1')}"}
    inventory = {
        "cpu_milli": 8000,
        "memory_mib": 65536,
        "gpus": [{"index": 0, "model": "A100-80GB"}],
    }
    for method, url, body, headers in [
        ("POST", "/v1/agents/n1/register", inventory, agent),
        ("POST", "/v1/jobs", {"name": "j", "command": "true"}, {"Authorization": f"Bearer {TEAM}"}),
    ]:
        r = api.send({"method": method, "url": url, "params": {}, "headers": headers,
                      "body": json.dumps(body).encode(), "chunked": False})  # fmt: skip
        assert r.status_code < 300, r.text
        if url == "/v1/jobs":
            api.path_values.append(r.json()["job_id"])
    yield api
    api.close()
    db.close()


# ---- what is thrown at them -----------------------------------------------------------------

text = st.text(max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=15,
)
#: objects with the keys the routes read, each value right or wrong
known_keys = st.dictionaries(
    st.sampled_from(["state", "reason", "actor", "name", "command", "tasks", "gpus_per_task",
                     "priority", "checkpoint", "gpus", "health", "at", "cpu_milli", "memory_mib",
                     "tasks", "logs", "version", "status", "alerts", "idempotency_key"]),
    json_values | st.sampled_from(["ok", "true", 1, "inference", "4", "firing"]),
    max_size=6,
)  # fmt: skip
bodies = st.one_of(
    st.none(),
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    known_keys.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 300).map(lambda n: b"[" * n + b"]" * n),
    st.just(b"x" * 5000),  # over the 4096-byte limit of both apps here
)
content_types = st.sampled_from(
    [None, "application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/x"]
)


@st.composite
def requests(draw: st.DrawFn, api: Api) -> dict[str, Any]:
    """Mostly a route with one of its methods and a token it knows, so most requests reach
    the handlers; the rest anything at all."""
    method = draw(st.sampled_from(METHODS))
    if draw(st.integers(0, 9)) < 8:
        route = draw(st.sampled_from(api.routes))
        path = route.path
        for name in route.param_convertors:
            value = draw(st.sampled_from(api.path_values) | text)
            path = path.replace("{" + name + "}", quote(value, safe=""))
        if draw(st.integers(0, 9)) < 8:
            method = draw(st.sampled_from(sorted(route.methods)))
    else:
        segments = draw(st.lists(st.text(min_size=1, max_size=20), max_size=4))
        path = "/" + "/".join(quote(s, safe="") for s in segments)
    headers = {}
    if draw(st.integers(0, 9)) < 6:
        headers["Authorization"] = "Bearer " + draw(st.sampled_from(api.tokens))
    else:
        token = draw(st.sampled_from(["", "wrong", api.tokens[0] + "x"]) | text)
        if token.isascii() and "\n" not in token and "\r" not in token:
            scheme = draw(st.sampled_from(["Bearer ", "bearer ", "Basic ", ""]))
            headers["Authorization"] = scheme + token
    if content_type := draw(content_types):
        headers["Content-Type"] = content_type
    params = draw(st.dictionaries(st.sampled_from(["limit", "since", "until", "state", "task",
                                                   "attempt", "format", "uuid", "x"]),
                                  text | st.sampled_from(["1", "-1", "nan", "1e400", "csv"]),
                                  max_size=3))  # fmt: skip
    return {"method": method, "url": path, "params": params, "headers": headers,
            "body": draw(bodies), "chunked": draw(st.booleans())}  # fmt: skip


def check(api: Api, req: dict[str, Any]) -> None:
    r = api.send(req)
    assert r.status_code < 500, (req, r.status_code, r.text)
    assert "Traceback" not in r.text and "RecursionError" not in r.text, r.text
    auth = req["headers"].get("Authorization", "")
    known = any(auth.lower() == f"bearer {t}".lower() and auth[7:] == t for t in api.tokens)
    if req["body"] and not known:
        assert r.status_code in (401, 403), (req, r.status_code, r.text)


def test_every_route_is_in_the_fuzzing(serve, scheduler):
    assert {"/v1/gpus/{uuid}/state", "/alertmanager", "/v1/breaker/release"} <= {
        r.path for r in serve.routes
    }
    assert {"/v1/jobs", "/v1/agents/{node}/sync", "/v1/quota/{tenant}"} <= {
        r.path for r in scheduler.routes
    }


@FUZZ
@given(data=st.data())
def test_serve_never_answers_5xx_or_a_traceback(serve, data):
    check(serve, data.draw(requests(serve)))


@FUZZ
@given(data=st.data())
def test_the_scheduler_never_answers_5xx_or_a_traceback(scheduler, data):
    check(scheduler, data.draw(requests(scheduler)))


def test_after_the_fuzzing_both_still_serve(serve, scheduler):
    get = {"method": "GET", "params": {}, "headers": {}, "body": None, "chunked": False}
    assert serve.send({**get, "url": "/healthz"}).status_code == 200
    metrics = serve.send({**get, "url": "/metrics"}).text
    assert "gpuwarden_gpu_state" in {f.name for f in text_string_to_metric_families(metrics)}
    assert scheduler.send({**get, "url": "/healthz"}).status_code == 200
    team = {**get, "headers": {"Authorization": f"Bearer {TEAM}"}}
    assert scheduler.send({**team, "url": "/v1/jobs"}).status_code == 200
