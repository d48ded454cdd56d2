"""Absurd input over real HTTP: numbers past SQLite's int64, JSON's 1e400 (inf) and NaN, wrong
types in lists. Each is a 400 naming the field, nothing stored changes, the service serves on."""

from __future__ import annotations

import httpx
import pytest
from click.testing import CliRunner
from service_helpers import AGENT_SECRET, A, PlayAgent, agent_token, submit

from gpuwarden.cli import main
from gpuwarden.scheduler._auth import TokenBook
from gpuwarden.scheduler.api import SchedulerServer
from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.state import SchedulerDB

TEAM, ADMIN = "token-of-team-a", "the-admin-token"
BIG = str(2**63)  # one past SQLite's largest integer
JOB = '"name": "x", "command": "true"'
TASK = '"job_id": "{job}", "attempt": 1, "task": 0'
DEEP = "[" * 5000 + "]" * 5000  # Python's JSON parser recurses: a RecursionError unbounded


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory):
    """One service for every case: each must leave it as it was, and serving."""
    db = SchedulerDB(tmp_path_factory.mktemp("bad-input") / "s.db")
    tokens = TokenBook({"team-a": TEAM}, admin=ADMIN, agent=AGENT_SECRET)
    server = SchedulerServer(SchedulerService(db), tokens).start(port=0)
    clients = {who: httpx.Client(base_url=server.url, timeout=10,
                                 headers={"Authorization": f"Bearer {tok}"})
               for who, tok in [("team", TEAM), ("admin", ADMIN), ("agent", agent_token("n1"))]}  # fmt: skip
    gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "A100-80GB"} for i in range(2)]
    body = {"cpu_milli": 8000, "memory_mib": 65536, "gpus": gpus}
    assert clients["agent"].post("/v1/agents/n1/register", json=body).status_code == 200
    # something stored to keep: a quota, a running job with a checkpoint and some output
    assert clients["admin"].put("/v1/quota/team-a", json={"gpus": 2}).status_code == 200
    job = clients["team"].post("/v1/jobs", json={"name": "j", "command": "true"}).json()["job_id"]
    clients["agent"].post("/v1/agents/n1/sync", json={})
    key = {"job_id": job, "attempt": 1, "task": 0}
    r = clients["agent"].post("/v1/agents/n1/sync", json={
        "tasks": [{**key, "state": "running", "pid": 7, "checkpoint_at": 1.0}],
        "logs": [{**key, "text": "step 1\n", "offset": 0}]})  # fmt: skip
    assert r.status_code == 200, r.text
    yield clients, job
    for c in clients.values():
        c.close()
    server.stop()
    db.close()


def _stored(admin: httpx.Client, job: str) -> list:
    nodes = [{k: v for k, v in n.items() if k != "since_sync_s"}  # moves with the clock
             for n in admin.get("/v1/nodes").json()]  # fmt: skip
    return [admin.get("/v1/jobs").json(), admin.get("/v1/quota").json(), nodes,
            admin.get("/v1/audit?limit=1000").json(), admin.get(f"/v1/jobs/{job}/logs").text]  # fmt: skip


