"""Scoring a fleet whose history is in VictoriaMetrics, in Prometheus or in SQLite, and writing
it to VictoriaMetrics against SQLite's ``write_frame``: the same simulated history, one process.

    .venv/bin/python bench/bench_backends.py                         # 64 GPUs x 7 days (minutes)
    .venv/bin/python bench/bench_backends.py --gpus 1024 --backends sqlite,victoriametrics
    .venv/bin/python bench/bench_backends.py --gpus 10000 --step 900  # the issue's fleet (hours)

The fleet is simulated once (``--step`` seconds between samples) and written to a fresh SQLite
file (``write_frame``, then ``compact`` into hourly rollups, as the collector does), to a fresh
VictoriaMetrics (``VictoriaMetricsStore.write_frame``: its import API; then ``compact``, which
keeps the server's hourly rollups as series) and, for Prometheus (no rollups kept: every hour
is rolled up by the server when it is read), as
blocks backfilled by promtool before it starts (read-only: no write figure). Each backend then
scores the whole fleet half an hour into the last hour, as ``gpuwarden score`` does; the time
is split into the store read (``read_history``: the hourly window, GPUs, events, failures) and
features plus model, best of ``--repeat``. Every backend's risks are compared with SQLite's.
The servers run on 127.0.0.1 from the Debian packages, as in the tests.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "store"))  # the test suite's server helpers

from tsdb_servers import (  # noqa: E402
    history_series,
    start_prometheus_with,
    start_victoriametrics,
)

from gpuwarden.models.artifact import load_model  # noqa: E402
from gpuwarden.models.history import panel_of, read_history  # noqa: E402
from gpuwarden.models.score import HISTORY_S, score_panel  # noqa: E402
from gpuwarden.models.simdata import fleet_spec  # noqa: E402
from gpuwarden.sim import Fleet  # noqa: E402
from gpuwarden.store.prometheus import PrometheusStore  # noqa: E402
from gpuwarden.store.sqlite import SqliteStore  # noqa: E402
from gpuwarden.store.victoriametrics import VictoriaMetricsStore  # noqa: E402


def simulate(gpus: int, days: float, step_s: int, end: float) -> tuple[list, list, list]:
    start = (end - days * 86400) // step_s * step_s
    spec = fleet_spec(
        nodes=max(1, gpus // 8), days=days, step_s=step_s, accel=1.0, seed=3, start_ts=start
    )
    fleet = Fleet(spec)
    frames, events = [], []
    for chunk in fleet.chunks(progress=True):
        frames.append(chunk.samples)
        events += chunk.events
    return frames, events, list(fleet.failures)


def write(store, frames, events, failures) -> float:
    """Seconds to write the samples (``write_frame``), events and failures."""
    t0 = time.perf_counter()
    for frame in frames:
        store.write_frame(frame)
    store.write_events(events)
    store.write_failures(failures)
    return time.perf_counter() - t0


def cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system) of this process, or of process ``pid`` (a server): on a
    shared machine the wall time measures the neighbours as much as the code."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def score(
    store, model, at: float, repeat: int, server_pid: int | None = None
) -> tuple[dict[str, float], pd.DataFrame]:
    """Best of ``repeat`` scoring runs: wall seconds of the read and the rest, and the CPU
    seconds of the read here and in the server (``server_pid``)."""
    best: dict[str, float] | None = None
    rows = pd.DataFrame()
    for _ in range(repeat):
        t0, c0, s0 = time.perf_counter(), cpu_s(), cpu_s(server_pid) if server_pid else 0.0
        history = read_history(store, start=at - HISTORY_S, end=at)
        t1, c1, s1 = time.perf_counter(), cpu_s(), cpu_s(server_pid) if server_pid else 0.0
        rows = score_panel(panel_of(history), model, at=at)
        t2 = time.perf_counter()
        run = {
            "read": t1 - t0, "rest": t2 - t1, "total": t2 - t0, "gpus": float(len(rows)),
            "read_cpu": c1 - c0, "server_cpu": s1 - s0,
        }  # fmt: skip
        if best is None or run["total"] < best["total"]:
            best = run
        if hasattr(store, "_inv"):  # a new process each time: nothing cached between runs
            store._inv = None
            store._interval_s = None
            store._until_at = -math.inf
    assert best is not None
    return best, rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--days", type=float, default=7.25, help="history simulated (7 d + margin)")
    ap.add_argument("--step", type=int, default=300, help="seconds between simulated samples")
    ap.add_argument("--backends", default="sqlite,victoriametrics,prometheus")
    ap.add_argument("--repeat", type=int, default=3, help="scoring runs; the best is reported")
    ap.add_argument("--workdir", type=Path, default=None, help="default: a temporary folder")
    args = ap.parse_args()
    backends = args.backends.split(",")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="gpuwarden-bench-backends-"))
    work.mkdir(parents=True, exist_ok=True)
    end = float(np.floor(time.time() / 3600) * 3600)  # near now: any retention keeps it
    at = end - 1800.0  # half an hour into the last hour, as bench_score.py
    t0 = time.perf_counter()
    frames, events, failures = simulate(args.gpus, args.days, args.step, end)
    n_rows = sum(len(f) for f in frames)
    n_fields = len([c for c in frames[0].columns if c not in ("ts", "hostname", "gpu", "uuid",
                                                              "model", "pci_bus_id", "rack")])  # fmt: skip
    print(f"simulated {n_rows:,} rows x {n_fields} fields ({args.gpus} GPUs, {args.days:g} d, "
          f"{args.step} s) in {time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip
    model = load_model(None)
    stores: dict[str, object] = {}
    writes: dict[str, float] = {}
    daemons = []
    try:
        sqlite = SqliteStore(work / "fleet.db", chunk_rows=200_000)
        writes["sqlite"] = write(sqlite, frames, events, failures)
        t = time.perf_counter()
        sqlite.compact(end)
        print(f"sqlite: written in {writes['sqlite']:.1f} s, rolled up in "
              f"{time.perf_counter() - t:.1f} s", flush=True)  # fmt: skip
        stores["sqlite"] = sqlite
        if "victoriametrics" in backends:
            vm = start_victoriametrics(work / "vm")
            daemons.append(vm)
            store = VictoriaMetricsStore(vm.url)
            writes["victoriametrics"] = write(store, frames, events, failures)
            t = time.perf_counter()
            store.compact(end, progress=True)  # the hourly rollups, as `collect` keeps them
            print(f"victoriametrics: written in {writes['victoriametrics']:.1f} s, rolled up in "
                  f"{time.perf_counter() - t:.1f} s", flush=True)  # fmt: skip
            stores["victoriametrics"] = store
        if "prometheus" in backends:
            t = time.perf_counter()
            prom = start_prometheus_with(
                work / "prom", history_series(frames, events, failures, source="sim")
            )
            daemons.append(prom)
            print(f"prometheus: backfilled (promtool) and started in "
                  f"{time.perf_counter() - t:.0f} s", flush=True)  # fmt: skip
            stores["prometheus"] = PrometheusStore(prom.url)
        del frames
        results: dict[str, tuple[dict[str, float], pd.DataFrame]] = {}
        for name, store in stores.items():
            results[name] = score(store, model, at, args.repeat)
            print(f"{name}: scored", flush=True)
    finally:
        for store in stores.values():
            store.close()  # type: ignore[attr-defined]
        for d in daemons:
            d.stop()
    base, want = results["sqlite"]
    want = want.set_index("uuid")
    print()
    print(f"{args.gpus} GPUs, {args.days:g} days at {args.step} s ({n_rows:,} rows, "
          f"{n_rows * n_fields:,} values), scored half an hour into the last hour; best of "
          f"{args.repeat}")  # fmt: skip
    print(f"{'backend':<16}{'read s':>8}{'rest s':>8}{'total s':>9}{'vs sqlite':>10}"
          f"{'GPUs':>6}{'same state':>11}{'|dRisk|<=0.01':>14}")  # fmt: skip
    for name, (run, rows) in results.items():
        got = rows.set_index("uuid").reindex(want.index)
        same = float((got["state"] == want["state"]).mean())
        close = float((np.abs(got["risk"] - want["risk"]) <= 0.01).mean())
        print(f"{name:<16}{run['read']:>8.2f}{run['rest']:>8.2f}{run['total']:>9.2f}"
              f"{run['total'] / base['total']:>9.2f}x{int(run['gpus']):>6}{same:>11.1%}"
              f"{close:>14.1%}")  # fmt: skip
    print()
    print(f"{'writes':<16}{'seconds':>8}{'rows/s':>12}{'values/s':>12}{'vs sqlite':>10}")
    for name, seconds in writes.items():
        print(f"{name:<16}{seconds:>8.1f}{n_rows / seconds:>12,.0f}"
              f"{n_rows * n_fields / seconds:>12,.0f}{writes['sqlite'] / seconds:>9.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
