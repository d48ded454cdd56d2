"""Spot capacity: critical work never lands there, interruptible work goes there first, and a
reclaim notice (file, Python or HTTP) checkpoints and requeues what runs there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
from service_helpers import ADMIN, AGENT_SECRET, HOOK, PlayAgent, agent_token, submit

from gpuwarden.errors import InputError
from gpuwarden.scheduler import Job, NodeSpec, Scheduler
from gpuwarden.scheduler._auth import TokenBook
from gpuwarden.scheduler.api import SchedulerServer
from gpuwarden.scheduler.resources import CostClass
from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.spot import NoticeFile, parse_notice
from gpuwarden.scheduler.state import SchedulerDB


def _fleet(policy: str = "warden") -> Scheduler:
    nodes = [NodeSpec.uniform("own", 64_000, 262_144, 4, "H100-80GB"),
             NodeSpec.uniform("spot", 64_000, 262_144, 4, "H100-80GB", cost_class="spot")]  # fmt: skip
    return Scheduler(nodes, policy=policy)


def test_cost_class_is_checked():
    assert NodeSpec("n", 1, 1, cost_class="reserved").cost_class is CostClass.RESERVED
    with pytest.raises(InputError, match="cost_class must be one of owned, reserved, spot"):
        NodeSpec("n", 1, 1, cost_class="preemptible")  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", ["warden", "fgd", "bestfit", "gpupacking", "random"])
def test_critical_work_never_lands_on_spot(policy):
    s = _fleet(policy)
    for i in range(4):
        assert s.place(Job(f"svc{i}", priority="inference")).placed
    assert {s.placements[f"svc{i}"].tasks[0].node for i in range(4)} == {"own"}
    # the owned node is full: a fifth critical job waits rather than go to spot
    d = s.place(Job("svc4", priority="inference"))
    assert not d.placed
    # counts refuse a gang of critical work that only fits with spot too
    assert not s.place(Job("gang", priority="training", tasks=2, gpus_per_task=4)).placed


def test_interruptible_work_goes_to_spot_first_then_anywhere():
    s = _fleet()
    assert s.place(Job("a", interruptible=True, gpus_per_task=4)).placement.tasks[0].node == "spot"
    # spot is full: interruptible work may still use owned GPUs
    assert s.place(Job("b", interruptible=True, gpus_per_task=4)).placement.tasks[0].node == "own"
    off = Scheduler(_fleet().cluster.specs, spot_first=False)
    assert off.place(Job("a", interruptible=True)).placed


def test_reclaim_evicts_requeues_first_and_closes_the_node():
    s = _fleet()
    s.place(Job("svc", priority="inference"))
    s.place(Job("t1", interruptible=True, gpus_per_task=2, checkpoint=None))
    s.submit(Job("later", interruptible=True))
    evictions = s.reclaim("spot", "spot reclaim")
    assert [e.job.job_id for e in evictions] == ["t1"]
    assert evictions[0].node == "spot" and evictions[0].reason == "spot reclaim"
    assert s.pending[0].job_id == "t1"  # first in its class, like an eviction
    assert not s.is_open("spot") and "svc" in s.placements
    decisions = {d.job_id: d for d in s.schedule()}
    assert s.placements["t1"].tasks[0].node == "own"  # resumed elsewhere
    assert decisions["later"].placed
    s.set_open("spot", True)  # the replacement instance is back
    assert (
        s.place(Job("new", interruptible=True, gpus_per_task=4)).placement.tasks[0].node == "spot"
    )


def test_notice_forms_and_errors(tmp_path):
    n = parse_notice('{"in_s": 120}', "n1", now=1000.0)
    assert n.deadline == 1120.0 and n.grace_s(300, 1000.0) == 120.0 and n.grace_s(30, 1000.0) == 30
    aws = parse_notice('{"action": "terminate", "time": "2026-12-04T05:00:00Z"}', "n1")
    assert aws.deadline == 1_796_360_400.0 and aws.reason == "terminate"
    for bad, why in [("{", "not JSON"), ("[]", "JSON object"), ("{}", "give deadline"),
                     ('{"in_s": -1}', ">= 0"), ('{"deadline": "soon"}', "bad time"),
                     ('{"in_s": true}', "must be a number")]:  # fmt: skip
        with pytest.raises(InputError, match=why):
            parse_notice(bad, "n1")
    path = tmp_path / "notice.json"
    watch = NoticeFile(path, "n1")
    assert watch.poll() is None
    path.write_text(json.dumps({"deadline": 5000, "reason": "rebalance"}))
    got = watch.poll(now=4000)
    assert got is not None and got.deadline == 5000 and got.reason == "rebalance"
    assert watch.poll() is None  # once per content


def test_service_reclaim_checkpoints_within_the_deadline_and_requeues(svc, clock):
    own = PlayAgent(svc, "own", gpus=2)
    spot = PlayAgent(svc, "sp", gpus=2)
    svc.register("sp", {"cpu_milli": 64000, "memory_mib": 262144, "cost_class": "spot", "gpus": [
        {"index": i, "uuid": f"GPU-sp-{i}", "model": "H100-80GB", "memory_mib": 81920}
        for i in range(2)]})  # fmt: skip
    job = submit(svc, priority="training", interruptible=True, gpus_per_task=2, checkpoint=HOOK,
                 grace_period_s=600)  # fmt: skip
    spot.sync()
    assert spot.started and spot.started[0][0] == job
    out = svc.reclaim(ADMIN, "sp", clock.t + 120, "spot reclaim")
    assert out["evicted"] == [job]
    row = svc.db.job(job)
    assert row.state == "checkpointing" and row.stop_after == clock.t + 120  # cut from 600 s
    spot.sync()
    assert spot.hooks  # the checkpoint hook was ordered
    spot.exit(spot.started[0], 0)
    spot.sync()
    row = svc.db.job(job)  # requeued, and placed again at once: on the owned node
    assert row.attempt == 2 and {t["node"] for t in row.placement} == {"own"}
    own.sync()
    assert own.started[0][0] == job
    # a registration of the replacement instance opens the node again
    svc.register("sp", {"cpu_milli": 64000, "memory_mib": 262144, "cost_class": "spot", "gpus": [
        {"index": 0, "uuid": "GPU-sp-0", "model": "H100-80GB", "memory_mib": 81920}]})  # fmt: skip
    assert svc._lifecycle.scheduler.is_open("sp")


def test_reclaim_over_http_needs_the_right_token(tmp_path):
    db = SchedulerDB(tmp_path / "s.db")
    server = SchedulerServer(SchedulerService(db), TokenBook({"t": "tok-tenant-t"}, admin="tok-admin-0",
                                                             agent=AGENT_SECRET)).start(port=0)  # fmt: skip
    try:
        inv = {"cpu_milli": 8000, "memory_mib": 16384, "cost_class": "spot",
               "gpus": [{"index": 0, "uuid": "GPU-0", "model": "H100-80GB"}]}  # fmt: skip
        with httpx.Client(base_url=server.url, timeout=10) as h:
            agent = {"Authorization": f"Bearer {agent_token('n1')}"}
            assert h.post("/v1/agents/n1/register", json=inv, headers=agent).status_code == 200
            body = {"deadline": 2e9}
            assert h.post("/v1/nodes/n1/reclaim", json=body).status_code == 401
            tenant = {"Authorization": "Bearer tok-tenant-t"}
            assert h.post("/v1/nodes/n1/reclaim", json=body, headers=tenant).status_code == 403
            other = {"Authorization": f"Bearer {agent_token('n2')}"}
            assert h.post("/v1/agents/n1/reclaim", json=body, headers=other).status_code == 403
            bad = h.post("/v1/agents/n1/reclaim", json={"deadline": "x"}, headers=agent)
            assert bad.status_code == 400
            r = h.post("/v1/agents/n1/reclaim", json=body, headers=agent)
            assert r.status_code == 200 and r.json()["evicted"] == []
            admin = {"Authorization": "Bearer tok-admin-0"}
            assert h.post("/v1/nodes/nope/reclaim", json=body, headers=admin).status_code == 404
            audit = h.get("/v1/audit?action=reclaim", headers=admin).json()
            assert audit and "reclaimed" in audit[0]["reason"]
    finally:
        server.stop()
        db.close()


def test_agent_forwards_a_notice_file(tmp_path):
    from gpuwarden.scheduler.agent import Agent, Inventory

    db = SchedulerDB(tmp_path / "s.db")
    server = SchedulerServer(SchedulerService(db), TokenBook({}, admin="adm-token-0",
                                                             agent=AGENT_SECRET)).start(port=0)  # fmt: skip
    notice = tmp_path / "notice.json"
    try:
        inv = Inventory(8000, 16384, ({"index": 0, "uuid": "GPU-0", "model": "H100-80GB",
                                       "memory_mib": 81920},))  # fmt: skip
        agent = Agent("n1", server.url, tmp_path / "w", inv, token=agent_token("n1"),
                      cost_class="spot", notice=NoticeFile(notice, "n1"))  # fmt: skip
        agent.step()
        notice.write_text('{"in_s": 120}')
        os.utime(notice)
        agent.step()
        with httpx.Client(base_url=server.url, timeout=10,
                          headers={"Authorization": "Bearer adm-token-0"}) as h:  # fmt: skip
            audit = h.get("/v1/audit?action=reclaim").json()
        assert len(audit) == 1 and audit[0]["node"] == "n1"
        agent.close()
    finally:
        server.stop()
        db.close()
        Path(notice).unlink(missing_ok=True)
