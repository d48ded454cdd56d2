"""``gpuwarden jobs | nodes | quota | billing`` against the real scheduler service on 127.0.0.1,
with a real node agent (two fake GPUs) running the jobs' commands as processes."""

from __future__ import annotations

import csv
import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from service_helpers import AGENT_SECRET, agent_token  # this directory's helpers, by path

from gpuwarden.cli import main
from gpuwarden.cliutil import parse_time
from gpuwarden.scheduler._auth import TokenBook
from gpuwarden.scheduler.agent import Agent, host_inventory
from gpuwarden.scheduler.api import SchedulerServer
from gpuwarden.scheduler.client import SchedulerClient
from gpuwarden.scheduler.client_cli import job_spec, parse_cpu_milli, parse_mib, submit
from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.state import SchedulerDB

TOKENS = {"team-a": "token-of-team-a", "team-b": "token-of-team-b"}
ADMIN = "the-admin-token"


@dataclass
class Service:
    url: str
    tmp: Path

    def run(self, *args: str, token: str | None = TOKENS["team-a"]) -> Result:
        env = {"GPUWARDEN_SCHEDULER_URL": self.url, "GPUWARDEN_SCHEDULER_TOKEN": token or ""}
        return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)

    def ok(self, *args: str, token: str = TOKENS["team-a"]) -> str:
        result = self.run(*args, token=token)
        assert result.exit_code == 0, result.output
        return result.output

    def job(self, job_id: str, token: str = TOKENS["team-a"]) -> dict:
        with SchedulerClient(self.url, token) as c:
            return c.job(job_id)

    def wait_state(self, job_id: str, states: set[str], timeout_s: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            assert time.monotonic() < deadline, f"{job_id} still {job['state']}"
            time.sleep(0.1)


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    db = SchedulerDB(tmp_path / "sched.db")
    svc = SchedulerService(db, round_every_s=0.2)
    server = SchedulerServer(svc, TokenBook(TOKENS, admin=ADMIN, agent=AGENT_SECRET)).start(port=0)
    inventory = host_inventory("n1", fake_gpus=2, gpu_model="H100-80GB")
    agent = Agent(
        "n1", server.url, tmp_path / "agent", inventory, token=agent_token("n1"), interval_s=0.2
    )
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not agent.registered:
        assert time.monotonic() < deadline, "agent did not register"
        time.sleep(0.05)
    yield Service(server.url, tmp_path)
    stop.set()
    thread.join(timeout=10)
    agent.close()
    server.stop()
    db.close()


def submitted_id(output: str) -> str:
    job_id, state = output.split()
    assert state in ("queued", "running")
    return job_id


def test_submit_maps_every_option_onto_the_contract(service: Service) -> None:
    out = service.ok(
        "jobs", "submit", "--name", "train", "--priority", "training", "--interruptible",
        "--gpus", "1", "--cpu", "500m", "--memory", "1Gi", "--gpu-memory", "20Gi",
        "--checkpoint-signal", "SIGUSR1", "--grace", "5", "--idempotency-key", "k-1",
        "--", sys.executable, "-c", "import time; time.sleep(30)",
    )  # fmt: skip
    job_id = submitted_id(out)
    job = service.job(job_id)
    assert job["name"] == "train" and job["priority"] == "training" and job["interruptible"]
    assert job["command"] == [sys.executable, "-c", "import time; time.sleep(30)"]
    assert job["gpus_per_task"] == 1 and job["tenant"] == "team-a"
    # the same idempotency key gives the same job, never a second
    again = service.ok("jobs", "submit", "--idempotency-key", "k-1", "--", "true")
    assert again.split()[0] == job_id
    service.wait_state(job_id, {"running"})
    listed = json.loads(service.ok("jobs", "list", "--format", "json", "--state", "running"))
    assert [j["job_id"] for j in listed] == [job_id]
    table = service.ok("jobs", "list")
    assert table.splitlines()[0].split()[:5] == ["JOB", "TENANT", "NAME", "PRIORITY", "STATE"]
    assert job_id in table and "n1:" in table and table.splitlines()[0].split()[-1] == "WHY"
    assert "(none)" in service.ok("jobs", "list", "--state", "failed")
    # cancel: the agent stops it
    assert service.ok("jobs", "cancel", job_id).split()[0] == job_id
    assert service.wait_state(job_id, {"cancelled"})["state"] == "cancelled"


def test_logs_billing_nodes_and_quota(service: Service) -> None:
    code = "print('hello from the job'); import time; time.sleep(1.2)"
    job_id = submitted_id(
        service.ok("jobs", "submit", "--gpu-milli", "250", "--", sys.executable, "-c", code)
    )
    service.wait_state(job_id, {"succeeded"})
    assert service.ok("jobs", "logs", job_id).strip() == "hello from the job"
    assert (
        service.ok("jobs", "logs", job_id, "--task", "0", "--attempt", "1").strip()
        == "hello from the job"
    )

    out_csv = service.tmp / "bill.csv"
    since = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() - 3600))
    table = service.ok("billing", "--since", since, "--output", str(out_csv))
    rows = list(csv.DictReader(out_csv.open()))
    assert list(rows[0]) == ["tenant", "job_id", "name", "gpu_hours"]
    (row,) = rows
    assert row["job_id"] == job_id and row["tenant"] == "team-a"
    # 250 milli for about 1.2 s: 0.25 x 1.2 / 3600 GPU-hours, give or take a sync interval
    assert 0.25 * 0.8 / 3600 < float(row["gpu_hours"]) < 0.25 * 3.0 / 3600
    assert job_id in table and "(total)" in table
    assert "KWH_FROM" in table and "estimated" in table  # no NVML: board power x GPU-hours
    # a window before the job ran bills nothing
    assert "(none)" in service.ok("billing", "--since", "0", "--until", "1000")

    nodes = service.ok("nodes").splitlines()
    assert nodes[0].split()[:5] == ["NODE", "STATE", "SINCE_SYNC_S", "GPU", "MODEL"]
    rows = [line.split() for line in nodes[1:]]
    assert [(r[0], r[1], r[3], r[4]) for r in rows] == [
        ("n1", "ok", "0", "H100-80GB"),
        ("n1", "ok", "1", "H100-80GB"),
    ]
    assert all(0 <= int(r[2]) < 5 for r in rows)  # the agent syncs every 0.2 s
    # a --fake-gpus agent has no NVML: nothing measured, and the service says it goes by allocation
    assert nodes[0].split()[-2:] == ["UTIL_PCT", "UTIL_FROM"]
    assert [r[-2:] for r in rows] == [["-", "allocation"]] * 2
    cols = nodes[0].split()
    at = cols.index("COST")
    assert cols[at : at + 3] == ["COST", "SLEEP", "RECLAIM_IN_S"]
    assert [r[at : at + 3] for r in rows] == [["owned", "off", "-"]] * 2  # sleep off, no reclaim
    (n1,) = json.loads(service.ok("nodes", "--format", "json"))
    assert n1["node"] == "n1" and n1["state"] == "ok" and 0 <= n1["since_sync_s"] < 5
    with SchedulerClient(service.url, ADMIN) as admin:
        admin._call("PUT", "/v1/quota/team-a", json={"gpus": 2, "guaranteed_gpus": 1})
    quota = service.ok("quota").splitlines()
    assert quota[0].split()[0] == "TENANT" and quota[1].split()[:3] == ["team-a", "2", "1"]
    assert "team-b" not in service.ok("quota")  # a tenant sees its own row only
    # a job larger than the whole quota waits, and the list says why, in GPUs
    big = submitted_id(service.ok("jobs", "submit", "--gpus", "3", "--", "true"))
    deadline = time.time() + 20
    while "more than the whole GPU quota" not in (why := service.job(big).get("reason", "")):
        assert time.time() < deadline, why
        time.sleep(0.2)
    row = next(line for line in service.ok("jobs", "list").splitlines() if big in line)
    assert "the job needs 3 GPUs, more than the whole GPU quota of 2 GPUs" in row
    # a decision's reason names its job; the row already does
    odd = submitted_id(service.ok("jobs", "submit", "--gpu-model", "B300", "--", "true"))
    deadline = time.time() + 20
    while "B300" not in service.job(odd).get("reason", ""):
        assert time.time() < deadline
        time.sleep(0.2)
    row = next(line for line in service.ok("jobs", "list").splitlines() if odd in line)
    assert row.endswith("  no node has GPUs of model B300") and row.count(odd) == 1, row
    assert "team-a" in service.ok("quota", token=ADMIN)


