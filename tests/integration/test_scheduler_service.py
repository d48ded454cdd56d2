"""The scheduler service and a node agent as real processes on 127.0.0.1, the agent with its
node's own token from `gpuwarden scheduler agent-token`.

A checkpointing training job fills both fake GPUs, an inference job preempts it (SIGUSR1, grace,
stop, requeue), the training job resumes from its checkpoint once the inference job is done.
Then the service is killed with SIGKILL while a job runs and another waits, restarted on the same
database, and must lose nothing, duplicate nothing and start nothing twice.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from alerting_daemons import Daemon, free_port, start_daemon  # conftest, loaded by path

ADMIN, AGENT, TEAM = "admin-token-for-test", "agent-token-for-test", "team-token-for-test"

TRAIN = r"""
import os, pathlib, signal, sys, time
ck = pathlib.Path(os.environ["GPUWARDEN_CHECKPOINT_DIR"]) / "step"
step = 0
if os.environ["GPUWARDEN_RESUME"] == "1" and ck.exists():
    step = int(ck.read_text())
    print(f"resumed from step {step}", flush=True)
print(f"start pid={os.getpid()} attempt={os.environ['GPUWARDEN_ATTEMPT']} "
      f"gpus={os.environ['CUDA_VISIBLE_DEVICES']}", flush=True)

def checkpoint(signum, frame):
    tmp = ck.with_suffix(".tmp")
    tmp.write_text(str(step))
    tmp.replace(ck)
    print(f"got SIGUSR1, checkpoint at step {step}", flush=True)

signal.signal(signal.SIGUSR1, checkpoint)
while step < int(sys.argv[1]):
    time.sleep(0.1)
    step += 1
