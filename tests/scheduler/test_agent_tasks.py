"""The node agent's process table with real processes: one start per key, hooks, stops, restarts."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import time
from pathlib import Path

from service_helpers import until_state  # this directory's helpers, imported by path

from gpuwarden.scheduler._agent_tasks import TaskTable, _alive
from gpuwarden.scheduler.agent import host_inventory

STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # makes the agent escalate to SIGKILL
print("up", flush=True)
time.sleep(60)
"""


def _order(job_id: str, command: list[str], attempt: int = 1) -> dict:
    return {"job_id": job_id, "attempt": attempt, "task": 0, "command": command, "gpus": [2, 3],
            "env": {"GPUWARDEN_ATTEMPT": str(attempt), "GPUWARDEN_RESUME": "0"}}  # fmt: skip


def test_starts_once_reports_exit_and_ships_logs_by_offset(tmp_path):
    table = TaskTable(tmp_path)
    script = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['GPUWARDEN_CHECKPOINT_DIR'])"
    order = _order("j1", [sys.executable, "-c", script])
    table.start(order)
    table.start(order)  # a resent order
    assert list(table.tasks) == [("j1", 1, 0)]
    until_state(table, ("j1", 1, 0), "exited")
    report = table.report()
    assert report["tasks"][0]["exit_code"] == 0
    (chunk,) = report["logs"]
    assert chunk["text"] == f"2,3 {tmp_path / 'checkpoints' / 'j1'}\n" and chunk["offset"] == 0
    table.acknowledged(report)
    assert table.report() == {"tasks": [], "logs": []}  # the service has it all: not again
    again = TaskTable(tmp_path)  # a restarted agent keeps its keys: never twice
    again.start(order)
    assert again.tasks[("j1", 1, 0)].exit_code == 0 and again.report()["tasks"] == []


def test_acknowledged_tasks_leave_the_table_after_a_week(tmp_path):
    table = TaskTable(tmp_path)
    for job in ("old", "recent"):
        table.start(_order(job, [sys.executable, "-c", "pass"]))
        until_state(table, (job, 1, 0), "exited")
    report = table.report()
    table.acknowledged(report)
    table.tasks[("old", 1, 0)].ended_at = time.time() - 8 * 86400
    table.acknowledged({"tasks": [], "logs": []})  # the next sync
    assert list(TaskTable(tmp_path).tasks) == [("recent", 1, 0)]  # saved without it


