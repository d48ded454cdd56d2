"""What the energy commands cost, each against a baseline in the same process (CPU seconds).

    .venv/bin/python bench/bench_energy.py                 # 32 nodes x 8 GPUs, 7 days at 60 s
    .venv/bin/python bench/bench_energy.py --nodes 125     # 1,000 GPUs

- ``gpuwarden energy advise --store --scheduler-db``: ``energy_samples.from_store`` (the store's
  5-minute rollup joined to the scheduler's tasks) against the store read alone
  (``read_window`` of the same fields and window), and the CSV path on the same samples;
- the dashboard's idle-sleep plan: ``sleep_plan`` against the hourly read it runs on;
- ``gpuwarden energy wake``: ``send_magic_packet`` to a UDP socket on 127.0.0.1 against a bare
  ``sendto`` of the same 102 bytes;
- ``gpuwarden reclaim``: the service closing a spot node with 8 jobs and ordering their
  checkpoints, against submitting and placing those 8 jobs in the same service;
- the scheduler service's sleep state in its database: a placement round (``tick``) with idle-
  node sleep on, the ``sleep`` table written as the service does, against the same rounds with
  that write left out.

The store is built once (synthetic GPUs: each runs jobs of three classes at their own power and
utilisation, idle between them, written with ``write_frame`` and rolled up by ``compact`` as
``gpuwarden collect`` does) and kept in the temp dir with its scheduler database.
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.planning import energy_samples
from gpuwarden.planning.sleep_plan import sleep_plan
from gpuwarden.scheduler.sleep import SleepPolicy
from gpuwarden.scheduler.state import JobRow, SchedulerDB, TaskRow
from gpuwarden.scheduler.wol import magic_packet, send_magic_packet
from gpuwarden.store.sqlite import SqliteStore

END = 1_767_225_600.0  # 2026-01-01 00:00 UTC (a Thursday), fixed so the files can be reused
CLASSES = {"inference": (260.0, 40.0), "training": (640.0, 97.0), "batch": (420.0, 70.0)}
IDLE = (70.0, 0.0)


def build(dirname: Path, *, nodes: int, gpus: int, days: float, step_s: int) -> tuple[str, Path]:
    """The store and scheduler database (reused when they exist)."""
    url, db_path = f"sqlite:///{dirname / 'store.db'}", dirname / "scheduler.db"
    if db_path.exists():
        return url, db_path
    rng = np.random.default_rng(7)
    start = END - days * 86_400
    ts = np.arange(start, END, float(step_s))
    frames, tasks = [], []
    names = list(CLASSES)
    for n in range(nodes):
        for g in range(gpus):
            power, util = np.full(ts.size, IDLE[0]), np.full(ts.size, IDLE[1])
            t = start + rng.uniform(0, 6 * 3600)
            while t < END:  # jobs of 1-12 h with idle gaps of up to 6 h
                length = rng.uniform(3600, 12 * 3600)
                cls = names[int(rng.integers(len(names)))]
                on = (ts >= t) & (ts < t + length)
                w, u = CLASSES[cls]
                power[on] = w + rng.normal(0, 15, on.sum())
                util[on] = np.clip(u + rng.normal(0, 5, on.sum()), 0, 100)
                tasks.append((f"node{n:03d}", g, t, min(t + length, END), cls))
                t += length + rng.uniform(0, 6 * 3600)
            frames.append(pd.DataFrame({"ts": ts, "hostname": f"node{n:03d}", "gpu": g,
                                        "uuid": f"GPU-{n:03d}-{g}", "model": "H100-80GB",
                                        "power_w": power, "gpu_util_pct": util,
                                        "power_limit_w": 700.0}))  # fmt: skip
    t0 = time.perf_counter()
    with SqliteStore.from_url(url) as store:
        store.write_frame(pd.concat(frames, ignore_index=True), progress=True)
        store.compact(END)
    db = SchedulerDB(db_path)
    with db.transaction():
        for i, (node, g, lo, hi, cls) in enumerate(tasks):
            job = f"j{i}"
            db.insert_job(JobRow(job, i + 1, "t", job, {"priority": cls, "tasks": 1}, "succeeded",
                                 1, None, lo, lo, lo, hi))  # fmt: skip
            db.upsert_task(TaskRow(job, 1, 0, node, [g], "exited", 1, 0, 1,
                                   started_at=lo, ended_at=hi))  # fmt: skip
    db.close()
    print(f"built {dirname}: {nodes * gpus} GPUs x {days:g} days, {len(tasks):,} tasks, "
          f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
    return url, db_path


def cpu(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median CPU seconds of ``repeat`` calls, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return float(np.median(times)), out


def bench_advise(url: str, db: Path, days: float, repeat: int, tmp: Path) -> None:
    start = END - days * 86_400
    with SqliteStore.from_url(url) as store:
        read, frame = cpu(lambda: store.read_window(
            start=start, end=END, fields=list(energy_samples.FIELDS),
            resolution_s=energy_samples.RESOLUTION_S), repeat)  # fmt: skip
        full, got = cpu(lambda: energy_samples.from_store(store, start, END, scheduler_db=db),
                        repeat)  # fmt: skip
    n = sum(len(v) for v in got.power.values())
    path = tmp / "samples.csv"
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["job_class", "power_w", "util_pct", "board_w"])
        for c in got.power:
            out.writerows((c, p, u, got.board[c]) for p, u in zip(got.power[c], got.util[c],
                                                                  strict=True))  # fmt: skip
    from_csv, _ = cpu(lambda: energy_samples.read_csv(path).advice(), repeat)
    advice, _ = cpu(got.advice, repeat)
    print(f"\nenergy advise over {days:g} days: {len(frame):,} rows of 5-minute means read, "
          f"{n:,} samples in tasks")  # fmt: skip
    print("| step | CPU s | vs the store read |\n|---|---:|---:|")
    for name, s in (("store read alone (baseline)", read), ("from_store: read + join", full),
                    ("advice on the classes", advice), ("the same samples from a CSV", from_csv)):  # fmt: skip
        print(f"| {name} | {s:.2f} | {s / read:.2f} |")


def bench_sleep_plan(url: str, days: float, repeat: int) -> None:
    start = END - days * 86_400
    with SqliteStore.from_url(url) as store:
        read, hourly = cpu(lambda: store.read_window(start=start, end=END,
                                                     fields=["power_w", "gpu_util_pct"],
                                                     resolution_s=3600), repeat)  # fmt: skip
    plan_s, plan = cpu(lambda: sleep_plan(hourly, SleepPolicy()), repeat)
    print(f"\nsleep plan over {days:g} days ({len(hourly):,} GPU-hours, {plan.window_hours} "
          f"window hours): hourly read {read:.2f} CPU s, plan {plan_s:.2f} CPU s "
          f"({plan_s / read:.2f}x the read); {int((plan.nodes['hours_asleep'] > 0).sum())} "
          f"nodes would sleep, {plan.kwh_saved:,.0f} of {plan.kwh_total:,.0f} kWh saved")  # fmt: skip


def bench_wake(n: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:  # fmt: skip
        rx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        port = rx.getsockname()[1]
        packet = magic_packet("02:00:00:00:00:01")

        def drain() -> None:
            try:
                while rx.recv(256):
                    pass
            except BlockingIOError:
                pass

        def raw() -> None:
            for i in range(n):
                tx.sendto(packet, ("127.0.0.1", port))
                if i % 256 == 0:
                    drain()

        def ours() -> None:
            for i in range(n):
                send_magic_packet("02:00:00:00:00:01", host="127.0.0.1", port=port)
                if i % 256 == 0:
                    drain()

        base, _ = cpu(raw, 3)
        wake, _ = cpu(ours, 3)
    print(
        f"\nenergy wake: {wake / n * 1e6:.0f} us CPU per packet, bare sendto "
        f"{base / n * 1e6:.0f} us ({wake / base:.1f}x: parsing the MAC and a socket per call)"
    )


def bench_sleep_state(nodes: int, rounds: int, repeat: int, tmp: Path) -> None:
    """Rounds of a service with idle-node sleep on, in the window, with and without the
    ``sleep`` table writes (the first round puts nodes to sleep: the writes that matter)."""
    from gpuwarden.scheduler import _service_sleep
    from gpuwarden.scheduler.service import SchedulerService

    mon_0300 = 1_704_078_000.0

    def run(save: bool, path: Path) -> tuple[float, float]:
        keep = _service_sleep.ServiceSleep._save
        if not save:
            _service_sleep.ServiceSleep._save = lambda self: None  # type: ignore[method-assign]
        try:
            now = [mon_0300 - 7200]  # registered at 01:00, before the window: all awake
            svc = SchedulerService(SchedulerDB(path), clock=lambda: now[0], node_timeout_s=1e9,
                                   sleep=SleepPolicy(dry_run=False, headroom_gpus=8))  # fmt: skip
            for n in range(nodes):
                svc.register(f"n{n}", {"cpu_milli": 64000, "memory_mib": 262144, "gpus": [
                    {"index": i, "uuid": f"GPU-{n}-{i}", "model": "H100-80GB",
                     "memory_mib": 81920} for i in range(8)]})  # fmt: skip
            now[0] = mon_0300  # in the window
            t0 = time.process_time()
            svc.tick()  # puts the idle nodes to sleep
            first = time.process_time() - t0
            t0 = time.process_time()
            for _ in range(rounds):
                svc.tick()  # nothing changes
            steady = (time.process_time() - t0) / rounds
            asleep = sum(1 for n in svc.nodes() if n["sleep"] == "asleep")
            assert asleep == nodes - 1, asleep  # one node's 8 GPUs stay awake as headroom
            svc.db.close()
        finally:
            _service_sleep.ServiceSleep._save = keep  # type: ignore[method-assign]
        return first, steady

    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for i in range(repeat):  # alternated, which goes first too, each on a new database
        for save in (False, True) if i % 2 == 0 else (True, False):
            path = tmp / f"sched-{save}-{i}.db"
            for p in tmp.glob(path.name + "*"):
                p.unlink()
            runs[save].append(run(save, path))
    base, saved = (tuple(np.median(runs[k], axis=0)) for k in (False, True))
    print(
        f"\nsleep state in the scheduler database, {nodes} nodes x 8 GPUs, sleep on, in the "
        f"window, medians of {repeat} runs:"
    )
    print(
        "| round | without the writes (CPU ms) | with them (CPU ms) | ratio |\n|---|---:|---:|---:|"
    )
    for name, a, b in (("first (nodes go to sleep)", base[0], saved[0]),
                       (f"steady (mean of {rounds})", base[1], saved[1])):  # fmt: skip
        print(f"| {name} | {a * 1e3:.1f} | {b * 1e3:.1f} | {b / a:.2f} |")


def bench_reclaim(nodes: int, repeat: int, tmp: Path) -> None:
    """``gpuwarden reclaim`` on a spot node running 8 interruptible jobs (close it, order their
    checkpoints, store the notice) against submitting and placing those jobs."""
    from gpuwarden.scheduler.service import Principal, SchedulerService

    rounds, reclaims = [], []
    for i in range(repeat):
        path = tmp / f"reclaim-{i}.db"
        for p in tmp.glob(path.name + "*"):
            p.unlink()
        svc = SchedulerService(SchedulerDB(path), clock=lambda: 1_000_000.0, node_timeout_s=1e9)
        for n in range(nodes):
            svc.register(f"n{n}", {"cpu_milli": 64000, "memory_mib": 262144,
                                   "cost_class": "spot" if n == 0 else "owned", "gpus": [
                {"index": g, "uuid": f"GPU-{n}-{g}", "model": "H100-80GB", "memory_mib": 81920}
                for g in range(8)]})  # fmt: skip
        t0 = time.process_time()
        for _ in range(8):  # interruptible work goes to spot first: all 8 on n0, placed at once
            svc.submit(Principal("tenant", "t"), {"name": "train", "command": ["train"],
                                                  "priority": "training", "interruptible": True,
                                                  "checkpoint": {"kind": "signal",
                                                                 "target": "SIGUSR1"}})  # fmt: skip
        rounds.append(time.process_time() - t0)
        t0 = time.process_time()
        out = svc.reclaim(Principal("admin"), "n0", 1_000_120.0, "spot reclaim")
        reclaims.append(time.process_time() - t0)
        assert len(out["evicted"]) == 8, out
        svc.db.close()
    r, c = float(np.median(rounds)), float(np.median(reclaims))
    print(f"\nreclaim of a spot node with 8 jobs, {nodes} nodes: {c * 1e3:.1f} CPU ms; submitting "
          f"and placing the 8 jobs {r * 1e3:.1f} CPU ms ({c / r:.2f}x; medians of {repeat})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--step", type=int, default=60, help="seconds between samples")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sched-nodes", type=int, default=256, help="nodes of the service bench")
    args = parser.parse_args()
    logging.getLogger("gpuwarden").setLevel(logging.ERROR)  # the reclaims' warnings
    work = Path(tempfile.gettempdir()) / (
        f"gpuwarden-bench-energy-{args.nodes}x{args.gpus}-{args.days:g}d-{args.step}s"
    )
    work.mkdir(exist_ok=True)
    url, db = build(work, nodes=args.nodes, gpus=args.gpus, days=args.days, step_s=args.step)
    print(f"load average {os.getloadavg()[0]:.1f}")
    bench_advise(url, db, args.days, args.repeat, work)
    bench_sleep_plan(url, args.days, args.repeat)
    bench_wake(20_000)
    bench_sleep_state(args.sched_nodes, 20, max(args.repeat, 5), work)
    bench_reclaim(args.sched_nodes, max(args.repeat, 5), work)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