print("done", flush=True)
"""


def _wait(what: str, check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if got := check():
                return got
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[tenants]\nteam-a = "{TEAM}"\n')
    monkeypatch.setenv("GPUWARDEN_SCHEDULER_TOKENS", str(tokens))
    monkeypatch.setenv("GPUWARDEN_SCHEDULER_ADMIN_TOKEN", ADMIN)
    monkeypatch.setenv("GPUWARDEN_AGENT_SECRET", AGENT)
    monkeypatch.delenv("GPUWARDEN_AGENT_TOKEN", raising=False)
    port, db = free_port(), tmp_path / "sched.db"
    argv = [sys.executable, "-m", "gpuwarden.cli", "scheduler", "serve", "--db", str(db),
            "--port", str(port), "--round-every", "0.5"]  # fmt: skip

    def start_service() -> Daemon:
        return start_daemon("scheduler", argv, port=port, workdir=tmp_path, ready_path="/healthz")

    state: dict[str, Any] = {"service": start_service(), "restart": start_service}
    # the node's own token, as an operator gets it on the service host; the agent has no secret
    token = subprocess.run(
        [sys.executable, "-m", "gpuwarden.cli", "scheduler", "agent-token", "n1"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    agent_env = {k: v for k, v in os.environ.items() if k != "GPUWARDEN_AGENT_SECRET"}
    workdir = tmp_path / "agent"
    with (tmp_path / "agent.log").open("wb") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "gpuwarden.cli", "agent", "--node", "n1", "--service",
             state["service"].url, "--fake-gpus", "2", "--workdir", str(workdir),
             "--interval", "0.3"],
            stdout=out, stderr=subprocess.STDOUT, env={**agent_env, "GPUWARDEN_AGENT_TOKEN": token},
        )  # fmt: skip
    state["url"] = state["service"].url
    try:
        yield state
    finally:
        agent.terminate()
        agent.wait(timeout=10)
        state["service"].stop()
        table = workdir / "agent-state.json"  # tasks run in their own sessions: end them too
        for task in json.loads(table.read_text()) if table.exists() else ():
            if task["pid"] and task["state"] == "running":
                try:
                    os.killpg(task["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass


def test_preempt_resume_and_survive_kill_9(cluster: dict[str, Any], tmp_path: Path) -> None:
    began = time.time()
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    team = httpx.Client(base_url=cluster["url"], headers={"Authorization": f"Bearer {TEAM}"},
                        timeout=10)  # fmt: skip

    def job(job_id: str) -> dict[str, Any]:
        return team.get(f"/v1/jobs/{job_id}").json()

    def log(job_id: str) -> str:
        return team.get(f"/v1/jobs/{job_id}/logs").text

    def submit(**spec: Any) -> str:
        r = team.post("/v1/jobs", json=spec)
        assert r.status_code == 201, r.text
        return r.json()["job_id"]

    _wait("the agent to register", lambda: team.get("/v1/nodes").json())
    # the master secret speaks for no node: an agent given it is told what to use instead
    secret = httpx.post(f"{cluster['url']}/v1/agents/n1/sync", json={},
                        headers={"Authorization": f"Bearer {AGENT}"})  # fmt: skip
    assert secret.status_code == 403 and "agent-token NODE" in secret.json()["detail"]
    train = submit(name="train", priority="training", interruptible=True, gpus_per_task=2,
                   command=[sys.executable, str(script), "150"], grace_period_s=1.5,
                   checkpoint={"kind": "signal", "target": "SIGUSR1"}, idempotency_key="t1")  # fmt: skip
    _wait("training to start", lambda: "attempt=1" in log(train))
    infer = submit(name="infer", priority="inference", gpus_per_task=1,
                   command=[sys.executable, "-c",
                            "import time; print('serving', flush=True); time.sleep(2)"])  # fmt: skip

    _wait("training to checkpoint on SIGUSR1", lambda: "got SIGUSR1" in log(train))
    _wait("training to be requeued", lambda: job(train)["attempt"] == 2)
    _wait("inference to finish", lambda: job(infer)["state"] == "succeeded")
    _wait("training to resume", lambda: "resumed from step" in log(train))
    t = job(train)
    assert t["state"] == "running" and t["preemptions"] == 1 and t["last_checkpoint_at"]
    assert job(infer)["ended_at"] <= t["started_at"]  # it waited for the GPUs, then resumed
    step = int(re.search(r"checkpoint at step (\d+)", log(train)).group(1))
    assert f"resumed from step {step}" in log(train)

    # kill -9 the service with the training job running and a batch job waiting behind it
    later = submit(name="later", priority="batch", gpus_per_task=2, command=["true"])
    assert job(later)["state"] == "queued"
    pid_line = _wait(
        "attempt 2's start line", lambda: re.search(r"start pid=\d+ attempt=2", log(train))
    )
    cluster["service"].proc.send_signal(signal.SIGKILL)
    cluster["service"].proc.wait(timeout=10)
    time.sleep(1.0)  # the agent syncs into a dead port a few times; its task keeps running
    cluster["service"] = cluster["restart"]()

    jobs = team.get("/v1/jobs").json()
    assert sorted(j["name"] for j in jobs) == ["infer", "later", "train"]
    assert {j["job_id"]: j["state"] for j in jobs}[later] == "queued"
    assert job(train)["state"] == "running" and job(train)["attempt"] == 2
    again = team.post(
        "/v1/jobs", json={"name": "train", "command": ["true"], "idempotency_key": "t1"}
    )
    assert again.status_code == 200 and again.json()["job_id"] == train

    _wait("everything to finish", lambda: all(
        j["state"] == "succeeded" for j in team.get("/v1/jobs").json()), timeout_s=30)  # fmt: skip
    text = log(train)
    assert text.count("attempt=2") == 1 and pid_line.group(0) in text  # one start, same pid
    assert text.count("start pid=") == 2 and "done" in text
    audit = httpx.get(f"{cluster['url']}/v1/audit?limit=1000",
                      headers={"Authorization": f"Bearer {ADMIN}"}).json()  # fmt: skip
    actions = {a["action"] for a in audit if a["job_id"] == train}
    assert {"submit", "place", "preempt", "checkpoint", "requeue", "resume", "finish"} <= actions
    # the team reads its preemptions since the test began by action and time, and pages back
    # from any row by its id, across the kill -9
    (preempted,) = team.get("/v1/audit", params={"action": "preempt", "since": began}).json()
    assert preempted["job_id"] == train and preempted["at"] >= began
    mine = team.get("/v1/audit", params={"limit": 1000}).json()
    (row,) = team.get("/v1/audit", params={"limit": 1, "before_id": mine[0]["id"]}).json()
    assert row == mine[1]
    bill = team.get("/v1/billing", params={"since": 0, "until": time.time() + 1}).json()
    assert {r["job_id"] for r in bill} >= {train, infer}
