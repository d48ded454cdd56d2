"""A node agent killed with SIGKILL and started again, with real processes: the agent runs in a
child process that kills itself at a chosen point, and a new ``TaskTable`` on the same workdir
plays the restarted agent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from service_helpers import A, submit  # this directory's helpers, imported by path

from gpuwarden.scheduler._agent_tasks import WRAPPER, TaskTable

# appends a line to ./ran (the checkpoint directory) when it starts, exits once ./go exists
TASK = """
import os, sys, time
with open("ran", "a") as f:
    f.write("ran\\n")
while not os.path.exists("go"):
    time.sleep(0.05)
sys.exit(int(sys.argv[1]))
"""

# the agent, dying by SIGKILL when told: "before-the-process" right after it saved a task whose
# process does not exist yet, "recording-the-pid" as it is about to save a task's pid, and
# "after-start" once every order is started and saved
AGENT = """
import json, os, signal, sys
from pathlib import Path
from gpuwarden.scheduler._agent_tasks import TaskTable

workdir, orders, crash = Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]

class Table(TaskTable):
    def save(self):
        pids = [t.pid for t in self.tasks.values()]
        if crash == "recording-the-pid" and any(p is not None for p in pids):
            os.kill(os.getpid(), signal.SIGKILL)
        super().save()
        if crash == "before-the-process" and any(p is None for p in pids):
            os.kill(os.getpid(), signal.SIGKILL)

table = Table(workdir)
for order in orders:
    table.start(order)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _order(job_id: str, code: int = 0) -> dict:
    return {"job_id": job_id, "attempt": 1, "task": 0, "gpus": [0],
            "command": [sys.executable, "-c", TASK, str(code)]}  # fmt: skip


