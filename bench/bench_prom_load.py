"""Loading a simulated week into Prometheus 2.42: promtool's backfill against its remote-write
receiver, the same series, one process.

    nice -n 10 .venv/bin/python bench/bench_prom_load.py --gpus 256 --step 900

``promtool tsdb create-blocks-from openmetrics`` is given one OpenMetrics file per 2-hour block
(promtool 2.42 reads its whole input once per block), two at a time, then Prometheus starts
on the blocks: how the tests loaded it before. Remote write (``tests/store/prom_remote_write``)
goes to a Prometheus started empty, as the tests load it now. Each way reports wall seconds,
samples/s and CPU seconds (this process, promtool's processes, the server), and counts every
metric's samples back (``sum(count_over_time(name[...]))``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "store"))  # the test suite's server helpers
sys.path.insert(0, str(ROOT / "bench"))

from bench_backends import cpu_s, simulate  # noqa: E402
from tsdb_servers import daemons, history_series, prom_remote_write, start_prometheus  # noqa: E402

from gpuwarden.store import _series  # noqa: E402

BLOCK_MS = 2 * 3600 * 1000


def children_cpu_s() -> float:
    t = os.times()
    return t.children_user + t.children_system


def by_block(series: list[_series.Series]) -> list[list[_series.Series]]:
    """``series`` cut at promtool's 2-hour block boundaries."""
    blocks: dict[int, list[_series.Series]] = {}
    for s in series:
        which = s.ts_ms // BLOCK_MS
        cuts = [0, *(np.flatnonzero(np.diff(which)) + 1).tolist(), len(which)]
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            part = _series.Series(s.labels, s.ts_ms[lo:hi], s.values[lo:hi])
            blocks.setdefault(int(which[lo]), []).append(part)
    return [blocks[k] for k in sorted(blocks)]


def promtool_load(work: Path, series: list[_series.Series]):
    """Blocks backfilled by promtool, then Prometheus started on them."""
    data = work / "data"

    def backfill(k_part: tuple[int, list[_series.Series]]) -> None:
        k, part = k_part
        source = work / f"history-{k}.om"
        with source.open("w") as out:
            out.writelines(_series.openmetrics(part))
        argv = ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(source)]
        subprocess.run([*argv, str(data)], check=True, capture_output=True, timeout=600)
        source.unlink()

    work.mkdir(parents=True)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(backfill, enumerate(by_block(series))))
    return start_prometheus(work, timeout_s=600.0)


def count_back(url: str, series: list[_series.Series], at: float, days: float) -> int:
    """Metric names whose sample count in the server differs from ``series``'."""
    want: Counter[str] = Counter()
    for s in series:
        want[s.labels["__name__"]] += len(s.ts_ms)
    bad = 0
    for name, n in want.items():
        query = f"sum(count_over_time({name}[{int(days * 86400) + 86400}s]))"
        got = httpx.get(f"{url}/api/v1/query", params={"query": query, "time": at}, timeout=600)
        result = got.json()["data"]["result"]
        bad += (int(float(result[0]["value"][1])) if result else 0) != n
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--days", type=float, default=7.25)
    ap.add_argument("--step", type=int, default=900, help="seconds between simulated samples")
    args = ap.parse_args()
    end = float(np.floor(time.time() / 3600) * 3600)
    fleet = simulate(args.gpus, args.days, args.step, end)
    frames, events = [], []
    for chunk in fleet.chunks(progress=True):
        frames.append(chunk.samples)
        events += chunk.events
    series = history_series(frames, events, fleet.failures, source="sim")
    n = sum(len(s.ts_ms) for s in series)
    print(f"{args.gpus} GPUs, {args.days:g} d at {args.step} s: {len(series):,} series, "
          f"{n:,} samples; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'way in':<14}{'wall s':>8}{'samples/s':>11}{'client cpu s':>13}"
          f"{'promtool cpu s':>15}{'server cpu s':>13}{'samples/cpu s':>14}{'names off':>10}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gpuwarden-bench-prom-load-") as tmp:
        for way in ("promtool", "remote write"):
            work = Path(tmp) / way.replace(" ", "-")
            t0, c0, p0 = time.perf_counter(), cpu_s(), children_cpu_s()
            if way == "promtool":
                prom = promtool_load(work, series)
                server = 0.0
            else:
                prom = start_prometheus(work)
                s0 = cpu_s(prom.proc.pid)
                with prom_remote_write.RemoteWriter(prom.url) as writer:
                    writer.write(series)
                server = cpu_s(prom.proc.pid) - s0
            wall, client, tool = time.perf_counter() - t0, cpu_s() - c0, children_cpu_s() - p0
            try:
                off = count_back(prom.url, series, end + 60, args.days)
            finally:
                prom.stop()
            total = client + tool + server
            print(f"{way:<14}{wall:>8.1f}{n / wall:>11,.0f}{client:>13.1f}{tool:>15.1f}"
                  f"{server:>13.1f}{n / total:>14,.0f}{off:>10}")  # fmt: skip


if __name__ == "__main__":
    daemons.require_binary("promtool")
    main()
