"""The node agent's process table: tasks keyed by (job_id, attempt, task), never started twice.

Each task runs under ``_task_wrapper`` in its own session (``start_new_session``), so a
checkpoint signal or a stop reaches the whole process group (the wrapper, a shell and the Python
under it alike), and its exit status lands in ``WORKDIR/tasks/KEY.exit`` whoever is watching.
Output goes to one file per task under ``WORKDIR/logs``; the checkpoint directory
``WORKDIR/checkpoints/JOB_ID`` lives as long as the job, across attempts. The table is written
to ``WORKDIR/agent-state.json`` after every change, and a task's entry ("launching") before its
process exists, so a restarted agent keeps its keys (and so never relaunches a task it already
ran, even one whose launch the crash cut short) and keeps watching the processes it left
running by pid, reading their exit status from their files.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuwarden.errors import DeviceSetupError, OutboundRefused
from gpuwarden.outbound import OutboundPolicy, post_json
from gpuwarden.scheduler._agent_sharing import MPS, GpuSharing, share_kind
from gpuwarden.scheduler._task_wrapper import claim, write_atomic

logger = logging.getLogger("gpuwarden.scheduler.agent")

Key = tuple[str, int, int]
SECRET_ENV = frozenset(
    {
        "GPUWARDEN_AGENT_TOKEN",
        "GPUWARDEN_AGENT_SECRET",  # the master of every node's token, should a node hold it
        "GPUWARDEN_SCHEDULER_TOKEN",
        "GPUWARDEN_SCHEDULER_TOKENS",
        "GPUWARDEN_SCHEDULER_TOKENS_JSON",
        "GPUWARDEN_SCHEDULER_ADMIN_TOKEN",
        "GPUWARDEN_API_TOKEN",
        "GPUWARDEN_SERVE_TOKEN",
        "GPUWARDEN_SLACK_WEBHOOK_URL",
        "GPUWARDEN_SLACK_BOT_TOKEN",
        "GPUWARDEN_LLM_API_KEY",
    }
)
#: How long the key of a task the service has acknowledged is kept: a resent order for it is
#: refused meanwhile; later the service has long forgotten the attempt, and the table (written
#: on every change) would otherwise grow with every task the node ever ran.
ACKED_KEEP_S = 7 * 86400.0
MAX_LOG_CHUNK = 64 * 1024  # bytes shipped per task per sync, so one chatty job cannot stall it
#: Log bytes shipped per sync, all tasks together: JSON escaping makes a sync at most six times
#: this, inside the service's body limit (``api.DEFAULT_MAX_BODY_BYTES``); the rest goes next time.
MAX_SYNC_LOG_BYTES = 4 << 20
# by path, not ``-m``: the isolated interpreter (-I -S) sees neither PYTHONPATH nor site-packages
WRAPPER = str(Path(__file__).resolve().with_name("_task_wrapper.py"))


@dataclass
class Task:
    job_id: str
    attempt: int
    task: int
    pid: int | None  # the wrapper's, which leads the task's process group (pgid == pid)
    log: str
    checkpoint_dir: str
    env: dict[str, str] = field(default_factory=dict)
    state: str = "running"  # launching (saved before its process exists) | running | exited
    exit_code: int | None = None
    shipped: int = 0  # bytes of the log the service has acknowledged
    hooked: bool = False
    stop_sent_at: float | None = None
    killed: bool = False
    acked: bool = False  # the service has its exit and all its output: report it no more
    started_at: float | None = None  # this agent's clock: the service bills from these
    ended_at: float | None = None
    gpus: list[int] = field(default_factory=list)
    share: str = ""  # "mig", "mps" or "" (``_agent_sharing``)
    released: bool = True  # its MIG instance or MPS slot is given back (False until then)

    @property
    def key(self) -> Key:
        return (self.job_id, self.attempt, self.task)


class TaskTable:
    """The tasks this agent started, and what it must tell the service about them."""

    def __init__(
        self,
        workdir: Path,
        *,
        kill_after_s: float = 5.0,
        hook_policy: OutboundPolicy | None = None,
        sharing: GpuSharing | None = None,
        n_gpus: int = 0,
    ) -> None:
        self.workdir = workdir
        #: MIG instances and MPS daemons; None: every task gets its GPU indices, nothing more
        self.sharing = sharing
        self.kill_after_s = kill_after_s
        #: where a checkpoint hook of kind ``url`` may POST (the ``hook_allow`` setting)
        self.hook_policy = hook_policy or OutboundPolicy()
        self._log_turn = 0  # the task whose log ships first in the next report
        self.state_path = workdir / "agent-state.json"
        self.tasks: dict[Key, Task] = {}
        self._procs: dict[Key, subprocess.Popen[bytes]] = {}
        for d in ("logs", "checkpoints", "tasks"):
            (workdir / d).mkdir(parents=True, exist_ok=True)
        if self.state_path.exists():
            for entry in json.loads(self.state_path.read_text()):
                t = Task(**entry)
                self.tasks[t.key] = t
            launching = [t for t in self.tasks.values() if t.state == "launching"]
            for t in launching:
                self._finish_launch(t)
            if launching:
                self.save()
        if sharing is not None:
            running = [t for t in self.tasks.values() if t.state == "running"]
            sharing.reconcile({_share_key(t) for t in running},
                              [g for t in running if t.share == MPS for g in t.gpus], n_gpus)  # fmt: skip

    def save(self) -> None:
        """On disk before it returns; a crash leaves the old table or the new one."""
        write_atomic(str(self.state_path), json.dumps([asdict(t) for t in self.tasks.values()]))

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
        env = {**_own_env(), **{k: str(v) for k, v in order.get("env", {}).items()}}
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in order.get("gpus", []))
        env["GPUWARDEN_CHECKPOINT_DIR"] = str(ckdir)
        task = Task(job_id, attempt, index, None, str(log), str(ckdir), state="launching",
                    gpus=[int(g) for g in order.get("gpus", [])], share=share_kind(order))  # fmt: skip
        refused = self._set_up_gpus(task, order, env)
        task.env = {k: v for k, v in env.items() if k.startswith(("GPUWARDEN_", "CUDA_"))}
        self.tasks[key] = task
        if refused is not None:  # its MIG instance or MPS daemon could not be had: it fails
            with log.open("ab") as out:
                out.write(f"gpuwarden agent: cannot set up the task's GPUs: {refused}\n".encode())
            task.state, task.exit_code = "exited", 126
            task.started_at = task.ended_at = time.time()
            self.save()
            return
        self.save()  # before the process exists: killed from here on, we never launch it again
        argv = [sys.executable, "-I", "-S", WRAPPER, self._stem(task), "--", *order["command"]]
        with log.open("ab") as out:
            try:
                proc = subprocess.Popen(
                    argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, cwd=ckdir, start_new_session=True,
                )  # fmt: skip
            except OSError as exc:  # no interpreter for the wrapper: the task fails, not the agent
                out.write(f"gpuwarden agent: cannot start {order['command'][0]}: {exc}\n".encode())
                task.state, task.exit_code = "exited", 127
                task.started_at = task.ended_at = time.time()
            else:
                task.state, task.pid, task.started_at = "running", proc.pid, time.time()
                self._procs[key] = proc
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
                    subprocess.Popen(["/bin/sh", "-c", hook["target"]], env={**_own_env(), **task.env},
                                     stdout=out, stderr=subprocess.STDOUT, cwd=task.checkpoint_dir,
                                     start_new_session=True)  # fmt: skip
            elif hook["kind"] == "url":
                post_json(hook["target"], {"job_id": task.job_id, "attempt": task.attempt,
                          "task": task.task}, policy=self.hook_policy, timeout_s=5)  # fmt: skip
        except OutboundRefused as exc:  # the tenant reads why in the task's log
            logger.warning("checkpoint hook of %s refused: %s", task.job_id, exc)
            with open(task.log, "ab") as out:
                out.write(f"gpuwarden agent: checkpoint hook refused: {exc}\n".encode())
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
        changed = self._release_ended()
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
        changed = self._release_ended() or changed
        if changed:
            self.save()

    def report(self) -> dict[str, Any]:
        """The sync body: every task's state and newest checkpoint, and new log text (at most
        ``MAX_SYNC_LOG_BYTES``, starting from a different task each time so none waits long)."""
        live = [t for t in self.tasks.values() if not t.acked and t.state != "launching"]
        tasks = [{"job_id": t.job_id, "attempt": t.attempt, "task": t.task, "state": t.state,
                  "exit_code": t.exit_code, "pid": t.pid, "started_at": t.started_at,
                  "ended_at": t.ended_at, "checkpoint_at": _newest_mtime(Path(t.checkpoint_dir))}
                 for t in live]  # fmt: skip
        logs, budget = [], MAX_SYNC_LOG_BYTES
        self._log_turn = (self._log_turn + 1) % max(1, len(live))
        for t in live[self._log_turn :] + live[: self._log_turn]:
            if budget <= 0:
                break
            text, size = _read_from(Path(t.log), t.shipped)
            if size:
                budget -= size
                logs.append({"job_id": t.job_id, "attempt": t.attempt, "task": t.task,
                             "text": text, "offset": t.shipped, "size": size})  # fmt: skip
        return {"tasks": tasks, "logs": logs}

    def acknowledged(self, report: dict[str, Any]) -> None:
        """The service took ``report``: do not send its log text again, and stop reporting
        tasks whose exit and whole output it now has (their keys stay for ``ACKED_KEEP_S``, so
        a resent order never starts them again)."""
        changed = False
        for chunk in report["logs"]:
            task = self.tasks.get((chunk["job_id"], chunk["attempt"], chunk["task"]))
            if task is not None and task.shipped != chunk["offset"] + chunk["size"]:
                task.shipped = chunk["offset"] + chunk["size"]
                changed = True
        done = []
        for entry in report["tasks"]:
            task = self.tasks[(entry["job_id"], entry["attempt"], entry["task"])]
            if entry["state"] == "exited" and _size(Path(task.log)) <= task.shipped:
                task.acked = True
                done.append(task)
        old = [k for k, t in self.tasks.items() if t.acked and _ended_before(t, ACKED_KEEP_S)]
        for key in old:
            del self.tasks[key]
            self._procs.pop(key, None)
        if changed or done or old:  # a sync a second: rewrite the table only when it says more
            self.save()
        for task in done:
            if task.pid is not None:  # else the file is a given-up claim a late wrapper must see
                for suffix in (".pid", ".exit"):
                    Path(self._stem(task) + suffix).unlink(missing_ok=True)

    def _exit_code(self, key: Key, task: Task) -> int | None | bool:
        """The exit status once the task ended (None: unknown), False while it runs. The
        process first, the file second: the wrapper writes the file before it exits."""
        exit_file = self._stem(task) + ".exit"
        proc = self._procs.get(key)
        if proc is not None:
            code = proc.poll()
            if code is None:
                return False
        elif task.pid is None:
            return None
        else:  # left by an earlier agent: not our child, so no waitpid()
            # its file first: the wrapper writes it as its last act, and once the wrapper is
            # gone its pid may belong to another process that would look like the task
            recorded = _read_exit(exit_file)
            if recorded is not None:
                return recorded
            if _alive(task.pid):
                return False
            code = -signal.SIGKILL if task.killed else None  # ours was the SIGKILL, or unknown
        recorded = _read_exit(exit_file)
        if recorded is not None:
            return recorded
        # the wrapper died without writing (SIGKILL): end what is left of the task, so that it
        # has really exited when the service gives its GPUs to the next job
        self._signal(task, signal.SIGKILL)
        return code

    def _finish_launch(self, task: Task) -> None:
        """A launch an earlier agent died in: adopt its wrapper if it got going, else give the
        launch up for good (a wrapper that comes late finds the claim taken and starts nothing)
        and report the task exited with an unknown status, so the service fails its attempt."""
        pid_file = self._stem(task) + ".pid"
        if not claim(pid_file, json.dumps({"pid": None, "given_up_at": time.time()})):
            try:
                got = json.loads(Path(pid_file).read_text())
            except (OSError, ValueError):
                got = {}
            if isinstance(got.get("pid"), int):
                task.state, task.pid = "running", got["pid"]
                task.started_at = got.get("started_at") or time.time()
                logger.warning("adopted %s attempt %d task %d, launched as pid %d by an agent "
                               "that died", task.job_id, task.attempt, task.task, task.pid)  # fmt: skip
                return
        task.state, task.exit_code = "exited", None
        task.started_at = task.ended_at = time.time()
        with open(task.log, "ab") as out:
            out.write(b"gpuwarden agent: the agent died while starting this task; it did not "
                      b"start and is not started again\n")  # fmt: skip
        logger.warning("gave up %s attempt %d task %d: the agent died while starting it",
                       task.job_id, task.attempt, task.task)  # fmt: skip

    def _set_up_gpus(self, task: Task, order: dict[str, Any], env: dict[str, str]) -> str | None:
        """Give ``task`` its MIG instance or MPS slot (``_agent_sharing``), into ``env``; why
        not, when that cannot be done."""
        if self.sharing is None:
            return None
        try:
            env.update(self.sharing.prepare(_share_key(task), order))
        except DeviceSetupError as exc:
            logger.warning("cannot set up GPUs of %s: %s", task.job_id, exc)
            return str(exc)
        task.released = task.share == ""
        return None

    def _release_ended(self) -> bool:
        """Give back the MIG instances and MPS slots of ended tasks; those NVML refuses now
        (processes still leaving) are tried again at the next poll. Whether any was."""
        if self.sharing is None:
            return False
        done = False
        for task in self.tasks.values():
            if task.released or task.state != "exited":
                continue
            mps = [g for t in self.tasks.values() if t.state == "running" and t.share == MPS
                   for g in t.gpus]  # fmt: skip
            try:
                self.sharing.release(_share_key(task), task.share, task.gpus, mps)
            except DeviceSetupError as exc:
                logger.warning("cannot yet release GPUs of %s: %s", task.job_id, exc)
                continue
            task.released = done = True
        return done

    def _stem(self, task: Task) -> str:
        """``WORKDIR/tasks/JOB.ATTEMPT.TASK``, absolute: the wrapper runs in the checkpoint dir."""
        name = f"{_safe(task.job_id)}.{task.attempt}.{task.task}"
        return os.path.abspath(self.workdir / "tasks" / name)

    def _signal(self, task: Task, sig: int) -> None:
        if task.pid is None:
            return
        try:
            os.killpg(task.pid, sig)  # its wrapper leads the task's session, so pgid == pid
        except (ProcessLookupError, PermissionError):  # gone (its pid since another user's)
            pass


def _share_key(task: Task) -> str:
    """The name of a task's MIG instance in ``mig-instances.json``."""
    return f"{task.job_id}.{task.attempt}.{task.task}"


def _ended_before(task: Task, age_s: float) -> bool:
    return task.ended_at is not None and time.time() - task.ended_at > age_s


def _own_env() -> dict[str, str]:
    """The agent's environment without its secrets: what a task or a hook starts from."""
    return {k: v for k, v in os.environ.items() if k not in SECRET_ENV}


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (exited, not yet reaped by its parent) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: trust kill()
    return state not in (b"Z", b"X")


def _read_exit(path: str) -> int | None:
    try:
        return int(Path(path).read_text())
    except (OSError, ValueError):
        return None


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
