"""``gpuwarden scheduler serve`` killed with SIGKILL while tenants submit jobs from four threads:
after a restart on the same database every acknowledged job is there once, nothing is
duplicated, and a submission that was in flight, retried with its idempotency key, ends up
there once too."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import httpx
from fault_helpers import Load, Proc, free_port, wait_for

from gpuwarden.scheduler._auth import node_token

TOKENS = {"team-a": "token-of-team-a", "team-b": "token-of-team-b"}
ADMIN, SECRET = "admin-token-for-faults", "agent-secret-for-faults"


def serve(tmp_path: Path, port: int) -> Proc:
    env = {
        "GPUWARDEN_SCHEDULER_TOKENS_JSON": json.dumps(TOKENS),
        "GPUWARDEN_SCHEDULER_ADMIN_TOKEN": ADMIN,
        "GPUWARDEN_AGENT_SECRET": SECRET,
    }
    args = ["scheduler", "serve", "--db", str(tmp_path / "sched.db"), "--port", str(port),
            "--node-timeout", "3600", "--round-every", "0.2"]  # fmt: skip
    proc = Proc(args, tmp_path / "sched.log", env).start()
    url = f"http://127.0.0.1:{port}"
    wait_for("the scheduler", lambda: httpx.get(f"{url}/healthz").status_code in (200, 503), proc)
    return proc


def body(worker: int, i: int) -> dict:
    key = f"w{worker}-{i}"
    # every other job takes a GPU, so placement rounds and GPU bookkeeping run under the load
    return {"name": key, "command": ["true"], "idempotency_key": key, "cpu_milli": 10,
            "gpus_per_task": i % 2}  # fmt: skip


def test_kill_9_during_submissions_loses_and_duplicates_no_acknowledged_job(tmp_path: Path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = serve(tmp_path, port)
    try:
        agent = {"Authorization": f"Bearer {node_token(SECRET, 'n1')}"}
        gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB"} for i in range(8)]
        r = httpx.post(f"{url}/v1/agents/n1/register", headers=agent,
                       json={"cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus})  # fmt: skip
        assert r.status_code == 200, r.text
        clients = [httpx.Client(base_url=url, timeout=30, headers={
            "Authorization": f"Bearer {TOKENS['team-a' if w % 2 else 'team-b']}"})
            for w in range(4)]  # fmt: skip

        def send(worker: int, i: int) -> str:
            r = clients[worker].post("/v1/jobs", json=body(worker, i))
            assert r.status_code == 201, r.text
            return r.json()["job_id"]

        load = Load(4, send).start()
        wait_for("200 acknowledged submissions", lambda: load.count() >= 200, proc)
        proc.kill_9()  # while the four threads are still submitting
        load.join()
        assert load.in_flight, "the kill did not interrupt the load"

        proc = serve(tmp_path, port)
        admin = httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {ADMIN}"})
        jobs = admin.get("/v1/jobs").json()
        names = Counter(j["name"] for j in jobs)
        assert [n for n, k in names.items() if k > 1] == []  # nothing duplicated
        by_name = {j["name"]: j for j in jobs}
        for (worker, i), job_id in load.acked.items():  # nothing acknowledged lost
            assert by_name[f"w{worker}-{i}"]["job_id"] == job_id
        tried = {f"w{w}-{i}" for w, i in [*load.acked, *load.in_flight]}
        assert set(names) <= tried  # and nothing made up
        # the submissions cut off by the kill, retried with their keys, end up there once
        for worker, i in load.in_flight:
            r = clients[worker].post("/v1/jobs", json=body(worker, i))
            assert r.status_code in (200, 201), r.text
        names = Counter(j["name"] for j in admin.get("/v1/jobs").json())
        assert len(names) == len(load.acked) + len(load.in_flight)
        assert set(names.values()) == {1}
        # the rebuilt scheduler holds what the database says: placed jobs on distinct GPUs
        running = [j for j in admin.get("/v1/jobs?state=running").json() if j["placement"]]
        held = [g for j in running for t in j["placement"] for g in t["gpus"]]
        assert len(held) == len(set(held)) <= 8
        assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
        for c in [*clients, admin]:
            c.close()
    finally:
        proc.stop()
