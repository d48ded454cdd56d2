"""The service's side of fairness: a per-tenant limit on queued tasks (a 429 over HTTP), and
one tenant's costly queue neither delays another tenant's placement nor is tried again and
again by the rounds that other requests run."""

from __future__ import annotations

import httpx
import pytest
from service_helpers import AGENT_SECRET, A, B, PlayAgent, submit

from gpuwarden.errors import ConfigError
from gpuwarden.scheduler._auth import TokenBook
from gpuwarden.scheduler.api import SchedulerServer
from gpuwarden.scheduler.service import QueueFullError, SchedulerService
from gpuwarden.scheduler.state import SchedulerDB


def test_a_tenant_past_its_queued_task_limit_is_refused_and_others_are_not(tmp_path, clock):
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock, max_queued_tasks=10)
    PlayAgent(svc, gpus=1)
    submit(svc, A, gpus_per_task=1)  # runs: not queued
    keyed = {"name": "k", "command": ["true"], "tasks": 4, "idempotency_key": "k1"}
    first, _ = svc.submit(A, keyed)
    submit(svc, A, tasks=4, gpus_per_task=1)  # 8 tasks queued
    with pytest.raises(QueueFullError, match="has 8 tasks queued and may have at most 10"):
        submit(svc, A, tasks=3, gpus_per_task=1)
    submit(svc, A, tasks=2, gpus_per_task=1)  # exactly at the limit
    with pytest.raises(QueueFullError):
        submit(svc, A, gpus_per_task=1)
    # a retried submission that was accepted before is answered as before, limit or not
    again, created = svc.submit(A, keyed)
    assert not created and again["job_id"] == first["job_id"]
    submit(svc, B, tasks=10, gpus_per_task=1)  # another tenant has its own limit
    queued = svc.jobs(A, ["queued"])
    assert sum(j["tasks"] for j in queued) == 10 and len(queued) == 3  # nothing half-stored


def test_a_limit_below_one_task_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="max queued tasks"):
        SchedulerService(SchedulerDB(tmp_path / "s.db"), max_queued_tasks=0)


def test_the_limit_is_a_429_naming_it_over_http(tmp_path):
    db = SchedulerDB(tmp_path / "s.db")
    tokens = TokenBook({"team-a": "token-of-team-a"}, admin="the-admin-token", agent=AGENT_SECRET)
    server = SchedulerServer(SchedulerService(db, max_queued_tasks=4), tokens).start(port=0)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            auth = {"Authorization": "Bearer token-of-team-a"}
            job = {"name": "j", "command": "true", "tasks": 3, "gpus_per_task": 0}
            assert http.post("/v1/jobs", json=job, headers=auth).status_code == 201
            r = http.post("/v1/jobs", json=job, headers=auth)
            assert r.status_code == 429
            assert "may have at most 4" in r.json()["detail"]
            assert len(http.get("/v1/jobs", headers=auth).json()) == 1
            assert http.get("/healthz").status_code in (200, 503)  # still serving
    finally:
        server.stop()
        db.close()


def test_another_tenants_job_starts_ahead_of_a_long_costly_queue(tmp_path, clock):
    # no queued-task limit: the rounds must stay short without its help
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock, max_queued_tasks=None)
    agent = PlayAgent(svc, gpus=2)
    submit(svc, A, gpus_per_task=1)  # one GPU left
    # 100 queued jobs of distinct shapes that cannot fit: 4,096 tasks each, one CPU milli
    for i in range(100):
        submit(svc, A, tasks=4096 - i, gpus_per_task=0, cpu_milli=20)
    s = svc.scheduler
    assert s is not None
    tries = s.task_tries
    b_job = submit(svc, B, gpus_per_task=1)
    assert svc.job(B, b_job)["state"] == "running"
    # the round that placed B's job passed A's refused jobs over: one try for B's job (its
    # count and its one task), none for A's 100
    assert s.task_tries - tries == 2
    for _ in range(5):  # syncs and ticks run rounds too; nothing changed for A's jobs
        clock.t += 1
        agent.sync()
        svc.tick()
    assert s.task_tries - tries == 2
    reasons = {j["reason"] for j in svc.jobs(A, ["queued"])}
    assert all("tasks fit at once; no node has the CPU free" in r for r in reasons)
