"""``gpuwarden serve`` killed with SIGKILL while people override GPU states from four threads
(and it collects, scores and writes verdicts): after a restart on the same files every
acknowledged override is in the audit log once, its verdict is stored, and it still holds
against the model, which scores these GPUs ok, for as long as a person's decision is pinned."""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from pathlib import Path

import httpx
from fault_helpers import Load, Proc, free_port, wait_for

TOKEN = "serve-api-token-for-faults"


def serve(tmp_path: Path, port: int, sim: str) -> Proc:
    # --hold 0.001 h: without its pin, an at-risk GPU the model scores low would be ok again
    # 3.6 s later; a person's decision is pinned for --manual-hold 24 h
    args = ["serve", "--collector", sim, "--store", f"sqlite:///{tmp_path / 'tele.db'}",
            "--audit", str(tmp_path / "audit.db"), "--interval", "0.5",
            "--listen", f"127.0.0.1:{port}", "--hold", "0.001", "--manual-hold", "24"]  # fmt: skip
    proc = Proc(args, tmp_path / "serve.log", {"GPUWARDEN_API_TOKEN": TOKEN}).start()
    url = f"http://127.0.0.1:{port}"
    wait_for("8 scored GPUs", lambda: len(httpx.get(f"{url}/v1/gpus").json()) == 8, proc)
    return proc


def verdicts(tmp_path: Path) -> dict[tuple[str, float], tuple[str, str]]:
    conn = sqlite3.connect(tmp_path / "tele.db")
    try:
        rows = conn.execute("SELECT uuid, ts, state, cause FROM verdicts").fetchall()
    finally:
        conn.close()
    return {(u, ts): (state, cause) for u, ts, state, cause in rows}


def test_kill_9_during_overrides_loses_and_duplicates_no_acknowledged_decision(tmp_path: Path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # step=1: the simulated fleet keeps to about the wall clock, so the model always has data
    sim = f"sim://?nodes=2&gpus=4&seed=1&step=1&start={int(time.time()) - 120}"
    proc = serve(tmp_path, port, sim)
    try:
        gpus = sorted(g["uuid"] for g in httpx.get(f"{url}/v1/gpus").json())
        auth = {"Authorization": f"Bearer {TOKEN}"}
        clients = [httpx.Client(base_url=url, timeout=30, headers=auth) for _ in range(4)]

        def send(worker: int, i: int) -> dict:
            uuid = gpus[2 * worker + i % 2]  # each worker owns two GPUs
            change = {"state": "at-risk", "reason": f"w{worker}-{i}", "actor": f"op{worker}"}
            r = clients[worker].post(f"/v1/gpus/{uuid}/state", json=change)
            assert r.status_code == 200, r.text
            return r.json()["transition"]

        load = Load(4, send).start()
        wait_for("100 acknowledged overrides", lambda: load.count() >= 100, proc)
        before = verdicts(tmp_path)  # committed: a reader sees them
        proc.kill_9()
        load.join()
        assert load.in_flight, "the kill did not interrupt the load"
        proc = serve(tmp_path, port, sim)

        # the audit log: each acknowledged decision once, an interrupted one at most once
        audit = sqlite3.connect(tmp_path / "audit.db")
        rows = audit.execute(
            "SELECT reasons FROM audit WHERE source = 'manual' AND hook IS NULL"
        ).fetchall()
        audit.close()
        reasons = Counter(json.loads(r[0])[0] for r in rows)
        assert set(reasons.values()) == {1}
        for worker, i in load.acked:
            assert reasons[f"w{worker}-{i}"] == 1
        assert set(reasons) <= {f"w{w}-{i}" for w, i in [*load.acked, *load.in_flight]}
        # every verdict written before the kill is still there; the verdict of every
        # acknowledged decision that changed a state is stored (a decision that confirms the
        # state a GPU is in changes no verdict: the audit log has it)
        stored = verdicts(tmp_path)
        assert before.items() <= stored.items()
        changed = [t for t in load.acked.values() if t["old_state"] != t["new_state"]]
        assert changed
        for t in changed:
            assert stored[(t["uuid"], t["ts"])] == ("at-risk", "override")
        # and every decision still holds: at-risk, pinned, past the 3.6 s the hold alone gives
        overridden = {t["uuid"] for t in load.acked.values()}
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            states = {g["uuid"]: g for g in httpx.get(f"{url}/v1/gpus").json()}
            for uuid in overridden:
                assert states[uuid]["state"] == "at-risk", states[uuid]
                assert states[uuid]["pinned_until"] is not None, states[uuid]
            time.sleep(0.5)
        for c in clients:
            c.close()
    finally:
        proc.stop()
