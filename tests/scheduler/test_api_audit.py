"""``GET /v1/audit`` over real HTTP: ids, paging with ``before_id``, the ``since`` and ``action``
filters, tenants walled off as before; and a failing database answered with a 503."""

from __future__ import annotations

import httpx
import pytest
from service_helpers import AGENT_SECRET, Clock, agent_token, trap_commit, untrap

from gpuwarden.scheduler._auth import TokenBook
from gpuwarden.scheduler.api import SchedulerServer
from gpuwarden.scheduler.client import SchedulerClient
from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.state import SchedulerDB

TOKENS = {"team-a": "token-of-team-a", "team-b": "token-of-team-b"}
ADMIN = "the-admin-token"


@pytest.fixture
def api(tmp_path):
    clock = Clock()
    service = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    server = SchedulerServer(service, TokenBook(TOKENS, admin=ADMIN, agent=AGENT_SECRET))
    server.start(port=0)
    clients = {who: SchedulerClient(server.url, tok) for who, tok in
               [("a", TOKENS["team-a"]), ("b", TOKENS["team-b"]), ("admin", ADMIN)]}  # fmt: skip
    agent = httpx.Client(base_url=server.url, timeout=10,
                         headers={"Authorization": f"Bearer {agent_token('n1')}"})  # fmt: skip
    gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "A100-80GB"} for i in range(2)]
    r = agent.post("/v1/agents/n1/register",
                   json={"cpu_milli": 8000, "memory_mib": 65536, "gpus": gpus})  # fmt: skip
    assert r.status_code == 200, r.text
    yield clients, service, clock
    agent.close()
    for c in clients.values():
        c.close()
    server.stop()
    service.db.close()


def _job(client: SchedulerClient, gpus: int = 0) -> str:
    return client.submit({"name": "j", "command": ["sleep", "60"], "gpus_per_task": gpus})["job_id"]


def _all(client: SchedulerClient, page: int, **filters) -> list[dict]:
    rows: list[dict] = []
    while True:
        got = client.audit(page, before_id=rows[-1]["id"] if rows else None, **filters)
        rows += got
        if len(got) < page:
            return rows


def test_audit_pages_back_by_id_and_filters_by_time_and_action(api):
    clients, _, clock = api
    a_gpu, b_gpu = _job(clients["a"], gpus=1), _job(clients["b"], gpus=1)
    a_jobs = [_job(clients["a"]) for _ in range(12)]
    b_jobs = [_job(clients["b"]) for _ in range(5)]
    clock.t += 10  # within the node timeout (60 s): n1 stays live
    later = clock.t
    for gpu in (0, 1):  # both GPUs fail: both GPU jobs are preempted
        clients["admin"].set_health("n1", gpu, "unhealthy", "xid 79")

    everything = clients["admin"].audit(10_000)
    ids = [r["id"] for r in everything]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
    assert _all(clients["admin"], 7) == everything  # pages of 7 add up to the whole log
    assert clients["admin"].audit(3, before_id=ids[3]) == everything[4:7]

    preempts = clients["admin"].audit(100, action="preempt")
    assert {r["job_id"] for r in preempts} == {a_gpu, b_gpu}
    assert all(r["at"] >= later for r in clients["admin"].audit(100, since=later))
    recent = {r["action"] for r in clients["admin"].audit(100, since=later)}
    assert recent == {"health", "preempt", "requeue"}  # the submissions came before

    # a tenant pages through its own rows only, with every filter
    mine = _all(clients["a"], 5)
    assert {r["job_id"] for r in mine} == {a_gpu, *a_jobs}
    assert not {b_gpu, *b_jobs} & {r["job_id"] for r in _all(clients["a"], 5, since=0)}
    (own,) = clients["a"].audit(100, action="preempt", since=later)
    assert own["job_id"] == a_gpu
    (theirs,) = clients["b"].audit(100, action="preempt")
    assert theirs["job_id"] == b_gpu
    # a cursor taken from another tenant's row opens nothing of that tenant's
    seen = clients["a"].audit(100, before_id=theirs["id"] + 1, action="preempt")
    assert b_gpu not in {r["job_id"] for r in seen}
    assert clients["a"].audit(100, action="health") == []  # health rows name no tenant


@pytest.mark.parametrize(
    ("query", "problem"),
    [("before_id=0", "before_id"), ("since=nan", "since"), ("action=DROP%20TABLE", "action"),
     ("limit=0", "limit")],
)  # fmt: skip
def test_bad_audit_queries_are_a_400_naming_the_parameter(api, query, problem):
    clients, _, _ = api
    r = clients["admin"]._http.get(f"/v1/audit?{query}")
    assert r.status_code == 400 and problem in r.json()["detail"]


def test_a_failing_database_is_a_503_and_the_next_request_works(api):
    clients, service, _ = api
    with service.lock:
        trap_commit(service.db, "place")
    r = clients["a"]._http.post("/v1/jobs", json={"name": "j", "command": ["true"]})
    assert r.status_code == 503 and "nothing was changed" in r.json()["detail"]
    assert clients["a"].jobs() == []
    assert clients["admin"].nodes()[0]["gpus"][0]["used_milli"] == 0  # no phantom placement
    with service.lock:
        untrap(service.db)
    job_id = _job(clients["a"], gpus=1)
    assert clients["a"].job(job_id)["state"] == "running"