@pytest.mark.parametrize(
    ("who", "method", "path", "body", "field"),
    [
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "gpu_models": [1]}}', "gpu_models"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "gpu_models": ["A100-80GB", null]}}', "gpu_models"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "tasks": {BIG}}}', "tasks"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "gpus_per_task": 0, "tasks": 1000000}}', "tasks"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "cpu_milli": {BIG}}}', "cpu_milli"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "memory_mib": -1}}', "memory_mib"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "gpu_memory_mib": 1e400}}', "gpu_memory_mib"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "gpu_memory_mib": NaN}}', "gpu_memory_mib"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "mig_profile": ["3g.40gb"]}}', "mig_profile"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "sharing": "mig"}}', "sharing"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "min_cuda": "twelve"}}', "min_cuda"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "min_driver": 550}}', "min_driver"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "gpu_arch": [1]}}', "gpu_arch"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "gpu_arch": ["hoper"]}}', "gpu_arch"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "ptx_jit": "yes"}}', "ptx_jit"),
        ("team", "POST", "/v1/jobs", '{"name": "x", "command": "a\\u0000b"}', "command"),
        # a lone surrogate: valid JSON, but no text SQLite can store
        ("team", "POST", "/v1/jobs", '{"name": "\\ud800", "command": "true"}', "name"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "idempotency_key": "\\udfff"}}', "idempotency_key"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "\\ud800": 1}}', "unknown job fields"),
        ("team", "POST", "/v1/jobs",
         f'{{{JOB}, "checkpoint": {{"kind": "signal", "target": 10}}}}', "checkpoint target"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "checkpoint": {{"kind": "url", "target": '
         '"http://169.254.169.254/latest/meta-data/iam/"}}', "cloud metadata address"),
        ("team", "POST", "/v1/jobs", f'{{{JOB}, "env": {DEEP}}}', "nested 5001 levels deep"),
        ("team", "POST", "/v1/jobs/{job}/checkpoint", DEEP, "nested 5000 levels deep"),
        ("admin", "PUT", "/v1/quota/team-a", f'{{"gpus": {DEEP}}}', "nested 5001 levels deep"),
        ("agent", "POST", "/v1/agents/n1/sync", f'{{"tasks": {DEEP}}}', "nested 5001 levels deep"),
        ("admin", "PUT", "/v1/quota/team-a", f'{{"gpus": {BIG}}}', "gpus"),
        ("admin", "PUT", "/v1/quota/team-a", '{"gpus": 1e400}', "gpus"),
        ("admin", "PUT", "/v1/quota/team-a", '{"guaranteed_gpus": NaN}', "guaranteed_gpus"),
        ("admin", "PUT", "/v1/quota/team-a", f'{{"gpu_memory_mib": {BIG}}}', "gpu_memory_mib"),
        ("admin", "PUT", "/v1/quota/team-a", '{"gpu_memory_mib": 1e400}', "gpu_memory_mib"),
        ("team", "GET", f"/v1/jobs/{{job}}/logs?attempt={BIG}", None, "attempt"),
        ("team", "GET", f"/v1/jobs/{{job}}/logs?task={BIG}", None, "task"),
        ("team", "GET", "/v1/billing?since=nan&until=1", None, "since"),
        ("team", "GET", "/v1/billing?since=0&until=inf", None, "until"),
        ("team", "POST", "/v1/jobs/{job}/checkpoint", '{"at": 1e400}', "at"),
        ("admin", "POST", f"/v1/nodes/n1/gpus/{BIG}/health", '{"health": "ok"}', "index"),
        ("agent", "POST", "/v1/agents/n1/register",
         f'{{"cpu_milli": {BIG}, "memory_mib": 1, "gpus": []}}', "cpu_milli"),
        ("agent", "POST", "/v1/agents/n1/register", '{"cpu_milli": 1, "memory_mib": 1, "gpus": '
         f'[{{"index": 0, "model": "A100-80GB", "memory_mib": {BIG}}}]}}', "memory_mib"),
        ("agent", "POST", "/v1/agents/n1/register", '{"cpu_milli": 1, "memory_mib": 1, "gpus": '
         f'[{{"index": 0, "model": "A100-80GB", "driver_version": "{"5" * 41}"}}]}}',
         "driver_version"),
        ("agent", "POST", "/v1/agents/n1/sync",
         f'{{"tasks": [{{"job_id": "{{job}}", "attempt": {BIG}, "task": 0, "state": "running"}}]}}',
         "attempt"),
        ("agent", "POST", "/v1/agents/n1/sync",
         f'{{"tasks": [{{{TASK}, "state": "exited", "exit_code": {BIG}}}]}}', "exit_code"),
        ("agent", "POST", "/v1/agents/n1/sync",
         f'{{"tasks": [{{{TASK}, "state": "running", "pid": {BIG}}}]}}', "pid"),
        ("agent", "POST", "/v1/agents/n1/sync",
         f'{{"tasks": [{{{TASK}, "state": "running", "checkpoint_at": NaN}}]}}', "checkpoint_at"),
        ("agent", "POST", "/v1/agents/n1/sync",
         f'{{"tasks": [{{{TASK}, "state": "exited", "ended_at": 1e400}}]}}', "ended_at"),
        ("agent", "POST", "/v1/agents/n1/sync",
         f'{{"logs": [{{{TASK}, "text": "x", "offset": {BIG}}}]}}', "offset"),
        ("agent", "POST", "/v1/agents/n1/sync", '{"gpus": [{"index": 0, "util_pct": 101}]}',
         "util_pct"),
        ("agent", "POST", "/v1/agents/n1/sync", '{"gpus": [{"index": 0, "energy_mj": -1}]}',
         "energy_mj"),
        ("agent", "POST", "/v1/agents/n1/sync",
         f'{{"logs": [{{"job_id": "{{job}}", "attempt": {BIG}, "task": 0, "text": "x"}}]}}',
         "attempt"),
    ],
)  # fmt: skip
def test_absurd_input_is_a_400_naming_the_field_and_changes_nothing(
    api, who, method, path, body, field
):
    clients, job = api
    before = _stored(clients["admin"], job)
    content = None if body is None else body.replace("{job}", job).encode()
    r = clients[who].request(method, path.replace("{job}", job), content=content,
                             headers={"Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 400, r.text
    assert field in r.json()["detail"]
    assert _stored(clients["admin"], job) == before
    assert clients["team"].get("/v1/jobs").status_code == 200  # still serving
    ok = clients["agent"].post("/v1/agents/n1/sync", json={"tasks": [
        {"job_id": job, "attempt": 1, "task": 0, "state": "running"}]})  # fmt: skip
    assert ok.status_code == 200


@pytest.mark.parametrize(
    ("limits", "field"),
    [("gpus = inf", "gpus"), ('gpus = "8"', "gpus"),
     ("gpu_memory_mib = 9223372036854775807", "gpu_memory_mib")],
)  # fmt: skip
def test_serve_refuses_absurd_quotas_in_one_line(tmp_path, monkeypatch, limits, field):
    quotas = tmp_path / "quotas.toml"
    quotas.write_text(f"[quotas.team-a]\n{limits}\n")
    monkeypatch.setenv("GPUWARDEN_SCHEDULER_TOKENS_JSON", f'{{"team-a": "{TEAM}"}}')
    argv = ["scheduler", "serve", "--db", str(tmp_path / "s.db"), "--port", "0",
            "--quotas", str(quotas)]  # fmt: skip
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 1 and field in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_quota_stored_before_the_bounds_does_not_stop_the_service(tmp_path):
    db = SchedulerDB(tmp_path / "s.db")
    db.set_quota("a", 1e300, None, None)  # taken by an older version
    db.conn.commit()
    svc = SchedulerService(db)
    PlayAgent(svc).sync()  # a node: the scheduler is built, quotas and all
    assert svc.job(A, submit(svc))["state"] == "running"  # served on, without that limit
    assert svc.quota_rows(A)[0]["gpus"] == 1e300  # and nothing stored changed