def test_server_errors_are_one_line_without_the_token(service: Service, tmp_path: Path) -> None:
    job_id = submitted_id(service.ok("jobs", "submit", "--gpus", "0", "--", "true"))
    other = service.run("jobs", "logs", job_id, token=TOKENS["team-b"])
    assert other.exit_code == 1 and "HTTP 404" in other.output and "another tenant" in other.output
    bad = service.run("jobs", "list", token="not-a-valid-token")
    assert (
        bad.exit_code == 1
        and "HTTP 401" in bad.output
        and "GPUWARDEN_SCHEDULER_TOKEN" in bad.output
    )
    assert "not-a-valid-token" not in bad.output
    missing = service.run("jobs", "list", token=None)
    assert missing.exit_code == 1 and "no scheduler token" in missing.output
    # a tenant asking what only an admin may: the service says which token, once
    admin_only = service.run("reclaim", "n1")
    assert admin_only.exit_code == 1 and admin_only.output.strip().endswith(
        "HTTP 403: this needs an admin token"
    ), admin_only.output
    mig = service.run("jobs", "submit", "--mig", "9g.999gb", "--", "true")
    assert mig.exit_code == 1 and "HTTP 400" in mig.output and "9g.999gb" in mig.output
    assert len(mig.output.strip().splitlines()) == 1
    away = service.run("jobs", "list", "--url", "http://127.0.0.1:9")
    assert away.exit_code == 1 and "cannot reach the scheduler" in away.output
    # --token-file instead of the environment
    token_file = tmp_path / "token"
    token_file.write_text(TOKENS["team-a"] + "\n")
    via_file = service.run("jobs", "list", "--token-file", str(token_file), token=None)
    assert via_file.exit_code == 0 and job_id in via_file.output
    # usage mistakes are caught before any request
    two = service.run("jobs", "submit", "--checkpoint-signal", "SIGUSR1", "--checkpoint-url",
                      "http://x/", "--", "true")  # fmt: skip
    assert two.exit_code == 2 and "one of --checkpoint-signal" in two.output
    assert service.run("billing", "--since", "yesterday").exit_code == 2
    assert service.run("jobs", "submit", "--memory", "12 parsecs", "--", "true").exit_code == 2


