"""POST /alertmanager under a real uvicorn: v4 payloads, idempotence, 400/401/413, and fuzzing.

Hypothesis throws bytes, arbitrary JSON and broken Alertmanager payloads at the receiver: it
always answers (never 5xx), keeps serving, and changes nothing: no GPU state, no audit row.
"""

import copy
import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_helpers import Clock, RecordingTagger

from gpuwarden.health import GpuState
from gpuwarden.serve.server import ServeHandle
from gpuwarden.serve.service import RiskService
from gpuwarden.store.sqlite import SqliteStore

TOKEN = "am-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def alert(name="GpuAtRisk", status="firing", fp="a1b2c3", host="node7", gpu="3", uuid="GPU-77"):
    return {
        "status": status,
        "labels": {
            "alertname": name,
            "Hostname": host,
            "gpu": gpu,
            "UUID": uuid,
            "severity": "warning",
        },
        "annotations": {"summary": f"GPU {host}/{gpu} is at risk (0.83)"},
        "startsAt": "2026-12-02T10:00:00.123Z",
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-12-02T10:05:00Z",
        "generatorURL": "http://prometheus:9090/graph?g0.expr=gpuwarden_risk_score",
        "fingerprint": fp,
    }


def payload(*alerts, status="firing"):
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GpuAtRisk"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "gpuwarden",
        "groupLabels": {"alertname": "GpuAtRisk"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }


class Served:
    def __init__(self, max_body_bytes=64 * 1024):
        self.clock = Clock()
        self.tagger = RecordingTagger()
        self.service = RiskService(SqliteStore(":memory:"), taggers=[self.tagger], clock=self.clock)
        self.handle = ServeHandle(self.service, token=TOKEN, max_body_bytes=max_body_bytes).start(
            loop=False
        )
        self.client = httpx.Client(base_url=self.handle.url, timeout=10)

    def post(self, body, headers=AUTH, **kw):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.client.post("/alertmanager", content=data, headers=headers, **kw)

    def snapshot(self):
        return (
            self.service.engine.statuses(),
            self.service.audit.count(),
            list(self.tagger.changes),
        )

    def close(self):
        self.client.close()
        self.handle.stop()


@pytest.fixture(scope="module")
def served():
    s = Served()
    yield s
    s.close()


@pytest.fixture
def fresh():
    s = Served()
    yield s
    s.close()


def test_firing_then_resolved_and_the_same_alert_twice(fresh):
    r = fresh.post(payload(alert()))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["alerts"] == [
        {
            "fingerprint": "a1b2c3",
            "alertname": "GpuAtRisk",
            "status": "firing",
            "outcome": "applied: ok -> at-risk",
        }
    ]
    assert body["hooks"] == [
        {"hostname": "node7", "hook": "recording", "result": "ok: node7 -> at-risk"}
    ]
    status = fresh.service.engine.status("GPU-77")
    assert status.state is GpuState.AT_RISK and status.source == "alertmanager"
    assert status.reasons == ("GpuAtRisk: GPU node7/3 is at risk (0.83)",)
    rows = fresh.service.audit.count()
    again = fresh.post(payload(alert()))  # Alertmanager repeats unresolved alerts
    assert again.json()["alerts"][0]["outcome"] == "duplicate"
    assert fresh.service.audit.count() == rows and fresh.tagger.changes == [
        ("node7", GpuState.AT_RISK)
    ]
    resolved = fresh.post(payload(alert(status="resolved"), status="resolved"))
    assert resolved.json()["alerts"][0]["outcome"] == "applied"  # the hold starts; no flap
    assert fresh.service.engine.status("GPU-77").state is GpuState.AT_RISK
    fresh.clock.now += 24 * 3600
    [t] = fresh.service.tick()
    assert (t.new, t.source) == (GpuState.OK, "hold")
    assert fresh.tagger.nodes["node7"] is GpuState.OK


def test_hard_signal_alerts_and_ignored_ones(fresh):
    r = fresh.post(
        payload(
            alert("GpuFatalXid", fp="x1", uuid="GPU-1", gpu="1"),
            alert("GpuMissing", fp="m1", uuid="", gpu=""),
            alert("SomethingElse", fp="s1", uuid="GPU-2", gpu="2"),
        )
    )
    outcomes = [a["outcome"] for a in r.json()["alerts"]]
    assert outcomes == [
        "applied: ok -> unhealthy",
        "ignored: not about one GPU (needs labels Hostname, gpu and UUID)",
        "ignored: alert SomethingElse does not change GPU state",
    ]
    assert fresh.service.counters.alerts == {"applied": 1, "ignored": 2}


def test_malformed_bodies_get_400_with_a_reason(served):
    before = served.snapshot()
    r = served.post(b"{not json")
    assert r.status_code == 400 and r.json()["detail"].startswith("body is not JSON")
    r = served.post([1, 2])
    assert r.json()["detail"] == "body must be a JSON object, not list"
    broken = payload(alert(), alert(fp=""))  # one bad alert rejects the whole group
    r = served.post(broken)
    assert r.status_code == 400
    assert r.json()["detail"].startswith(
        "not an Alertmanager v4 webhook payload: alerts.1.fingerprint"
    )
    r = served.post({**payload(alert()), "version": "3"})
    assert "version: Input should be '4'" in r.json()["detail"]
    assert served.snapshot() == before


