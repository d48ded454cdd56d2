"""The node agent's process table: tasks keyed by (job_id, attempt, task), never started twice.

Each task runs in its own session (``start_new_session``), so a checkpoint signal or a stop
reaches the whole process group (a shell and the Python under it alike). Output goes to one file
per task under ``WORKDIR/logs``; the checkpoint directory ``WORKDIR/checkpoints/JOB_ID`` lives as
long as the job, across attempts. The table is written to ``WORKDIR/agent-state.json`` after
every change, so a restarted agent keeps its keys (and so never relaunches a task it already
ran) and keeps watching the processes it left running by pid.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger("gpuwarden.scheduler.agent")

Key = tuple[str, int, int]
SECRET_ENV = frozenset(
    {
        "GPUWARDEN_AGENT_TOKEN",
        "GPUWARDEN_SCHEDULER_TOKEN",
        "GPUWARDEN_SCHEDULER_TOKENS",
        "GPUWARDEN_SCHEDULER_TOKENS_JSON",
        "GPUWARDEN_SCHEDULER_ADMIN_TOKEN",
        "GPUWARDEN_API_TOKEN",
        "GPUWARDEN_SERVE_TOKEN",
        "GPUWARDEN_SLACK_WEBHOOK_URL",
    }
)
MAX_LOG_CHUNK = 64 * 1024  # bytes shipped per task per sync, so one chatty job cannot stall it


@dataclass
class Task:
    job_id: str
    attempt: int
    task: int
    pid: int | None
    log: str
    checkpoint_dir: str
    env: dict[str, str] = field(default_factory=dict)
    state: str = "running"  # running | exited
    exit_code: int | None = None
    shipped: int = 0  # bytes of the log the service has acknowledged
    hooked: bool = False
    stop_sent_at: float | None = None
    killed: bool = False
    acked: bool = False  # the service has its exit and all its output: report it no more
    started_at: float | None = None  # this agent's clock: the service bills from these
    ended_at: float | None = None

    @property
    def key(self) -> Key:
        return (self.job_id, self.attempt, self.task)


class TaskTable:
    """The tasks this agent started, and what it must tell the service about them."""

    def __init__(self, workdir: Path, *, kill_after_s: float = 5.0) -> None:
        self.workdir = workdir
        self.kill_after_s = kill_after_s
        self.state_path = workdir / "agent-state.json"
        self.tasks: dict[Key, Task] = {}
        self._procs: dict[Key, subprocess.Popen[bytes]] = {}
        for d in ("logs", "checkpoints"):
            (workdir / d).mkdir(parents=True, exist_ok=True)
        if self.state_path.exists():
            for entry in json.loads(self.state_path.read_text()):
                t = Task(**entry)
                self.tasks[t.key] = t

    def save(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(t) for t in self.tasks.values()]))
        os.replace(tmp, self.state_path)  # atomic: a crash leaves the old table or the new one

    # ---- orders ----------------------------------------------------------------------------

    def start(self, order: dict[str, Any]) -> None:
        key = (order["job_id"], int(order["attempt"]), int(order["task"]))
        if key in self.tasks:
            return  # a resent order: this key already ran (or runs); never twice
        job_id, attempt, index = key
        ckdir = self.workdir / "checkpoints" / _safe(job_id)
        ckdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "logs" / f"{_safe(job_id)}.{attempt}.{index}.log"
        # the agent's own secrets (its token above all: with it a job could act as any node)
        # never reach a tenant's task, nor the saved task table
        own = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        env = {**own, **{k: str(v) for k, v in order.get("env", {}).items()}}
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in order.get("gpus", []))
        env["GPUWARDEN_CHECKPOINT_DIR"] = str(ckdir)
        task = Task(job_id, attempt, index, None, str(log), str(ckdir),
                    env={k: v for k, v in env.items() if k.startswith(("GPUWARDEN_", "CUDA_"))})  # fmt: skip
        with log.open("ab") as out:
            try:
                proc = subprocess.Popen(
                    order["command"], env=env, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, cwd=ckdir, start_new_session=True,
                )  # fmt: skip
            except OSError as exc:  # no such program: the task fails, the agent goes on
                out.write(f"gpuwarden agent: cannot start {order['command'][0]}: {exc}\n".encode())
                task.state, task.exit_code = "exited", 127
                task.started_at = task.ended_at = time.time()
            else:
                task.started_at = time.time()
                task.pid = proc.pid
                self._procs[key] = proc
        self.tasks[key] = task
        self.save()
        logger.info("started %s attempt %d task %d as pid %s", job_id, attempt, index, task.pid)

    def checkpoint(self, order: dict[str, Any]) -> None:
        """Deliver a checkpoint hook once: a signal to the process group, a command with the
        task's environment, or a POST to a URL."""
        task = self.tasks.get((order["job_id"], int(order["attempt"]), int(order["task"])))
        if task is None or task.hooked or task.state != "running":
            return
        task.hooked = True
        self.save()
        hook = order["hook"]
        try:
            if hook["kind"] == "signal":
                name = hook["target"]
                self._signal(task, int(name) if name.isdigit() else signal.Signals[name])
            elif hook["kind"] == "command":
                with open(task.log, "ab") as out:
                    subprocess.Popen(["/bin/sh", "-c", hook["target"]], env={**os.environ, **task.env},
                                     stdout=out, stderr=subprocess.STDOUT, cwd=task.checkpoint_dir,
                                     start_new_session=True)  # fmt: skip
            elif hook["kind"] == "url":
                import httpx

                httpx.post(hook["target"], json={"job_id": task.job_id, "attempt": task.attempt,
                                                 "task": task.task}, timeout=5)  # fmt: skip
        except Exception as exc:  # a bad signal name, a dead URL: a failing hook stops nothing
            logger.warning("checkpoint hook of %s failed: %s", task.job_id, exc)

    def stop(self, order: dict[str, Any]) -> None:
        """SIGTERM the task's process group now, SIGKILL it ``kill_after_s`` later (``poll``)."""
        task = self.tasks.get((order["job_id"], int(order["attempt"]), int(order["task"])))
        if task is None or task.state != "running" or task.stop_sent_at is not None:
            return
        task.stop_sent_at = time.time()
        self._signal(task, signal.SIGTERM)
        self.save()

    # ---- watching --------------------------------------------------------------------------

    def poll(self) -> None:
        changed = False
        for key, task in self.tasks.items():
            if task.state != "running":
                continue
            code = self._exit_code(key, task)
            if code is not False:
                task.state, task.exit_code, changed = "exited", code, True
                task.ended_at = time.time()
                continue
            if (task.stop_sent_at is not None and not task.killed
                    and time.time() - task.stop_sent_at > self.kill_after_s):  # fmt: skip
                self._signal(task, signal.SIGKILL)
                task.killed, changed = True, True
        if changed:
            self.save()

    def report(self) -> dict[str, Any]:
        """The sync body: every task's state and newest checkpoint, and new log text."""
        tasks, logs = [], []
        for t in self.tasks.values():
            if t.acked:
                continue
            tasks.append({"job_id": t.job_id, "attempt": t.attempt, "task": t.task,
                          "state": t.state, "exit_code": t.exit_code, "pid": t.pid,
                          "started_at": t.started_at, "ended_at": t.ended_at,
                          "checkpoint_at": _newest_mtime(Path(t.checkpoint_dir))})  # fmt: skip
            text, size = _read_from(Path(t.log), t.shipped)
            if size:
                logs.append({"job_id": t.job_id, "attempt": t.attempt, "task": t.task,
                             "text": text, "offset": t.shipped, "size": size})  # fmt: skip
        return {"tasks": tasks, "logs": logs}

    def acknowledged(self, report: dict[str, Any]) -> None:
        """The service took ``report``: do not send its log text again, and stop reporting
        tasks whose exit and whole output it now has (their keys stay, so never started again)."""
        for chunk in report["logs"]:
            task = self.tasks.get((chunk["job_id"], chunk["attempt"], chunk["task"]))
            if task is not None:
                task.shipped = chunk["offset"] + chunk["size"]
        for entry in report["tasks"]:
            task = self.tasks[(entry["job_id"], entry["attempt"], entry["task"])]
            if entry["state"] == "exited" and _size(Path(task.log)) <= task.shipped:
                task.acked = True
        self.save()

    def _exit_code(self, key: Key, task: Task) -> int | None | bool:
        """The exit status once the task ended (None: unknown), False while it runs."""
        proc = self._procs.get(key)
        if proc is not None:
            code = proc.poll()
            return False if code is None else code
        if task.pid is None:
            return None
        try:  # a process left by an earlier agent: not our child, so no status to read
            os.kill(task.pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return False
        return False

    def _signal(self, task: Task, sig: int) -> None:
        if task.pid is None:
            return
        try:
            os.killpg(task.pid, sig)  # the task leads its own session, so pgid == pid
        except ProcessLookupError:
            pass


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _newest_mtime(directory: Path) -> float | None:
    newest = None
    for root, _, files in os.walk(directory):
        for f in files:
            try:
                m = os.stat(os.path.join(root, f)).st_mtime
            except OSError:
                continue
            newest = m if newest is None else max(newest, m)
    return newest


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> tuple[str, int]:
    """Up to ``MAX_LOG_CHUNK`` bytes of ``path`` after ``offset``, cut at a line end when it can
    be, as text; returns (text, bytes consumed)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read(MAX_LOG_CHUNK)
    except OSError:
        return "", 0
    if len(data) == MAX_LOG_CHUNK and b"\n" in data:
        data = data[: data.rindex(b"\n") + 1]
    return data.decode("utf-8", errors="replace"), len(data)
