"""Agent tokens are per node over real HTTP: the token of one node cannot register, sync or
report for another, the agents' master secret authenticates no one, and
`gpuwarden scheduler agent-token NODE` prints exactly the token the service takes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from service_helpers import AGENT_SECRET, agent_token  # this directory's helpers, by path

from gpuwarden.cli import main
from gpuwarden.errors import ConfigError
from gpuwarden.scheduler._auth import TokenBook
from gpuwarden.scheduler.agent import Agent, host_inventory
from gpuwarden.scheduler.api import SchedulerServer
from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.state import SchedulerDB

TEAM, ADMIN = "token-of-team-a", "the-admin-token"
INVENTORY = {"cpu_milli": 8000, "memory_mib": 65536,
             "gpus": [{"index": i, "uuid": f"GPU-{i}", "model": "A100-80GB"} for i in range(2)]}  # fmt: skip


def _client(url: str, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=url, headers=headers, timeout=10)


@pytest.fixture
def api(tmp_path: Path):
    db = SchedulerDB(tmp_path / "s.db")
    server = SchedulerServer(
        SchedulerService(db), TokenBook({"team-a": TEAM}, admin=ADMIN, agent=AGENT_SECRET)
    ).start(port=0)
    clients = {"admin": _client(server.url, ADMIN), "team": _client(server.url, TEAM)}
    for node in ("n1", "n2"):
        clients[node] = _client(server.url, agent_token(node))
        r = clients[node].post(f"/v1/agents/{node}/register", json=INVENTORY)
        assert r.status_code == 200, r.text
    yield clients
    for c in clients.values():
        c.close()
    server.stop()
    db.close()


def _state(admin: httpx.Client) -> tuple:
    """What an agent request could change: nodes (but the seconds since their last sync, which
    move with the clock), jobs, the audit trail."""
    nodes = [{k: v for k, v in n.items() if k != "since_sync_s"}
             for n in admin.get("/v1/nodes").json()]  # fmt: skip
    return nodes, admin.get("/v1/jobs").json(), admin.get("/v1/audit?limit=1000").json()


def test_a_nodes_token_cannot_speak_for_another_node(api):
    job = api["team"].post("/v1/jobs", json={"name": "j", "command": "true"}).json()["job_id"]
    (order,) = api["n1"].post("/v1/agents/n1/sync", json={}).json()["start"]
    assert order["job_id"] == job
    before = _state(api["admin"])
    # n2's agent (or anyone holding its token) posing as n1: re-register with no GPUs, report
    # n1's task failed, write into its log
    forged = [
        ("/v1/agents/n1/register", {**INVENTORY, "gpus": []}),
        ("/v1/agents/n1/sync", {"tasks": [{"job_id": job, "attempt": 1, "task": 0,
                                           "state": "exited", "exit_code": 1}],
                                "logs": [{"job_id": job, "attempt": 1, "task": 0,
                                          "text": "forged\n", "offset": 0}]}),
    ]  # fmt: skip
    for path, body in forged:
        r = api["n2"].post(path, json=body)
        assert r.status_code == 403, r.text
        assert "not the agent token of node n1" in r.json()["detail"]
        assert "gpuwarden scheduler agent-token n1" in r.json()["detail"]
    assert _state(api["admin"]) == before
    assert api["team"].get(f"/v1/jobs/{job}/logs").text == ""
    # the tenant and admin tokens are no agent tokens either
    for who in ("team", "admin"):
        r = api[who].post("/v1/agents/n1/sync", json={})
        assert r.status_code == 403 and "agent token of node n1" in r.json()["detail"]
    # and n1's own token still works
    r = api["n1"].post("/v1/agents/n1/sync", json={"tasks": [{"job_id": job, "attempt": 1,
                                                               "task": 0, "state": "running"}]})  # fmt: skip
    assert r.status_code == 200 and api["admin"].get(f"/v1/jobs/{job}").json()["started_at"]


def test_a_node_cannot_report_or_log_for_another_nodes_task(api):
    job = api["team"].post("/v1/jobs", json={"name": "j", "command": "true"}).json()["job_id"]
    (order,) = api["n1"].post("/v1/agents/n1/sync", json={}).json()["start"]
    key = {"job_id": job, "attempt": 1, "task": 0}
    api["n1"].post("/v1/agents/n1/sync", json={"tasks": [{**key, "state": "running"}]})
    # n2, under its own name, reports n1's task as failed and ships text into its log
    r = api["n2"].post("/v1/agents/n2/sync", json={
        "tasks": [{**key, "state": "exited", "exit_code": 1}],
        "logs": [{**key, "text": "forged by n2\n", "offset": 0}]})  # fmt: skip
    assert r.status_code == 200, r.text
    assert api["team"].get(f"/v1/jobs/{job}").json()["state"] == "running"
    assert api["team"].get(f"/v1/jobs/{job}/logs").text == ""
    api["n1"].post("/v1/agents/n1/sync", json={"logs": [{**key, "text": "mine\n", "offset": 0}]})
    assert api["team"].get(f"/v1/jobs/{job}/logs").text == "mine\n"


def test_the_master_secret_is_refused_everywhere(api):
    before = _state(api["admin"])
    secret = _client(str(api["admin"].base_url), AGENT_SECRET)
    for method, path, body in [("POST", "/v1/agents/n1/register", INVENTORY),
                               ("POST", "/v1/agents/n3/sync", {}), ("GET", "/v1/nodes", None)]:  # fmt: skip
        r = secret.request(method, path, json=body)
        assert r.status_code == 403, r.text
        assert "gpuwarden scheduler agent-token NODE" in r.json()["detail"]
    secret.close()
    assert _state(api["admin"]) == before


def test_agent_token_command_prints_the_token_the_service_takes(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUWARDEN_AGENT_TOKEN", raising=False)
    env = {"GPUWARDEN_AGENT_SECRET": AGENT_SECRET, "GPUWARDEN_SCHEDULER_ADMIN_TOKEN": ADMIN}
    printed = CliRunner().invoke(main, ["scheduler", "agent-token", "gpu-07"], env=env)
    assert printed.exit_code == 0, printed.output
    token = printed.output.strip()
    assert token == agent_token("gpu-07") and len(token) == 64
    # a real agent with that token, against a service reading the same environment
    db = SchedulerDB(tmp_path / "s.db")
    server = SchedulerServer(SchedulerService(db), TokenBook.from_env(env)).start(port=0)
    inventory = host_inventory("gpu-07", fake_gpus=1, gpu_model="H100-80GB")
    agent = Agent("gpu-07", server.url, tmp_path / "agent", inventory, token=token, interval_s=0.1)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not agent.registered:
            assert time.monotonic() < deadline, "the agent did not register with its token"
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=10)
        agent.close()
        server.stop()
        db.close()
    # older setups keep the master secret in GPUWARDEN_AGENT_TOKEN on the service host
    older = CliRunner().invoke(main, ["scheduler", "agent-token", "gpu-07"],
                               env={"GPUWARDEN_AGENT_TOKEN": AGENT_SECRET})  # fmt: skip
    assert older.output.strip() == token


@pytest.mark.parametrize(
    "token",
    ["not-a-token-at-all", agent_token("n2"), AGENT_SECRET],
    ids=["unknown", "n2", "secret"],
)
def test_an_agent_whose_token_is_refused_says_so_and_stops(api, tmp_path, caplog, token):
    """401 or 403 is not an outage: no "service unavailable" and no retrying forever."""
    url = str(api["admin"].base_url)
    inventory = host_inventory("n1", fake_gpus=1, gpu_model="H100-80GB")
    agent = Agent("n1", url, tmp_path / "agent", inventory, token=token, interval_s=0.05)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            agent.run(threading.Event())
        except ConfigError as exc:
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    with caplog.at_level("WARNING", logger="gpuwarden.scheduler.agent"):
        thread.start()
        thread.join(timeout=10)
    agent.close()
    assert not thread.is_alive(), "the agent kept retrying a refused token"
    assert failed and "refused this agent's token" in str(failed[0])
    assert "gpuwarden scheduler agent-token n1" in str(failed[0])
    assert token not in str(failed[0])  # the refused token is never repeated
    assert "refused this agent's token" in caplog.text
    assert "unavailable" not in caplog.text


def test_the_agent_command_exits_non_zero_on_a_refused_token(api, tmp_path):
    env = {**os.environ, "GPUWARDEN_AGENT_TOKEN": agent_token("other-node")}
    argv = [sys.executable, "-m", "gpuwarden.cli", "agent", "--node", "n1", "--service",
            str(api["admin"].base_url), "--fake-gpus", "1", "--workdir", str(tmp_path / "a"),
            "--interval", "0.1"]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the agent ran on with a refused token: {exc.stderr!r}")
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: the scheduler service at") and "refused" in last, done.stderr
    assert "unavailable" not in done.stderr


@pytest.mark.parametrize(
    ("args", "env", "problem"),
    [
        (["n1"], {}, "set GPUWARDEN_AGENT_SECRET"),
        (["n1"], {"GPUWARDEN_AGENT_SECRET": "short"}, "16+ characters"),
        (["bad/name"], {"GPUWARDEN_AGENT_SECRET": AGENT_SECRET}, "not a node name"),
    ],
)
def test_agent_token_command_errors_are_one_line(monkeypatch, args, env, problem):
    for name in ("GPUWARDEN_AGENT_SECRET", "GPUWARDEN_AGENT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(main, ["scheduler", "agent-token", *args], env=env)
    assert result.exit_code == 1 and problem in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"agent": "too-short"}, "16\\+ characters"),
        ({"admin": AGENT_SECRET, "agent": AGENT_SECRET}, "share a token"),
    ],
)
def test_a_weak_or_shared_master_secret_is_refused_at_start(kwargs, problem):
    with pytest.raises(ConfigError, match=problem):
        TokenBook({"team-a": TEAM}, **kwargs)


def test_an_agent_without_nvml_names_its_own_option(tmp_path):
    """This machine has no NVIDIA driver: the agent's error told the operator to use smi://,
    dcgm+http://... or sim://, which are collector URLs, no option of the agent's."""
    r = CliRunner().invoke(main, ["agent", "--node", "n1", "--service", "http://127.0.0.1:9",
                                  "--workdir", str(tmp_path / "w")],
                           env={"GPUWARDEN_AGENT_TOKEN": "t" * 64})  # fmt: skip
    assert r.exit_code == 1, r.output
    assert "NVML not found" in r.output and "--fake-gpus N" in r.output, r.output
    assert "smi://" not in r.output and "sim://" not in r.output


def test_a_service_nobody_can_use_says_so():
    """`scheduler serve` with no token at all started with "0 tenants" and nothing else."""
    assert len(TokenBook({}).gaps()) == 2
    assert TokenBook({}, admin="a" * 20, agent=AGENT_SECRET).gaps() == []
    only_tenant = TokenBook({"team-a": "b" * 20}).gaps()
    assert only_tenant == ["no GPUWARDEN_AGENT_SECRET: no node agent can register"]