def _crashed_agent(workdir: Path, orders: list[dict], crash: str) -> None:
    done = subprocess.run([sys.executable, "-c", AGENT, str(workdir), json.dumps(orders), crash],
                          capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()


def _wait_for(what: str, check, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def _until_exited(table: TaskTable, key: tuple) -> None:
    def exited() -> bool:
        table.poll()
        return table.tasks[key].state == "exited"

    _wait_for(f"{key} to exit", exited)


def _sync(svc, table: TaskTable) -> dict:
    """One round of ``Agent.step`` against the service in this process."""
    table.poll()
    report = table.report()
    logs = [{k: v for k, v in c.items() if k != "size"} for c in report["logs"]]
    orders = svc.agent_sync("n1", {"tasks": report["tasks"], "logs": logs})
    table.acknowledged(report)
    return orders


@pytest.fixture
def reaped(tmp_path):
    """After the test, kill every task still running under ``tmp_path``: those a table knows,
    and those only a wrapper's pid file names (an agent that died before it saved one)."""
    tables: list[TaskTable] = []
    yield tables.append
    groups = {t.pid for table in tables for t in table.tasks.values() if t.state == "running"}
    for pid_file in (tmp_path / "tasks").glob("*.pid"):
        if not pid_file.with_suffix(".exit").exists():  # else its wrapper is gone
            groups.add(json.loads(pid_file.read_text())["pid"])
    for pid in groups - {None}:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("code", [0, 3])
def test_a_restarted_agent_reads_the_exit_status_of_a_task_it_adopted(tmp_path, code, reaped):
    _crashed_agent(tmp_path, [_order("j1", code)], "after-start")
    table = TaskTable(tmp_path)  # the agent again, on the same workdir
    reaped(table)
    key = ("j1", 1, 0)
    assert table.tasks[key].state == "running"
    (tmp_path / "checkpoints" / "j1" / "go").touch()
    _until_exited(table, key)
    (entry,) = table.report()["tasks"]
    assert entry["state"] == "exited" and entry["exit_code"] == code


def test_adopted_tasks_stopped_report_the_signal_or_unknown_when_the_wrapper_died(tmp_path, reaped):
    _crashed_agent(tmp_path, [_order("stopped"), _order("killed")], "after-start")
    for job in ("stopped", "killed"):  # each task runs, so its wrapper has its handlers
        _wait_for(f"{job} to run", (tmp_path / "checkpoints" / job / "ran").exists)
    table = TaskTable(tmp_path)
    reaped(table)
    table.stop({"job_id": "stopped", "attempt": 1, "task": 0})  # SIGTERM to the process group
    pid = table.tasks[("killed", 1, 0)].pid
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)  # not the agent's doing: wrapper and task die together
    _until_exited(table, ("stopped", 1, 0))
    _until_exited(table, ("killed", 1, 0))
    codes = {t["job_id"]: t["exit_code"] for t in table.report()["tasks"]}
    assert codes == {"stopped": -signal.SIGTERM, "killed": None}


def test_killed_before_saving_the_pid_the_task_is_adopted_and_never_started_twice(tmp_path, reaped):
    order = _order("j1")
    _crashed_agent(tmp_path, [order], "recording-the-pid")
    ran = tmp_path / "checkpoints" / "j1" / "ran"
    _wait_for("the task to run", ran.exists)  # it started once; its agent is gone
    table = TaskTable(tmp_path)
    reaped(table)
    table.start(order)  # the service orders the start again until it hears of the key
    key = ("j1", 1, 0)
    assert table.tasks[key].state == "running" and table.tasks[key].pid is not None
    (tmp_path / "checkpoints" / "j1" / "go").touch()
    _until_exited(table, key)
    assert table.tasks[key].exit_code == 0
    assert ran.read_text() == "ran\n"


def test_killed_before_the_process_the_task_is_failed_and_never_started(tmp_path, reaped):
    order = _order("j1")
    _crashed_agent(tmp_path, [order], "before-the-process")
    table = TaskTable(tmp_path)
    reaped(table)
    table.start(order)
    (entry,) = table.report()["tasks"]
    assert entry["state"] == "exited" and entry["exit_code"] is None
    assert "did not start and is not started again" in table.report()["logs"][0]["text"]
    # had the dead agent's wrapper been merely slow, it finds the launch given up
    ckdir = tmp_path / "checkpoints" / "j1"
    late = subprocess.run([sys.executable, "-I", "-S", WRAPPER, str(tmp_path / "tasks" / "j1.1.0"),
                           "--", *order["command"]], cwd=ckdir, capture_output=True, timeout=60)  # fmt: skip
    assert late.returncode == 1 and b"gave this launch up" in late.stdout
    assert not (ckdir / "ran").exists()


def _service_order(svc, code: int) -> tuple[str, dict]:
    svc.register("n1", {"cpu_milli": 8000, "memory_mib": 65536, "gpus": [
        {"index": 0, "uuid": "GPU-n1-0", "model": "H100-80GB", "memory_mib": 81920}]})  # fmt: skip
    job_id = submit(svc, command=[sys.executable, "-c", TASK, str(code)])
    (order,) = svc.agent_sync("n1", {"tasks": [], "logs": []})["start"]
    return job_id, order


def test_the_service_sees_a_job_succeed_across_an_agent_restart(tmp_path, svc, clock, reaped):
    job_id, order = _service_order(svc, 0)
    _crashed_agent(tmp_path, [order], "after-start")
    table = TaskTable(tmp_path)
    reaped(table)
    assert _sync(svc, table)["start"] == []
    (tmp_path / "checkpoints" / job_id / "go").touch()
    _until_exited(table, (job_id, 1, 0))
    clock.t += 1
    _sync(svc, table)
    job = svc.job(A, job_id)
    assert (job["state"], job["exit_code"]) == ("succeeded", 0)


def test_the_service_fails_a_job_whose_launch_the_agent_died_in(tmp_path, svc, clock, reaped):
    job_id, order = _service_order(svc, 0)
    _crashed_agent(tmp_path, [order], "before-the-process")
    table = TaskTable(tmp_path)
    reaped(table)
    clock.t += 1
    assert _sync(svc, table)["start"] == []  # reported: the start is not ordered again
    job = svc.job(A, job_id)
    assert job["state"] == "failed" and "unknown status" in job["reason"]
    assert "did not start" in svc.logs(A, job_id, attempt=1, task=0)
    assert not (tmp_path / "checkpoints" / job_id / "ran").exists()


def test_an_adopted_task_whose_wrapper_wrote_its_status_is_done_even_if_its_pid_lives_on(
    tmp_path: Path,
) -> None:
    # an earlier agent started the task; its wrapper wrote the status and left, and the pid now
    # belongs to another process (here: this test's own, which is certainly alive)
    state = tmp_path / "agent-state.json"
    (tmp_path / "tasks").mkdir()
    entry = {"job_id": "j", "attempt": 1, "task": 0, "pid": os.getpid(),
             "log": str(tmp_path / "j.log"), "checkpoint_dir": str(tmp_path)}  # fmt: skip
    state.write_text(json.dumps([entry]))
    (tmp_path / "tasks" / "j.1.0.exit").write_text("0\n")
    table = TaskTable(tmp_path)
    table.poll()
    (task,) = table.tasks.values()
    assert (task.state, task.exit_code) == ("exited", 0)


def test_the_agent_process_hides_its_environment_from_its_tasks() -> None:
    # a task runs as the agent's user: /proc/<agent>/environ, with the token, must not be its
    code = (
        "import ctypes; from gpuwarden.scheduler.agent import hide_environment\n"
        "print(hide_environment(), ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"  # PR_GET_DUMPABLE
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "0"]
