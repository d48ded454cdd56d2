"""A real scheduler history: the bundled scheduler service on a SQLite file, a clock we move,
node agents we play, and jobs arriving in a daily wave that the fleet cannot always hold, so
they wait. Every submit, start and end time in the file is the service's own."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from gpuwarden.scheduler.service import Principal, SchedulerService
from gpuwarden.scheduler.state import SchedulerDB

STEP_S = 900.0
TENANT = Principal("tenant", "ml")


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def run_history(
    path: Path, *, days: int, nodes: int = 2, gpus: int = 4, jobs_per_hour: float = 2.0,
    seed: int = 0, end_s: float | None = None, step_s: float = STEP_S,
) -> float:  # fmt: skip
    """Run ``days`` days of 1-2 GPU jobs (1-3 h each; ``jobs_per_hour`` on average, three times
    as many by day as by night) on ``nodes`` nodes of ``gpus`` H100s, ending at ``end_s``
    (default: the last quarter hour before now, so that ``gpuwarden plan --db``, which plans up
    to the present, reads it as recent). Agents sync every ``step_s`` seconds (a real one
    syncs every second; coarser steps run faster and add up to a step to each wait and run);
    returns the clock's end."""
    end = (time.time() if end_s is None else end_s) // step_s * step_s
    clock = _Clock(end - days * 86400)
    svc = SchedulerService(
        SchedulerDB(path), clock=clock, max_queued_tasks=None, node_timeout_s=2 * step_s
    )
    names = [f"n{i}" for i in range(nodes)]
    for name in names:
        svc.register(name, {"cpu_milli": 64000, "memory_mib": 262144, "gpus": [
            {"index": i, "uuid": f"GPU-{name}-{i}", "model": "H100-80GB", "memory_mib": 81920}
            for i in range(gpus)]})  # fmt: skip
    rng = np.random.default_rng(seed)
    length: dict[str, float] = {}  # job id -> run seconds
    tasks: dict[str, dict[tuple[str, int, int], dict]] = {n: {} for n in names}
    ends: dict[tuple[str, int, int], float] = {}
    for _ in range(int(days * 86400 / step_s)):
        hour = (clock.t % 86400) / 3600
        rate = jobs_per_hour * (1.5 if 8 <= hour < 20 else 0.5) * step_s / 3600
        for _ in range(rng.poisson(rate)):
            body = {"name": "train", "command": ["sleep", "1"],
                    "gpus_per_task": int(rng.integers(1, 3))}  # fmt: skip
            job_id = svc.submit(TENANT, body)[0]["job_id"]
            length[job_id] = float(rng.uniform(1, 3)) * 3600
        for name in names:
            mine = tasks[name]
            for key, end in list(ends.items()):
                if key in mine and end <= clock.t:
                    mine[key].update(state="exited", exit_code=0)
                    del ends[key]
            body = {"tasks": [{"job_id": k[0], "attempt": k[1], "task": k[2], **v}
                              for k, v in mine.items()], "logs": []}  # fmt: skip
            orders = svc.agent_sync(name, body)
            for k in [k for k, v in mine.items() if v["state"] == "exited"]:
                del mine[k]  # reported once: the service has recorded the end
            for o in orders["start"]:
                key = (o["job_id"], o["attempt"], o["task"])
                if key not in mine:
                    mine[key] = {"state": "running", "exit_code": None, "pid": 100}
                    ends[key] = clock.t + length[o["job_id"]]
        clock.t += step_s
    svc.db.close()
    return clock.t
