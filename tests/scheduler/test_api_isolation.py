"""The scheduler API over real HTTP: tenants are walled off, tokens are required, bad input is
a 4xx naming the problem and the service keeps answering."""

from __future__ import annotations

import httpx
import pytest
from service_helpers import AGENT_SECRET, agent_token  # this directory's helpers, by path

from gpuwarden.scheduler._auth import TokenBook
from gpuwarden.scheduler.api import SchedulerServer
from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.state import SchedulerDB

TOKENS = {"team-a": "token-of-team-a", "team-b": "token-of-team-b"}
ADMIN = "the-admin-token"


@pytest.fixture
def api(tmp_path):
    db = SchedulerDB(tmp_path / "s.db")
    service = SchedulerService(db)
    tokens = TokenBook(TOKENS, admin=ADMIN, agent=AGENT_SECRET)
    server = SchedulerServer(service, tokens).start(port=0)
    clients = {
        who: httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {tok}"}, timeout=10)
        for who, tok in [("a", TOKENS["team-a"]), ("b", TOKENS["team-b"]), ("admin", ADMIN),
                         ("agent", agent_token("n1"))]
    }  # fmt: skip
    clients["none"] = httpx.Client(base_url=server.url, timeout=10)
    gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "A100-80GB"} for i in range(2)]
    r = clients["agent"].post("/v1/agents/n1/register",
                              json={"cpu_milli": 8000, "memory_mib": 65536, "gpus": gpus})  # fmt: skip
    assert r.status_code == 200, r.text
    yield clients
    for c in clients.values():
        c.close()
    server.stop()
    db.close()


def _submit(client: httpx.Client, **extra) -> dict:
    r = client.post("/v1/jobs", json={"name": "j", "command": ["sleep", "60"], **extra})
    assert r.status_code == 201, r.text
    return r.json()


def test_a_tenant_cannot_touch_another_tenants_job(api):
    a, b = api["a"], api["b"]
    job_b = _submit(b, gpus_per_task=2, idempotency_key="b-1")["job_id"]
    job_a = _submit(a, gpus_per_task=0)["job_id"]
    assert [j["job_id"] for j in a.get("/v1/jobs").json()] == [job_a]
    started = api["agent"].post("/v1/agents/n1/sync", json={}).json()["start"]
    reports = [{**{k: o[k] for k in ("job_id", "attempt", "task")}, "state": "running", "pid": 1}
               for o in started]  # fmt: skip
    logs = [{"job_id": job_b, "attempt": 1, "task": 0, "text": "secret of b\n", "offset": 0}]
    api["agent"].post("/v1/agents/n1/sync", json={"tasks": reports, "logs": logs})
    assert b.get(f"/v1/jobs/{job_b}/logs").text == "secret of b\n"
    for method, path in [("GET", f"/v1/jobs/{job_b}"), ("GET", f"/v1/jobs/{job_b}/logs"),
                         ("POST", f"/v1/jobs/{job_b}/cancel"),
                         ("POST", f"/v1/jobs/{job_b}/checkpoint")]:  # fmt: skip
        r = a.request(method, path)
        assert r.status_code == 404, (path, r.status_code, r.text)
        assert job_b in r.json()["detail"]
    assert b.get(f"/v1/jobs/{job_b}").json()["state"] == "running"  # a's cancel did nothing
    api["admin"].put("/v1/quota/team-b", json={"gpus": 4})
    assert {r["tenant"] for r in a.get("/v1/quota").json()} == {"team-a"}
    assert {r["tenant"] for r in b.get("/v1/quota").json()} == {"team-b"}
    assert all(r["tenant"] == "team-a" for r in a.get("/v1/billing?since=0&until=1e10").json())
    assert job_b in b.get("/v1/billing", params={"since": 0, "until": 1e10}).text
    assert all(r["job_id"] in (job_a, None) for r in a.get("/v1/audit").json())
    # the same idempotency key from another tenant is another job
    assert _submit(a, gpus_per_task=0, idempotency_key="b-1")["job_id"] != job_b


def test_admin_sees_all_and_tokens_are_required(api):
    job_a = _submit(api["a"], gpus_per_task=0)["job_id"]
    job_b = _submit(api["b"], gpus_per_task=0)["job_id"]
    assert {j["job_id"] for j in api["admin"].get("/v1/jobs").json()} == {job_a, job_b}
    assert api["admin"].get(f"/v1/jobs/{job_b}").status_code == 200
    for path in ("/v1/jobs", f"/v1/jobs/{job_a}", "/v1/nodes", "/v1/quota", "/v1/audit"):
        assert api["none"].get(path).status_code == 401
        r = api["none"].get(path, headers={"Authorization": "Bearer not-a-token"})
        assert r.status_code == 401
    assert api["none"].post("/v1/jobs", json={"name": "x", "command": "true"}).status_code == 401
    assert api["a"].post("/v1/agents/n1/sync", json={}).status_code == 403
    assert api["a"].put("/v1/quota/team-a", json={"gpus": 99}).status_code == 403
    assert api["a"].post("/v1/nodes/n1/gpus/0/health", json={"health": "ok"}).status_code == 403
    assert api["none"].get("/healthz").status_code == 200


def test_cancelling_a_finished_job_is_a_conflict(api):
    job = _submit(api["a"], gpus_per_task=0)["job_id"]
    assert api["a"].post(f"/v1/jobs/{job}/cancel").json()["state"] == "cancelled"
    r = api["a"].post(f"/v1/jobs/{job}/cancel")
    assert r.status_code == 409 and "already cancelled" in r.json()["detail"]


@pytest.mark.parametrize(
    ("method", "path", "body", "code", "problem"),
    [
        ("POST", "/v1/jobs", b"{not json", 400, "JSON"),
        ("POST", "/v1/jobs", {"name": "x", "command": "true", "tenant": "t", "priority": "asap"}, 400, "priority"),
        ("POST", "/v1/jobs", {"name": "x", "command": "true", "tenant": "t", "gpus_per_task": -2}, 400,
         "gpus_per_task"),
        ("POST", "/v1/jobs", {"name": "x", "command": "true", "tenant": "t", "mig_profile": "5g.1gb"}, 400,
         "MIG profile"),
        ("POST", "/v1/nodes/n7/gpus/0/health", {"health": "unhealthy"}, 404, "n7"),
        ("POST", "/v1/nodes/n1/gpus/5/health", {"health": "unhealthy"}, 404, "GPU 5"),
        ("POST", "/v1/nodes/n1/gpus/0/health", {"health": "meh"}, 400, "health"),
        ("PUT", "/v1/quota/team-a", {"gpus": -1}, 400, "gpus"),
        ("GET", "/v1/jobs?state=lost", None, 400, "state"),
        ("GET", "/v1/billing?since=10&until=1", None, 400, "until"),
    ],
)  # fmt: skip
def test_bad_input_is_a_4xx_naming_the_problem(api, method, path, body, code, problem):
    client = api["admin"]
    if isinstance(body, bytes):
        r = client.request(method, path, content=body, headers={"Content-Type": "application/json"})
    else:
        r = client.request(method, path, json=body)
    assert r.status_code == code, r.text
    assert problem in r.json()["detail"]
    assert client.get("/v1/nodes").status_code == 200  # still serving
    assert client.get("/v1/jobs").json() == []
