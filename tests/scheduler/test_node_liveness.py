"""Nodes whose agent stops syncing: lost after the node timeout, their work written off, back on
the next sync. Mostly a real SQLite file, a clock we move and agents we play
(``service_helpers``); the last test does it with a real server, agents and task processes."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from service_helpers import (
    ADMIN,
    AGENT_SECRET,
    HOOK,
    A,
    Clock,
    PlayAgent,
    agent_token,
    submit,
    train,
)

from gpuwarden.cli import main
from gpuwarden.errors import ConfigError
from gpuwarden.scheduler._auth import TokenBook
from gpuwarden.scheduler.agent import Agent, host_inventory
from gpuwarden.scheduler.api import SchedulerServer
from gpuwarden.scheduler.client import SchedulerClient
from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.state import SchedulerDB


def audit(svc: SchedulerService, action: str) -> list[dict]:
    return [r for r in svc.audit(ADMIN, 1000)[::-1] if r["action"] == action]


def node(svc: SchedulerService, name: str) -> dict:
    return next(n for n in svc.nodes() if n["node"] == name)


def test_a_lost_nodes_interruptible_job_resumes_on_another_node(svc, clock):
    agents = {name: PlayAgent(svc, name) for name in ("n1", "n2")}
    job_id = train(svc)
    (task,) = svc.job(A, job_id)["placement"]
    dead = agents[task["node"]]
    live = next(a for a in agents.values() if a is not dead)
    dead.sync()
    live.sync()
    clock.t += 30
    dead.sync()  # its last sync
    for _ in range(2):
        clock.t += 30
        live.sync()
    svc.tick()  # 60 s of silence is not more than the timeout
    assert svc.job(A, job_id)["state"] == "running" and node(svc, dead.node)["state"] == "ok"
    clock.t += 1
    svc.tick()  # the background round finds it, requeues the job and places it on the live node
    job = svc.job(A, job_id)
    assert job["state"] == "running" and job["attempt"] == 2 and job["preemptions"] == 0
    assert [t["node"] for t in job["placement"]] == [live.node]
    (start,) = live.sync()["start"]
    assert (start["job_id"], start["attempt"]) == (job_id, 2)
    assert start["env"]["GPUWARDEN_RESUME"] == "1" and start["env"]["GPUWARDEN_ATTEMPT"] == "2"
    assert live.hooks == [] and dead.hooks == []  # nobody is there to deliver a hook
    lost = node(svc, dead.node)
    assert lost["state"] == "lost" and lost["since_sync_s"] == 61.0
    assert all(g["used_milli"] is None for g in lost["gpus"])  # not known, not zero
    assert node(svc, live.node)["state"] == "ok"
    node_row, job_row = audit(svc, "node-lost")
    assert node_row["node"] == dead.node and node_row["job_id"] is None
    assert node_row["actor"] == "scheduler" and "no agent sync for 61 s" in node_row["reason"]
    assert job_row["job_id"] == job_id and job_row["reason"] == (
        f"node {dead.node} lost: no agent sync for 61 s; attempt 1 requeued"
    )
    (requeue,) = audit(svc, "requeue")
    assert (
        requeue["reason"]
        == f"attempt 2 queued after: node {dead.node} lost: no agent sync for 61 s"
    )


def test_a_lost_nodes_job_fails_naming_the_node_and_is_billed_to_its_last_sync(svc, clock):
    agent = PlayAgent(svc, "n1")
    job_id = submit(svc, gpus_per_task=2)
    agent.sync()
    clock.t += 10
    agent.sync()  # reported running: billing starts here
    clock.t += 600
    agent.sync()  # the last sync: the host dies right after
    clock.t += 61
    svc.tick()
    job = svc.job(A, job_id)
    assert job["state"] == "failed" and job["ended_at"] == clock.t
    assert job["reason"] == "node n1 lost: no agent sync for 61 s" and job["exit_code"] is None
    clock.t += 3600  # the usage interval is closed: later hours cost nothing
    (bill,) = svc.billing(A, 0, clock.t)
    assert bill.gpu_hours == pytest.approx(2 * 600 / 3600)
    assert [r["reason"] for r in audit(svc, "finish")] == [
        "failed: node n1 lost: no agent sync for 61 s"
    ]
    assert svc.health() == (True, "no live node: none registered or all lost")


def test_a_node_coming_back_stops_the_old_task_and_takes_new_work(svc, clock):
    agent = PlayAgent(svc, "n1")
    old = submit(svc, gpus_per_task=2)
    agent.sync()
    clock.t += 61
    svc.tick()
    assert svc.job(A, old)["state"] == "failed"
    new = submit(svc)  # while no node is live: it waits
    # health set while the node is lost is kept for when it is back
    assert svc.set_health(ADMIN, "n1", 0, "unhealthy", "Xid 79")["evicted"] == []
    assert svc.job(A, new)["state"] == "queued"
    clock.t += 100
    orders = agent.sync()  # the agent still runs the written-off task
    assert [(o["job_id"], o["attempt"]) for o in orders["stop"]] == [(old, 1)]
    assert orders["start"] == []  # the new job waits until the old task has left the GPUs
    assert node(svc, "n1")["state"] == "ok" and node(svc, "n1")["since_sync_s"] == 0.0
    (back,) = audit(svc, "node-back")
    assert (
        back["node"] == "n1"
        and back["reason"] == "agent synced again 100 s after the node was lost"
    )
    (start,) = agent.sync()["start"]  # the old task reported exited
    assert start["job_id"] == new and start["gpus"] == [1]  # GPU 0 is unhealthy
    assert svc.job(A, old)["state"] == "failed"  # the late exit report changes nothing
    assert len(audit(svc, "node-lost")) == 2  # the node and its one job, once


def test_a_node_that_keeps_syncing_is_never_lost(svc, clock):
    agent = PlayAgent(svc, "n1")
    job_id = submit(svc)
    agent.sync()
    for _ in range(20):
        clock.t += 59
        agent.sync()
        svc.tick()
        assert node(svc, "n1")["state"] == "ok"
    job = svc.job(A, job_id)
    assert job["state"] == "running" and job["attempt"] == 1
    assert audit(svc, "node-lost") == []


def test_the_services_own_downtime_does_not_count(tmp_path, clock):
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    agent = PlayAgent(svc, "n1")
    job_id = submit(svc)
    agent.sync()
    clock.t += 300  # the service was down for 5 minutes; the agent kept its task running
    again = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    again.tick()
    n1 = node(again, "n1")
    assert n1["state"] == "ok" and n1["since_sync_s"] == 300.0
    clock.t += 61  # but silence after the restart does count
    again.tick()
    assert node(again, "n1")["state"] == "lost"
    assert again.job(A, job_id)["reason"] == "node n1 lost: no agent sync for 361 s"


@pytest.mark.parametrize("interruptible", [False, True])
def test_a_gang_with_one_node_lost_stops_its_task_on_the_other(svc, clock, interruptible):
    agents = {name: PlayAgent(svc, name) for name in ("n1", "n2")}
    spec = {"interruptible": True, "checkpoint": HOOK} if interruptible else {}
    job_id = submit(svc, tasks=2, gpus_per_task=2, priority="training", **spec)
    where = {t["node"]: i for i, t in enumerate(svc.job(A, job_id)["placement"])}
    assert sorted(where) == ["n1", "n2"]
    agents["n1"].sync()
    agents["n2"].sync()
    clock.t += 30
    agents["n1"].sync()
    clock.t += 31
    svc.tick()  # n2 has been silent for 61 s
    orders = agents["n1"].sync()
    assert [(o["job_id"], o["attempt"], o["task"]) for o in orders["stop"]] == [
        (job_id, 1, where["n1"])
    ]
    agents["n1"].sync()  # reports the task stopped
    job = svc.job(A, job_id)
    if interruptible:  # queued again, but the gang needs two nodes and one is gone
        assert job["state"] == "queued" and job["attempt"] == 2
        assert agents["n1"].hooks == []
    else:
        assert job["state"] == "failed" and job["reason"] == "node n2 lost: no agent sync for 61 s"
    assert agents["n1"].sync()["start"] == []


def test_the_node_timeout_must_be_positive(tmp_path):
    with pytest.raises(ConfigError, match="node timeout must be > 0"):
        SchedulerService(SchedulerDB(tmp_path / "s.db"), node_timeout_s=0, clock=Clock())
    result = CliRunner().invoke(main, ["scheduler", "serve", "--node-timeout", "0"])
    assert result.exit_code == 2 and "--node-timeout" in result.output


def test_a_shorter_node_timeout(tmp_path, clock):
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), node_timeout_s=5, clock=clock)
    PlayAgent(svc, "n1").sync()
    clock.t += 5.5
    svc.tick()
    assert node(svc, "n1")["state"] == "lost"
    assert "timeout 5 s" in audit(svc, "node-lost")[0]["reason"]


# ---- the same with a real server, real agents and real task processes ---------------------

TEAM, ADMIN_TOKEN = "token-of-team-a", "the-admin-token"


class AgentThread:
    """A real ``Agent`` run in a thread we can pause, as a network cut would: its tasks run on."""

    def __init__(self, url: str, node: str, workdir: Path) -> None:
        inventory = host_inventory(node, fake_gpus=1, gpu_model="H100-80GB")
        self.agent = Agent(node, url, workdir, inventory, token=agent_token(node), interval_s=0.1)
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.agent.run, args=(self.stop_event,), daemon=True)
        self.thread.start()

    def pause(self) -> None:
        self.stop_event.set()
        assert self.thread is not None
        self.thread.join(timeout=10)


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return got


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[SchedulerClient, dict[str, AgentThread]]]:
    db = SchedulerDB(tmp_path / "sched.db")
    svc = SchedulerService(db, round_every_s=0.1, node_timeout_s=2.0)
    tokens = TokenBook({"team-a": TEAM}, admin=ADMIN_TOKEN, agent=AGENT_SECRET)
    server = SchedulerServer(svc, tokens).start(port=0)
    agents = {n: AgentThread(server.url, n, tmp_path / n) for n in ("n1", "n2")}
    for a in agents.values():
        a.start()
    client = SchedulerClient(server.url, TEAM)
    wait_for("both agents", lambda: len(client.nodes()) == 2)
    try:
        yield client, agents
    finally:
        for a in agents.values():
            a.pause()
            for task in a.agent.tasks.tasks.values():  # nothing outlives the test
                if task.state == "running" and task.pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(task.pid, signal.SIGKILL)
            a.agent.close()
        client.close()
        server.stop()
        db.close()


def test_real_agents_a_cut_off_node_is_lost_its_job_resumes_elsewhere_and_it_comes_back(cluster):
    client, agents = cluster
    code = "import os, time; print('resume', os.environ['GPUWARDEN_RESUME'], flush=True)"
    spec = {"name": "train", "command": [sys.executable, "-c", code + "; time.sleep(30)"],
            "priority": "training", "interruptible": True, "checkpoint": HOOK}  # fmt: skip
    job_id = client.submit(spec)["job_id"]
    first = wait_for("attempt 1 to start", lambda: (j := client.job(job_id))["started_at"] and j)
    cut = agents[first["placement"][0]["node"]]
    cut.pause()  # the node drops off the network; its task keeps running
    (old,) = cut.agent.tasks.tasks.values()
    second = wait_for("attempt 2 to start elsewhere",
                      lambda: (j := client.job(job_id))["attempt"] == 2 and j["started_at"] and j)  # fmt: skip
    assert second["placement"][0]["node"] != cut.agent.node
    wait_for("attempt 2's output", lambda: client.logs(job_id, attempt=2))
    assert client.logs(job_id, attempt=2).strip() == "resume 1"
    states = {n["node"]: n["state"] for n in client.nodes()}
    assert states == {cut.agent.node: "lost", second["placement"][0]["node"]: "ok"}
    assert old.state == "running"
    cut.start()  # the network is back: the old attempt is stopped, the node is live again
    wait_for("the old task to be stopped", lambda: old.state == "exited")
    wait_for("the node to be back", lambda: {n["state"] for n in client.nodes()} == {"ok"})
    assert client.job(job_id)["attempt"] == 2 and client.job(job_id)["state"] == "running"
    client.cancel(job_id)
    wait_for("the job to be cancelled", lambda: client.job(job_id)["state"] == "cancelled")
