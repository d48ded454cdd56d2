"""Write throughput of ``influxdb://`` (line protocol into a real VictoriaMetrics' InfluxDB v2
write endpoint) against ``SqliteStore.write_frame``, on the same rows, in one process.

    .venv/bin/python bench/bench_influx_writes.py                # 256 GPUs x 100 steps
    .venv/bin/python bench/bench_influx_writes.py --gpus 1024 --steps 100 --repeat 1
    .venv/bin/python bench/bench_influx_writes.py --url 'influxdb://host:8086?org=o&bucket=b'

No InfluxDB 2 installs here, so by default the bench starts Debian's ``victoria-metrics`` on
127.0.0.1 in a temporary directory (stopped by its PID at the end) and writes to it: the client
side (checking the frame, making line protocol, gzip, HTTP) is what gpuwarden spends; the server
side is VictoriaMetrics', not InfluxDB's. ``--url`` writes to a server of yours instead (token
in $GPUWARDEN_INFLUX_TOKEN). Rows come from bench_store.make_frame (35 fields, 10% missing).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from bench_store import make_frame

from gpuwarden.store.influxdb import InfluxStore
from gpuwarden.store.sqlite import SqliteStore


def start_victoria_metrics(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("victoria-metrics")
    if binary is None:
        raise SystemExit("victoria-metrics is not installed (apt-get install -y victoria-metrics)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [binary, f"-storageDataPath={workdir}", f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=100y"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("victoria-metrics did not start")


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=256)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--url", default=None, help="influxdb:// URL (default: a local VictoriaMetrics)"
    )
    args = parser.parse_args()
    frame = make_frame(args.gpus, args.steps)
    n = len(frame)
    with tempfile.TemporaryDirectory() as tmp:
        proc = None
        url = args.url
        if url is None:
            proc, base = start_victoria_metrics(Path(tmp) / "vm")
            url = f"influxdb://{base.removeprefix('http://')}?org=bench&bucket=bench"
        try:
            runs = {"n": 0}

            def sqlite() -> None:
                runs["n"] += 1
                with SqliteStore(Path(tmp) / f"s{runs['n']}.db") as store:
                    store.write_frame(frame)

            influx = InfluxStore(url, token=None if args.url else "")
            t_sqlite = best(sqlite, args.repeat)
            t_influx = best(lambda: influx.write_frame(frame), args.repeat)
            influx.close()
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)
    print(
        f"{n:,} rows x {frame.shape[1] - 6} fields ({args.gpus} GPUs x {args.steps} steps), best of {args.repeat}"
    )
    print(f"{'method':<40}{'seconds':>9}{'rows/s':>12}{'vs SQLite':>11}")
    for name, t in (
        ("SqliteStore.write_frame", t_sqlite),
        ("InfluxStore.write_frame (influxdb://)", t_influx),
    ):
        print(f"{name:<40}{t:>9.3f}{n / t:>12,.0f}{t / t_sqlite:>10.2f}x")


if __name__ == "__main__":
    main()
