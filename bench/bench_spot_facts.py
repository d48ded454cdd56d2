"""The weekly report's spot section against its scheduler section, on the same scheduler database.

    .venv/bin/python bench/bench_spot_facts.py                  # 10,000 GPUs, a week
    .venv/bin/python bench/bench_spot_facts.py --gpus 2000

A scheduler database of ``--gpus`` GPUs on 8-GPU nodes, a third of them spot, is written with a
week of one-GPU to 8-GPU tasks (about 2.5 per GPU), a checkpoint every hour for each interruptible
job, and a reclaim of a spot node every ``--reclaim-every`` hours evicting what ran there. Then
``reports._spot.spot`` (the spot section) and ``reports._sched.scheduler`` (queue wait, GPU-hours
and tenants, which every report with a scheduler database builds) read it, taking turns; the
best of ``--repeat`` each, and their ratio.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from gpuwarden.reports import _sched, _spot
from gpuwarden.scheduler.state import JobRow, NodeRow, SchedulerDB, TaskRow, checkpoint_reason

SINCE = 1_763_942_400.0  # Monday 2025-11-24 00:00 UTC
UNTIL = SINCE + 7 * 86400
H = 3600.0


def build(path: Path, gpus: int, reclaim_every_h: float, seed: int = 1) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    nodes = gpus // 8
    spot = {f"n{i:05d}" for i in range(nodes) if i % 3 == 0}
    db = SchedulerDB(path)
    counts = {"nodes": nodes, "tasks": 0, "checkpoints": 0, "reclaims": 0}
    with db.transaction():
        for i in range(nodes):
            name = f"n{i:05d}"
            cost = "spot" if name in spot else "owned"
            spec = [{"index": g, "model": "A100-80GB" if i % 2 else "H100-80GB",
                     "cost_class": cost} for g in range(8)]  # fmt: skip
            db.upsert_node(NodeRow(name, 64000, 512000, spec, SINCE, 0))
        seq = 0
        for i in range(nodes):
            name = f"n{i:05d}"
            t = SINCE - rng.uniform(0, 12 * H)
            while t < UNTIL:
                width = int(rng.choice([1, 2, 4, 8]))
                hours = float(rng.exponential(20.0)) + 0.5
                interruptible = name in spot or rng.random() < 0.4
                seq += 1
                job = f"j{seq:07d}"
                spec = {"interruptible": interruptible, "checkpoint": interruptible}
                db.insert_job(JobRow(job, seq, f"t{seq % 17}", job, spec, "succeeded", 1, None,
                                     t - 600, t - 600, started_at=t))  # fmt: skip
                db.upsert_task(TaskRow(job, 1, 0, name, list(range(width)), "exited", seq, 0,
                                       seq, True, t, t + hours * H))  # fmt: skip
                counts["tasks"] += 1
                if interruptible:
                    for k in range(1, int(hours)):
                        db.audit(t + k * H + 5, "agent", "checkpoint", job_id=job,
                                 reason=checkpoint_reason(1, t + k * H))  # fmt: skip
                        counts["checkpoints"] += 1
                t += hours * H
        order = sorted(spot)
        at = SINCE + reclaim_every_h * H
        while at < UNTIL:
            node = order[int(rng.integers(len(order)))]
            why = f"node {node} reclaimed (spot reclaim), 120 s notice"
            db.audit(at, "admin", "reclaim", node=node, reason=why)
            for row in db.tasks(node=node):
                if row.started_at is not None and row.started_at <= at <= (row.ended_at or at):
                    db.audit(at, "admin", "preempt", job_id=row.job_id, reason=why)
            counts["reclaims"] += 1
            at += reclaim_every_h * H
    db.close()
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--reclaim-every", type=float, default=6.0, help="hours between reclaims")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuwarden-bench-spot-") as tmp:
        path = Path(tmp) / "scheduler.db"
        t0 = time.perf_counter()
        counts = build(path, args.gpus, args.reclaim_every)
        print(f"scheduler database: {args.gpus:,} GPUs, {counts['nodes']:,} nodes, "
              f"{counts['tasks']:,} tasks, {counts['checkpoints']:,} checkpoints, "
              f"{counts['reclaims']} reclaims, written in {time.perf_counter() - t0:.1f} s")  # fmt: skip
        best = {"spot": float("inf"), "scheduler": float("inf")}
        for _ in range(args.repeat):
            for name, read in (
                ("scheduler", lambda: _sched.scheduler(str(path), SINCE, UNTIL, UNTIL)),
                ("spot", lambda: _spot.spot(str(path), SINCE, UNTIL, UNTIL)),
            ):
                t0 = time.perf_counter()
                out = read()
                best[name] = min(best[name], time.perf_counter() - t0)
        facts, _ = _spot.spot(str(path), SINCE, UNTIL, UNTIL)
        assert facts is not None and out is not None
        print(f"spot section: {facts.gpu_hours:,.0f} GPU-hours on spot, {facts.reclaims} reclaims, "
              f"{facts.jobs_evicted} jobs evicted, {facts.gpu_hours_lost:,.1f} GPU-hours lost")  # fmt: skip
        print(f"{'section':<12}{'best s':>9}{'vs scheduler':>14}")
        for name in ("scheduler", "spot"):
            print(f"{name:<12}{best[name]:>9.3f}{best[name] / best['scheduler']:>13.2f}x")


if __name__ == "__main__":
    main()
