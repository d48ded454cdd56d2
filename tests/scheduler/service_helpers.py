"""A scheduler service to drive by hand: a clock we move, a node agent we play, job shortcuts,
and a real SQLite COMMIT failure to arm (``trap_commit``)."""

from __future__ import annotations

import time

from gpuwarden.scheduler._agent_tasks import TaskTable
from gpuwarden.scheduler._auth import node_token
from gpuwarden.scheduler.service import Principal, SchedulerService
from gpuwarden.scheduler.state import SchedulerDB

ADMIN = Principal("admin")
A = Principal("tenant", "a")
B = Principal("tenant", "b")
HOOK = {"kind": "signal", "target": "SIGUSR1"}

#: The agents' master secret of the HTTP tests (``TokenBook(agent=...)``); nodes get their own.
AGENT_SECRET = "the-agents-master-secret"


def agent_token(node: str) -> str:
    """The token a real agent on ``node`` sends, as `gpuwarden scheduler agent-token` prints it."""
    return node_token(AGENT_SECRET, node)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class PlayAgent:
    """Plays a node agent: starts what it is told (once per key), exits tasks on request."""

    def __init__(self, svc: SchedulerService, node: str = "n1", gpus: int = 2) -> None:
        self.svc, self.node = svc, node
        self.tasks: dict[tuple[str, int, int], dict] = {}
        self.started: list[tuple[str, int, int]] = []
        self.hooks: list[tuple[str, int, int]] = []
        self.orders: dict = {}
        self.usage: list[dict] | None = None  # per-GPU measurements to send (an agent with NVML)
        svc.register(node, {"cpu_milli": 64000, "memory_mib": 262144, "gpus": [
            {"index": i, "uuid": f"GPU-{node}-{i}", "model": "H100-80GB", "memory_mib": 81920}
            for i in range(gpus)]})  # fmt: skip

    def sync(self) -> dict:
        body = {"tasks": [{"job_id": k[0], "attempt": k[1], "task": k[2], **v}
                          for k, v in self.tasks.items()], "logs": []}  # fmt: skip
        if self.usage is not None:
            body["gpus"] = self.usage
        self.orders = orders = self.svc.agent_sync(self.node, body)
        for o in orders["start"]:
            key = (o["job_id"], o["attempt"], o["task"])
            if key not in self.tasks:
                self.tasks[key] = {
                    "state": "running",
                    "exit_code": None,
                    "pid": 100 + len(self.tasks),
                }
                self.started.append(key)
        self.hooks += [(o["job_id"], o["attempt"], o["task"]) for o in orders["checkpoint"]]
        for o in orders["stop"]:
            self.exit((o["job_id"], o["attempt"], o["task"]), -15)
        return orders

    def exit(self, key: tuple[str, int, int], code: int) -> None:
        self.tasks[key].update(state="exited", exit_code=code)


def submit(svc: SchedulerService, who: Principal = A, **spec) -> str:
    body = {"name": "job", "command": ["sleep", "100"], **spec}
    return svc.submit(who, body)[0]["job_id"]


def train(svc: SchedulerService) -> str:
    return submit(svc, name="train", priority="training", interruptible=True, gpus_per_task=2,
                  checkpoint=HOOK, grace_period_s=30)  # fmt: skip


def trap_commit(db: SchedulerDB, action: str) -> None:
    """Every transaction that writes an audit row with ``action`` fails at COMMIT: the row
    adds a child whose deferred foreign key has no parent, which SQLite checks at COMMIT and
    then keeps the transaction open."""
    db.conn.execute("PRAGMA foreign_keys = ON")
    db.conn.executescript(f"""
        CREATE TEMP TABLE parent (id INTEGER PRIMARY KEY);
        CREATE TEMP TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);
        CREATE TEMP TRIGGER trap AFTER INSERT ON main.audit WHEN NEW.action = '{action}'
        BEGIN INSERT INTO child VALUES (1); END;
    """)


def untrap(db: SchedulerDB) -> None:
    db.conn.execute("DROP TRIGGER temp.trap")


def until_state(table: TaskTable, key: tuple, state: str, timeout_s: float = 10.0) -> None:
    """Poll an agent's task table until task ``key`` is in ``state``; fail after ``timeout_s``."""
    import pytest

    deadline = time.monotonic() + timeout_s
    while table.tasks[key].state != state:
        if time.monotonic() > deadline:
            pytest.fail(f"{key} never became {state}")
        time.sleep(0.05)
        table.poll()
