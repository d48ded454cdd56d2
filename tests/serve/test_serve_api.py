"""The HTTP API under a real uvicorn on a free port: health, /metrics, states, audit, overrides."""

import httpx
import pytest
from serve_helpers import RecordingTagger

from gpuwarden.alerts.base import RiskAssessment
from gpuwarden.health import GpuState
from gpuwarden.serve.server import ServeHandle
from gpuwarden.serve.service import RiskService
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import GpuId

TOKEN = "s3cret-token"
A = GpuId("node1", 0, "GPU-a", model="H100-80GB")
B = GpuId("node1", 1, "GPU-b")
C = GpuId("node2", 4, "GPU-c")


C_RISK = {"now": float("nan")}


def risks(store, at):
    return [
        RiskAssessment(A, at, 0.91, reasons=("SBE rate up",)),
        RiskAssessment(B, at, 0.2),
        RiskAssessment(C, at, C_RISK["now"]),
    ]


@pytest.fixture
def api(clock):
    C_RISK["now"] = float("nan")
    tagger = RecordingTagger()
    service = RiskService(SqliteStore(":memory:"), assess=risks, taggers=[tagger], clock=clock)
    service.tick()
    handle = ServeHandle(service, token=TOKEN).start(loop=False)
    client = httpx.Client(base_url=handle.url, timeout=10)
    yield client, service, tagger
    client.close()
    handle.stop()


def test_health_and_metrics(api):
    client, service, _ = api
    assert client.get("/healthz").json() == {"status": "ok", "detail": "ok"}
    text = client.get("/metrics").text
    assert 'gpuwarden_risk_score{Hostname="node1",UUID="GPU-a",gpu="0"} 0.91' in text
    assert 'gpuwarden_risk_score{Hostname="node2"' not in text  # unknown risk: no sample, not 0
    assert 'gpuwarden_gpu_state{Hostname="node1",UUID="GPU-a",gpu="0",state="at-risk"} 1.0' in text
    assert 'gpuwarden_gpu_state{Hostname="node1",UUID="GPU-a",gpu="0",state="ok"} 0.0' in text
    assert 'gpuwarden_gpu_state{Hostname="node2",UUID="GPU-c",gpu="4",state="ok"} 1.0' in text
    assert 'gpuwarden_decisions_total{from="ok",source="model",to="at-risk"} 1.0' in text
    assert 'gpuwarden_hook_actions_total{hook="recording",result="ok"} 1.0' in text
    assert 'gpuwarden_circuit_breaker_open{hook="recording"} 1.0' in text  # 3 nodes: 1 allowed
    assert "gpuwarden_assess_runs_total 1.0" in text


def test_states_and_audit(api):
    client, _, _ = api
    gpus = client.get("/v1/gpus").json()
    assert [(g["uuid"], g["state"], g["risk"]) for g in gpus] == [
        ("GPU-a", "at-risk", 0.91),
        ("GPU-b", "ok", 0.2),
        ("GPU-c", "ok", None),
    ]
    one = client.get("/v1/gpus/GPU-a").json()
    assert one["reasons"] == ["SBE rate up"] and one["model"] == "H100-80GB"
    assert client.get("/v1/gpus/GPU-zzz").status_code == 404
    audit = client.get("/v1/audit", params={"uuid": "GPU-a"}).json()
    assert [(r["hook"], r["new_state"]) for r in audit] == [
        ("recording", "at-risk"),
        (None, "at-risk"),
    ]
    assert client.get("/v1/audit", params={"limit": 0}).status_code == 400


def test_override_needs_the_token_and_records_a_person(api):
    client, service, tagger = api
    body = {"state": "ok", "reason": "reseated, DCGM diag level 3 passed", "actor": "erin"}
    before = service.audit.count()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        r = client.post("/v1/gpus/GPU-a/state", json=body, headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert service.audit.count() == before
    assert service.engine.status("GPU-a").state is GpuState.AT_RISK
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = client.post("/v1/gpus/GPU-a/state", json=body, headers=auth)
    assert r.status_code == 200, r.text
    t = r.json()["transition"]
    assert (t["old_state"], t["new_state"], t["source"], t["actor"]) == (
        "at-risk",
        "ok",
        "manual",
        "erin",
    )
    assert r.json()["hooks"] == [
        {"hostname": "node1", "hook": "recording", "result": "ok: node1 -> ok"}
    ]
    assert tagger.nodes["node1"] is GpuState.OK
    row = service.audit.rows(uuid="GPU-a", limit=2)[-1]
    assert (row.actor, row.reasons) == ("erin", ["reseated, DCGM diag level 3 passed"])
    bad = client.post("/v1/gpus/GPU-a/state", json={**body, "state": "sick"}, headers=auth)
    assert (
        bad.status_code == 400 and "state must be ok, at-risk or unhealthy" in bad.json()["detail"]
    )
    missing = client.post("/v1/gpus/GPU-a/state", json={"state": "ok"}, headers=auth)
    assert missing.status_code == 400 and "reason" in missing.json()["detail"]
    assert client.post("/v1/gpus/GPU-x/state", json=body, headers=auth).status_code == 404


def test_no_token_configured_refuses_every_change(clock):
    service = RiskService(SqliteStore(":memory:"), assess=risks, clock=clock)
    service.tick()
    handle = ServeHandle(service, token=None).start(loop=False)
    try:
        r = httpx.post(
            f"{handle.url}/v1/gpus/GPU-a/state",
            json={"state": "ok", "reason": "x", "actor": "y"},
            headers={"Authorization": "Bearer guess"},
        )
        assert r.status_code == 401 and "GPUWARDEN_API_TOKEN" in r.json()["detail"]
        assert service.engine.status("GPU-a").state is GpuState.AT_RISK
    finally:
        handle.stop()


def test_breaker_view_and_release(api):
    client, service, tagger = api
    assert client.get("/v1/breaker").json()["hooks"] == [
        {"hook": "recording", "open": True, "limit": 1, "refusals": 0}
    ]
    C_RISK["now"] = 0.95
    service.tick()  # node2 is refused: node1 used the budget
    held = client.get("/v1/breaker").json()["held"]
    assert [(h["hook"], h["hostname"]) for h in held] == [("recording", "node2")]
    assert client.post("/v1/breaker/release", json={"actor": "fay"}).status_code == 401
    r = client.post(
        "/v1/breaker/release", json={"actor": "fay"}, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert r.json()["hooks"][0]["result"].startswith("released by fay: ok")
    assert tagger.nodes["node2"] is GpuState.AT_RISK


def test_healthz_is_503_while_the_collector_cannot_reach_its_source(clock):
    import socket

    from gpuwarden.collectors.dcgm import DcgmCollector
    from gpuwarden.exporter import Exporter

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        collector = DcgmCollector([f"http://127.0.0.1:{s.getsockname()[1]}/metrics"], timeout_s=2)
        exporter = Exporter(collector)
        service = RiskService(SqliteStore(":memory:"), assess=risks, exporter=exporter, clock=clock)
        exporter.poll_once()
    handle = ServeHandle(service, token=TOKEN).start(loop=False)
    try:
        r = httpx.get(f"{handle.url}/healthz", timeout=10)
        assert r.status_code == 503
        assert r.json()["detail"].startswith("collector: last collection failed: nothing could")
    finally:
        handle.stop()
        collector.close()
