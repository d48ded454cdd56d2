"""A long queue on a full cluster: how long the scheduler service takes to accept submissions.

    .venv/bin/python bench/bench_sched_queue.py               # 2,000 jobs onto 4 busy nodes
    .venv/bin/python bench/bench_sched_queue.py --jobs 500

Every submission runs a placement round over the whole queue under the service's lock. A round
refuses later jobs of a shape it has already refused without trying them again
(``Scheduler.schedule``), so a queue of alike jobs (the usual case: one team's sweep) costs one
try per shape. The baseline, in the same process, is the same number of jobs where every job has
a shape of its own (a distinct memory request), which no round can skip: the ratio is what the
skip saves. Both use the in-process service on a temporary SQLite file, no HTTP.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gpuwarden.scheduler.service import Principal, SchedulerDB, SchedulerService

TEAM = Principal("tenant", "team")


def fill(nodes: int) -> SchedulerService:
    # a clock that stands still: the nodes have no agents, and must not be written off as lost
    # while the benchmark runs
    svc = SchedulerService(SchedulerDB(Path(tempfile.mkdtemp()) / "s.db"), clock=lambda: 1.7e9)
    gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB", "memory_mib": 81920}
            for i in range(8)]  # fmt: skip
    for n in range(nodes):
        svc.register(f"n{n}", {"cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus})
    for n in range(nodes):  # every GPU busy: nothing queued later can start
        svc.submit(TEAM, {"name": f"fill{n}", "command": ["sleep", "1d"], "gpus_per_task": 8})
    return svc


def submit_all(svc: SchedulerService, jobs: int, *, alike: bool) -> float:
    t0 = time.perf_counter()
    for i in range(jobs):
        spec = {"name": f"sweep{i}", "command": ["python", "train.py"], "gpus_per_task": 1}
        if not alike:
            spec["memory_mib"] = 1024 + i  # a shape of its own
        svc.submit(TEAM, spec)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--nodes", type=int, default=4)
    args = ap.parse_args()
    alike = submit_all(fill(args.nodes), args.jobs, alike=True)
    distinct = submit_all(fill(args.nodes), args.jobs, alike=False)
    print(f"| queue of {args.jobs:,} jobs on {args.nodes} full nodes | seconds | per job (ms) |")
    print("|---|---:|---:|")
    print(f"| alike jobs (one shape) | {alike:.1f} | {alike / args.jobs * 1000:.2f} |")
    print(
        f"| every job its own shape (baseline) | {distinct:.1f} "
        f"| {distinct / args.jobs * 1000:.2f} |"
    )
    print(f"\nratio, baseline / alike: {distinct / alike:.1f}x")


if __name__ == "__main__":
    main()
