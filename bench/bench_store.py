"""Store ingest throughput: ``SqliteStore.write_frame`` against raw ``sqlite3.executemany``.

    .venv/bin/python bench/bench_store.py                  # 256 GPUs x 400 steps = 102,400 rows
    .venv/bin/python bench/bench_store.py --gpus 1024 --steps 1000 --repeat 1

Both sides write the same rows into a fresh file with the same pragmas (WAL, synchronous=NORMAL,
64 MiB cache). "raw executemany" inserts ready-made tuples into a plain table with the samples
table's columns, key and index, in one transaction: the floor for SQLite itself. The store also
checks the frame, turns its columns into rows, upserts the GPUs, marks hours for rollup and
commits every ``chunk_rows`` rows. "raw, no key" is a heap table with no index at all, to show
what the (ts, gpu) key and the per-GPU index cost. The target is a ratio of at most ~1.5.
Rows are made with numpy (gauges around a mean, counters as cumulative sums, 10% missing).
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import FIELDS

_PRAGMAS = (
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA cache_size = -65536",
)


def make_frame(n_gpus: int, steps: int, *, missing: float = 0.1, seed: int = 1) -> pd.DataFrame:
    """A wide frame of ``n_gpus * steps`` rows, 10 s apart, sorted by time then GPU."""
    rng = np.random.default_rng(seed)
    n = n_gpus * steps
    slot = np.tile(np.arange(n_gpus), steps)
    cols: dict[str, object] = {
        "ts": np.repeat(1.7e9 + 10.0 * np.arange(steps), n_gpus),
        "hostname": np.array([f"node{i // 8:04d}" for i in range(n_gpus)], dtype=object)[slot],
        "gpu": slot % 8,
        "uuid": np.array([f"GPU-{i:08x}-bench" for i in range(n_gpus)], dtype=object)[slot],
        "model": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:1B:00.0",
    }
    for f in FIELDS:
        if f.kind == "counter":
            steps_up = rng.poisson(0.3, size=(steps, n_gpus)).astype(np.float64)
            values = np.cumsum(steps_up, axis=0).ravel()
        else:
            values = rng.normal(60.0, 5.0, size=n).round(1)
        values[rng.random(n) < missing] = np.nan
        cols[f.name] = values
    return pd.DataFrame(cols)


def _raw_table(conn: sqlite3.Connection, *, keyed: bool) -> str:
    fields = "".join(f", {f.name} REAL" for f in FIELDS)
    if keyed:
        conn.execute(
            f"CREATE TABLE plain (ts REAL NOT NULL, gpu_id INTEGER NOT NULL{fields}, "
            "PRIMARY KEY (ts, gpu_id)) WITHOUT ROWID"
        )
        conn.execute("CREATE INDEX plain_gpu_ts ON plain (gpu_id, ts)")
    else:
        conn.execute(f"CREATE TABLE plain (ts REAL, gpu_id INTEGER{fields})")
    return f"INSERT INTO plain VALUES ({', '.join('?' * (2 + len(FIELDS)))})"


def time_raw(path: Path, rows: list[tuple], *, keyed: bool) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in _PRAGMAS:
        conn.execute(pragma)
    sql = _raw_table(conn, keyed=keyed)
    t0 = time.perf_counter()
    conn.execute("BEGIN")
    conn.executemany(sql, rows)
    conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed


def time_store(path: Path, frame: pd.DataFrame) -> float:
    store = SqliteStore(path)
    t0 = time.perf_counter()
    store.write_frame(frame)
    elapsed = time.perf_counter() - t0
    store.close()
    return elapsed


def time_read(path: Path, frame: pd.DataFrame) -> float:
    store = SqliteStore(path)
    store.write_frame(frame)
    t0 = time.perf_counter()
    out = store.read_samples()
    elapsed = time.perf_counter() - t0
    store.close()
    assert len(out) == len(frame)
    return elapsed


def best_of(repeat: int, works: dict[str, Callable[[Path], float]]) -> dict[str, float]:
    """Fastest of ``repeat`` runs of each method, each on a fresh file. The methods take turns
    (raw, store, raw, store, ...) so a burst of other load on the machine hits all of them."""
    times: dict[str, list[float]] = {name: [] for name in works}
    for _ in range(repeat):
        for name, work in works.items():
            with tempfile.TemporaryDirectory() as tmp:
                times[name].append(work(Path(tmp) / "bench.db"))
    return {name: min(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=256)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    frame = make_frame(args.gpus, args.steps)
    n = len(frame)
    # The same rows as ready-made tuples; gpu ids 1..n_gpus as the store would assign them.
    gpu_id = pd.factorize(frame["uuid"])[0] + 1
    rows = list(
        zip(
            frame["ts"].tolist(),
            gpu_id.tolist(),
            *(frame[f.name].tolist() for f in FIELDS),
            strict=True,
        )
    )

    raw_name = "raw executemany (same key + index)"
    results = best_of(
        args.repeat,
        {
            raw_name: lambda p: time_raw(p, rows, keyed=True),
            "raw executemany (no key, heap)": lambda p: time_raw(p, rows, keyed=False),
            "SqliteStore.write_frame": lambda p: time_store(p, frame),
            "SqliteStore.read_samples (all rows)": lambda p: time_read(p, frame),
        },
    )
    raw = results[raw_name]
    print(
        f"{n:,} rows x {len(FIELDS)} fields ({args.gpus} GPUs x {args.steps} steps), "
        f"best of {args.repeat}; SQLite {sqlite3.sqlite_version}"
    )
    print(f"{'method':<38} {'seconds':>8} {'rows/s':>11} {'vs raw':>7}")
    for name, seconds in results.items():
        ratio = "" if "read" in name else f"{seconds / raw:6.2f}x"  # reads: rows/s only
        print(f"{name:<38} {seconds:8.3f} {n / seconds:11,.0f} {ratio:>7}")


if __name__ == "__main__":
    main()