def test_parsers() -> None:
    assert parse_mib("16Gi", "--memory") == 16384 and parse_mib("512Mi", "-") == 512
    assert parse_mib("1024", "-") == 1024 and parse_mib("1.5GiB", "-") == 1536
    assert parse_cpu_milli("2") == 2000 and parse_cpu_milli("0.5") == 500
    assert parse_cpu_milli("250m") == 250
    assert parse_time("1700000000", "-") == 1_700_000_000.0
    assert parse_time("2026-01-01", "-") == 1767225600.0  # UTC midnight
    assert parse_time("2026-01-01T01:00+01:00", "-") == 1767225600.0
    for bad in ("-1", "two"):
        with pytest.raises(click.BadParameter):
            parse_cpu_milli(bad)


def test_job_spec_follows_the_contract() -> None:
    parsed = submit.make_context("submit", ["--", "true"]).params
    defaults = {k: v for k, v in parsed.items() if k not in ("command", "url", "token_file")}
    opts = {**defaults, "priority": "inference", "tasks": 2, "gpus": 1, "gpu_milli": 1000,
            "mig_profile": "3g.40gb", "gpu_model": ("H100-80GB", "A100-80GB"), "gpu_memory": "40Gi",
            "cpu": "1.5", "memory": "2Gi", "checkpoint_url": "http://127.0.0.1:9/ckpt", "grace": 12.5,
            "tenant": "team-b"}  # fmt: skip
    spec = job_spec(["/usr/bin/serve", "--port", "80"], **opts)
    assert spec == {
        "name": "serve", "command": ["/usr/bin/serve", "--port", "80"], "priority": "inference",
        "interruptible": False, "tasks": 2, "gpus_per_task": 1, "gpu_milli": 1000,
        "mig_profile": "3g.40gb", "gpu_models": ["H100-80GB", "A100-80GB"],
        "gpu_memory_mib": 40960, "cpu_milli": 1500, "memory_mib": 2048,
        "checkpoint": {"kind": "url", "target": "http://127.0.0.1:9/ckpt"},
        "grace_period_s": 12.5, "idempotency_key": None, "tenant": "team-b",
    }  # fmt: skip
    plain = job_spec(["true"], **defaults)
    assert plain["checkpoint"] is None and "tenant" not in plain and plain["cpu_milli"] == 0