def test_command_hook_and_stop_escalation(tmp_path):
    table = TaskTable(tmp_path, kill_after_s=0.5)
    key = ("j2", 1, 0)
    table.start(_order("j2", [sys.executable, "-c", STUBBORN]))
    log, deadline = Path(table.tasks[key].log), time.monotonic() + 10
    while "up" not in log.read_text() and time.monotonic() < deadline:  # its handler is set
        time.sleep(0.05)
    hook = {"kind": "command", "target": 'echo "hook for attempt $GPUWARDEN_ATTEMPT" > saved'}
    table.checkpoint({"job_id": "j2", "attempt": 1, "task": 0, "hook": hook})
    saved = tmp_path / "checkpoints" / "j2" / "saved"
    while not (saved.exists() and saved.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert saved.read_text() == "hook for attempt 1\n"
    assert table.report()["tasks"][0]["checkpoint_at"] is not None  # the file counts
    table.stop({"job_id": "j2", "attempt": 1, "task": 0})
    until_state(table, key, "exited")
    assert table.tasks[key].killed and table.tasks[key].exit_code == -9


COUNTS_USR1 = """
import os, signal, time
seen = []
signal.signal(signal.SIGUSR1, lambda *_: seen.append(1) or print("usr1", len(seen), flush=True))
print("up", flush=True)
while not os.path.exists("go"):
    time.sleep(0.05)
"""


def test_a_checkpoint_signal_reaches_the_task_once_and_the_task_runs_on(tmp_path):
    # the task runs under a wrapper in its process group; the signal must neither end the
    # wrapper (the agent would see the task exit) nor reach the task twice (two checkpoints)
    table, key = TaskTable(tmp_path), ("j4", 1, 0)
    table.start(_order("j4", [sys.executable, "-c", COUNTS_USR1]))
    log, deadline = Path(table.tasks[key].log), time.monotonic() + 10
    while "up" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    hook = {"kind": "signal", "target": "SIGUSR1"}
    table.checkpoint({"job_id": "j4", "attempt": 1, "task": 0, "hook": hook})
    while "usr1" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # time for a second delivery, were there one
    table.poll()
    assert table.tasks[key].state == "running"
    (tmp_path / "checkpoints" / "j4" / "go").touch()
    until_state(table, key, "exited")
    assert table.tasks[key].exit_code == 0 and log.read_text() == "up\nusr1 1\n"


def test_a_wrapper_killed_alone_takes_its_task_with_it(tmp_path):
    # else the task would hold its GPUs after the agent reported it exited
    table, key = TaskTable(tmp_path), ("j5", 1, 0)
    script = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"
    table.start(_order("j5", [sys.executable, "-c", script]))
    log, deadline = Path(table.tasks[key].log), time.monotonic() + 10
    while not log.read_text().endswith("\n") and time.monotonic() < deadline:
        time.sleep(0.05)
    task_pid, wrapper_pid = int(log.read_text()), table.tasks[key].pid
    assert wrapper_pid is not None and task_pid != wrapper_pid
    os.kill(wrapper_pid, signal.SIGKILL)
    until_state(table, key, "exited")
    assert table.tasks[key].exit_code == -signal.SIGKILL
    while _alive(task_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(task_pid)


def test_a_missing_program_fails_the_task_not_the_agent(tmp_path):
    table = TaskTable(tmp_path)
    table.start(_order("j3", ["/no/such/program"]))
    until_state(table, ("j3", 1, 0), "exited")
    assert table.tasks[("j3", 1, 0)].exit_code == 127
    assert "cannot start /no/such/program" in table.report()["logs"][0]["text"]


def _fake_nvml():
    # tests/collectors is not on sys.path from here: load its fake NVML by path
    name = "gpuwarden_tests_fake_nvml"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "collectors" / "fake_nvml.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name].FakeNvml


def test_inventory_from_a_recorded_nvml_host():
    from gpuwarden.collectors.nvml import NvmlCollector

    fake = _fake_nvml()("h100_hgx_8gpu.json")
    inv = host_inventory("n1", fake_gpus=None, gpu_model="",
                         collector=NvmlCollector(nvml=fake, hostname="n1"))  # fmt: skip
    assert [g["index"] for g in inv.gpus] == list(range(8))
    assert all(g["uuid"].startswith("GPU-") and "H100" in g["model"] for g in inv.gpus)
    assert all(g["memory_mib"] and g["memory_mib"] > 70000 for g in inv.gpus)
    fakes = host_inventory("n1", fake_gpus=3, gpu_model="A100-80GB")
    assert [g["memory_mib"] for g in fakes.gpus] == [81920] * 3 and fakes.cpu_milli > 0


def test_the_agents_own_tokens_never_reach_a_task(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUWARDEN_AGENT_TOKEN", "agent-secret-123")
    monkeypatch.setenv("GPUWARDEN_SCHEDULER_ADMIN_TOKEN", "admin-secret-456")
    monkeypatch.setenv("SOME_SETTING", "kept")
    table = TaskTable(tmp_path)
    script = "import os; print(sorted(k for k in os.environ if 'TOKEN' in k), os.environ['SOME_SETTING'])"
    table.start(_order("j9", [sys.executable, "-c", script]))
    until_state(table, ("j9", 1, 0), "exited")
    (chunk,) = table.report()["logs"]
    assert chunk["text"] == "[] kept\n"
    saved = (tmp_path / "agent-state.json").read_text()
    assert "secret" not in saved


def test_a_command_hook_gets_the_tasks_environment_not_the_agents_tokens(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUWARDEN_AGENT_TOKEN", "agent-secret-123")
    table, key = TaskTable(tmp_path), ("j10", 1, 0)
    table.start(_order("j10", [sys.executable, "-c", STUBBORN]))
    hook = {"kind": "command", "target": 'echo "[$GPUWARDEN_AGENT_TOKEN] $GPUWARDEN_ATTEMPT" > env'}
    table.checkpoint({"job_id": "j10", "attempt": 1, "task": 0, "hook": hook})
    env, deadline = tmp_path / "checkpoints" / "j10" / "env", time.monotonic() + 10
    while not (env.exists() and env.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    table.stop({"job_id": "j10", "attempt": 1, "task": 0})
    table.kill_after_s = 0.0
    until_state(table, key, "exited")
    assert env.read_text() == "[] 1\n"


def test_one_sync_ships_a_bounded_share_of_log_and_every_task_gets_its_turn(tmp_path):
    """Many chatty tasks: a sync body must stay inside the service's body limit (a refused sync
    would be resent unchanged), and no task's output may wait behind the others for long."""
    from gpuwarden.scheduler._agent_tasks import MAX_LOG_CHUNK, MAX_SYNC_LOG_BYTES, Task
    from gpuwarden.scheduler.api import DEFAULT_MAX_BODY_BYTES

    table = TaskTable(tmp_path)
    n = 2 * MAX_SYNC_LOG_BYTES // MAX_LOG_CHUNK  # twice what one sync ships
    for i in range(n):
        log = tmp_path / "logs" / f"t{i}.log"
        log.write_bytes(b"\x01" * MAX_LOG_CHUNK)  # a control byte: six bytes once in JSON
        table.tasks[(f"j{i}", 1, 0)] = Task(f"j{i}", 1, 0, None, str(log), str(tmp_path))
    shipped: set[str] = set()
    for _ in range(3):
        report = table.report()
        assert sum(c["size"] for c in report["logs"]) <= MAX_SYNC_LOG_BYTES
        body = json.dumps({"tasks": report["tasks"], "logs": [
            {k: v for k, v in c.items() if k != "size"} for c in report["logs"]]})  # fmt: skip
        assert len(body.encode()) < DEFAULT_MAX_BODY_BYTES
        assert len(report["tasks"]) == n  # every task's state goes every time
        table.acknowledged(report)
        shipped |= {c["job_id"] for c in report["logs"]}
    assert shipped == {f"j{i}" for i in range(n)}