def test_oversized_bodies_get_413_even_when_chunked(served):
    before = served.snapshot()
    big = json.dumps(payload(*[alert(fp=f"f{i}") for i in range(400)])).encode()
    assert len(big) > 64 * 1024
    assert served.post(big).status_code == 413

    def chunks():
        for i in range(0, len(big), 4096):
            yield big[i : i + 4096]

    assert served.client.post("/alertmanager", content=chunks(), headers=AUTH).status_code == 413
    assert served.snapshot() == before
    assert served.client.get("/healthz").status_code == 200  # and it keeps serving


def test_deeply_nested_json_is_a_400_and_counted(served):
    """Python's JSON parser recurses on nesting: 5,000 levels were a RecursionError and a 500
    that the webhook counter never saw."""
    before, counted = served.snapshot(), served.service.counters.webhook_requests[400]
    deep = b'{"version": "4", "alerts": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    for body, levels in ((deep, 5001), (b"[" * 5000 + b"]" * 5000, 5000)):
        r = served.post(body)
        assert r.status_code == 400, r.text
        assert (
            r.json()["detail"] == f"body is JSON nested {levels} levels deep; at most 64 are taken"
        )
    assert served.service.counters.webhook_requests[400] == counted + 2
    metrics = served.client.get("/metrics").text
    assert f'gpuwarden_webhook_requests_total{{code="400"}} {counted + 2}' in metrics
    assert served.snapshot() == before
    assert served.client.get("/healthz").status_code == 200  # serving on


def test_unauthenticated_calls_change_nothing(served):
    before = served.snapshot()
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": TOKEN}):
        r = served.post(payload(alert(fp="unauth")), headers=headers)
        assert r.status_code == 401
    assert served.snapshot() == before


# -- fuzzing --------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
not_a_string = st.none() | st.booleans() | st.integers() | st.lists(st.integers(), max_size=2)


@st.composite
def broken_payloads(draw):
    """A real payload with exactly one thing wrong that Alertmanager would never send."""
    body = payload(alert(fp="fz1"), alert("GpuFatalXid", fp="fz2", uuid="GPU-88", gpu="0"))
    target = draw(
        st.sampled_from(
            [
                "version",
                "status",
                "alerts",
                "alert.status",
                "alert.labels",
                "alert.label",
                "alert.startsAt",
                "alert.fingerprint",
                "alert.missing",
            ]
        )
    )
    a = body["alerts"][draw(st.integers(0, 1))]
    if target == "version":
        body["version"] = draw(st.text(max_size=5).filter(lambda v: v != "4") | not_a_string)
    elif target == "status":
        body["status"] = draw(
            st.text(max_size=10).filter(lambda v: v not in ("firing", "resolved"))
        )
    elif target == "alerts":
        body["alerts"] = draw(
            st.none()
            | st.text(max_size=5)
            | st.dictionaries(st.text(max_size=5), json_values, max_size=2)
        )
    elif target == "alert.status":
        a["status"] = draw(
            not_a_string | st.text(max_size=10).filter(lambda v: v not in ("firing", "resolved"))
        )
    elif target == "alert.labels":
        a["labels"] = draw(not_a_string)
    elif target == "alert.label":
        a["labels"][draw(st.sampled_from(["alertname", "UUID", "gpu"]))] = draw(not_a_string)
    elif target == "alert.startsAt":
        a["startsAt"] = draw(
            st.none() | st.lists(st.integers(), max_size=2) | st.text(alphabet="xyz:-", max_size=12)
        )
    elif target == "alert.fingerprint":
        a["fingerprint"] = draw(st.just("") | not_a_string)
    else:
        del a[draw(st.sampled_from(["status", "labels", "startsAt", "fingerprint"]))]
    return body


FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FUZZ
@given(body=st.binary(max_size=300))
def test_fuzz_bytes(served, body):
    before = served.snapshot()
    assert served.post(body).status_code == 400
    assert served.snapshot() == before


@FUZZ
@given(body=json_values)
def test_fuzz_any_json(served, body):
    before = served.snapshot()
    assert served.post(body).status_code == 400
    assert served.snapshot() == before


@FUZZ
@given(body=broken_payloads())
def test_fuzz_broken_payloads(served, body):
    before = served.snapshot()
    r = served.post(copy.deepcopy(body))
    assert r.status_code == 400, (r.status_code, r.text, body)
    assert served.snapshot() == before


@FUZZ
@given(
    body=broken_payloads() | st.builds(lambda: payload(alert(fp="valid"))),
    token=st.text(max_size=12),
)
def test_fuzz_without_the_token(served, body, token):
    before = served.snapshot()
    token = token.strip()
    usable = token and token.isascii() and token.isprintable() and token != TOKEN
    headers = {"Authorization": f"Bearer {token}"} if usable else {}
    r = served.post(body, headers=headers)
    assert r.status_code == 401
    assert served.snapshot() == before
    assert served.client.get("/healthz").status_code == 200
