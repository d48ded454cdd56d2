"""A 1M-row telemetry file with bad cells spread through it, against the same file without them.

    .venv/bin/python bench/bench_ingest_bad.py                    # 1,000,000 rows, CSV
    .venv/bin/python bench/bench_ingest_bad.py --rows 200000 --format parquet --repeat 1

Both files have the same rows, columns and size (the shape of a dcgm-exporter export: time, host,
GPU, UUID, model, PCI bus id and 12 metrics, 512 GPUs 10 s apart). In the bad file one line in
100 is spoiled, in turn: half of them so the line cannot be read (a GPU index of 2^64, 1e30,
2^32 or -1, a time of -5 or "yesterday", no hostname, cells missing at the end of the line; in
Parquet, which has no short rows, no UUID instead),
half with an impossible metric cell (inf, -inf, 1e308, -300 C, "hot") that is stored as
missing while its row is kept.

Each load is the real command, ``gpuwarden ingest --no-progress --bad-lines FILE``, in a child
process of its own into a fresh SQLite file. Its peak memory is that child's maximum resident set
size from ``os.wait4`` (the rusage of that one child, not the maximum over every child that
RUSAGE_CHILDREN gives), and its wall time is measured around it. Linux counts in a child's
maximum RSS the memory image it was forked from, so the child is not forked from this script
(which holds the generated rows, about 1 GB) but from a small launcher process (``_LAUNCHER``,
about 10 MB) that this script starts and that reports the figures. The loads take turns (clean,
bad, clean, bad...) and the median of ``--repeat`` is shown. After each bad load the
script checks that every good row was stored, that the report names exactly the spoiled lines,
and that the impossible cells were counted; a mismatch stops the benchmark.
"""

from __future__ import annotations

import argparse
import gc
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

METRICS = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
)
GPUS = 512
BAD_EVERY = 100
#: (column, cell) that make a line unreadable; None as the cell: the line loses its last cells.
BAD_LINES = (
    ("gpu", "18446744073709551616"),
    ("gpu", "1e30"),
    ("gpu", "4294967296"),
    ("gpu", "-1"),
    ("timestamp", "-5"),
    ("timestamp", "yesterday"),
    ("hostname", ""),
    ("short", None),
)
#: (column, cell) of an impossible metric reading: missing, counted, the row kept.
BAD_CELLS = (
    ("DCGM_FI_DEV_GPU_TEMP", "inf"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "inf"),
    ("DCGM_FI_DEV_POWER_USAGE", "-inf"),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "1e308"),
    ("DCGM_FI_DEV_GPU_TEMP", "-300"),
    ("DCGM_FI_DEV_SM_CLOCK", "hot"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "inf"),
    ("DCGM_FI_DEV_GPU_UTIL", "1e308"),
)


@dataclass(frozen=True)
class Made:
    path: Path
    bad_lines: set[int]
    bad_cells: int


def _frame(rows: int, seed: int = 1) -> pd.DataFrame:
    """Every cell as text, so a spoiled cell takes the place of a good one at the same width."""
    rng = np.random.default_rng(seed)
    slot = np.arange(rows) % GPUS
    host = np.array([f"node{i // 8:04d}" for i in range(GPUS)], dtype=object)
    uuid = np.array([f"GPU-{i:08x}-0000-0000-0000-{i:012x}" for i in range(GPUS)], dtype=object)
    bus = np.array([f"00000000:{0x10 + i % 8:02X}:00.0" for i in range(GPUS)], dtype=object)
    cols: dict[str, object] = {
        "timestamp": (1_714_564_800 + 10 * (np.arange(rows) // GPUS)).astype(str),
        "hostname": host[slot],
        "gpu": (slot % 8).astype(str),
        "UUID": uuid[slot],
        "modelName": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": bus[slot],
    }
    gauges = {
        "DCGM_FI_DEV_GPU_TEMP": rng.normal(55, 8, rows).round(0),
        "DCGM_FI_DEV_MEMORY_TEMP": rng.normal(60, 8, rows).round(0),
        "DCGM_FI_DEV_POWER_USAGE": rng.uniform(80, 650, rows).round(3),
        "DCGM_FI_DEV_SM_CLOCK": rng.choice([1410.0, 1755.0, 1980.0], rows),
        "DCGM_FI_DEV_GPU_UTIL": rng.integers(0, 101, rows).astype(float),
        "DCGM_FI_DEV_FB_USED": rng.integers(0, 81559, rows).astype(float),
    }
    for name in METRICS:
        values = gauges.get(name)
        if values is None:  # counters and flags
            values = (rng.random(rows) < 0.01).astype(float)
        cols[name] = np.char.mod("%g", values).astype(object)
    return pd.DataFrame(cols)


def make_files(tmp: Path, rows: int, fmt: str) -> tuple[Made, Made]:
    """The clean file and the bad one, the same rows and columns."""
    frame = _frame(rows)
    clean = _write(frame, tmp / f"clean.{fmt}", fmt, short=[])
    spoiled = np.arange(BAD_EVERY // 2, rows, BAD_EVERY)
    bad_lines: set[int] = set()
    short: list[int] = []
    cells = 0
    for k, row in enumerate(spoiled.tolist()):
        line = row + 2  # the header is line 1
        if k % 2 == 0:
            column, cell = BAD_LINES[(k // 2) % len(BAD_LINES)]
            bad_lines.add(line)
            if cell is None and fmt == "csv":
                short.append(row)
            elif cell is None:  # Parquet has no short rows: a row without its UUID instead
                frame.iat[row, frame.columns.get_loc("UUID")] = ""
            else:
                frame.iat[row, frame.columns.get_loc(column)] = cell
        else:
            column, cell = BAD_CELLS[(k // 2) % len(BAD_CELLS)]
            frame.iat[row, frame.columns.get_loc(column)] = cell
            cells += 1
    bad = _write(frame, tmp / f"bad.{fmt}", fmt, short=short)
    return Made(clean, set(), 0), Made(bad, bad_lines, cells)


def _write(frame: pd.DataFrame, path: Path, fmt: str, *, short: list[int]) -> Path:
    if fmt == "parquet":
        # A typed export: numbers where the column reads as numbers, text elsewhere.
        typed = frame.copy()
        for c in typed.columns:
            if c not in ("hostname", "UUID", "modelName", "pci_bus_id"):
                as_num = pd.to_numeric(typed[c], errors="coerce")
                if as_num.notna().all():
                    typed[c] = as_num
        typed.to_parquet(path, index=False)
        return path
    frame.to_csv(path, index=False)
    if short:
        lines = path.read_bytes().split(b"\n")
        for row in short:
            lines[row + 1] = b",".join(lines[row + 1].split(b",")[:-3])
        path.write_bytes(b"\n".join(lines))
    return path


#: Runs the command given as its arguments and prints its exit status, wall seconds, CPU seconds
#: (user + system) and peak RSS (KiB) as JSON; its stderr goes to ours. Imports only what it needs, to stay small.
_LAUNCHER = """
import json, os, subprocess, sys, time
t0 = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
seconds = time.perf_counter() - t0
cpu = usage.ru_utime + usage.ru_stime
print(json.dumps([os.waitstatus_to_exitcode(status), seconds, cpu, usage.ru_maxrss]))
"""


def run_ingest(made: Made, tmp: Path) -> tuple[float, float, float, Path, Path]:
    """One load in its own process: (wall seconds, CPU seconds, peak RSS in MiB, store file,
    report file)."""
    db = tmp / f"{made.path.stem}-{time.monotonic_ns()}.db"
    report = tmp / f"{made.path.stem}.bad-lines.txt"
    cmd = [
        sys.executable,
        "-c",
        "import sys; from gpuwarden.cli import main; sys.argv[0] = 'gpuwarden'; main()",
        "ingest",
        "--store",
        f"sqlite:///{db}",
        "--telemetry",
        str(made.path),
        "--no-progress",
        "--bad-lines",
        str(report),
    ]
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, *cmd], capture_output=True, text=True, check=True
    )
    code, seconds, cpu, peak_kib = json.loads(done.stdout.strip().splitlines()[-1])
    want = 1 if made.bad_lines else 0
    if code != want or "Traceback" in done.stderr or "Warning" in done.stderr:
        raise SystemExit(f"{made.path.name}: exit {code} (expected {want}):\n{done.stderr}")
    return seconds, cpu, peak_kib / 1024, db, report


def check(made: Made, rows: int, db: Path, report: Path) -> None:
    """Every good row stored, every spoiled line named, every impossible cell counted."""
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT count(*) FROM samples").fetchone()[0]
        counted = conn.execute("SELECT count(*) FROM rejections").fetchone()[0]
    assert stored == rows - len(made.bad_lines), (stored, rows, len(made.bad_lines))
    assert counted == made.bad_cells, (counted, made.bad_cells)
    named: set[int] = set()
    if made.bad_lines:
        for text in report.read_text().splitlines():
            named.add(int(text.split(":")[1]))
    assert named == made.bad_lines, sorted(named ^ made.bad_lines)[:10]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--format", choices=("csv", "parquet"), default="csv")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    runs: dict[str, list[tuple[float, float, float]]] = {"clean": [], "bad": []}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        clean, bad = make_files(tmp, args.rows, args.format)
        gc.collect()
        size = {"clean": clean.path.stat().st_size / 2**20, "bad": bad.path.stat().st_size / 2**20}
        for _ in range(args.repeat):
            for label, made in (("clean", clean), ("bad", bad)):
                seconds, cpu, peak, db, report = run_ingest(made, tmp)
                check(made, args.rows, db, report)
                db.unlink()
                runs[label].append((seconds, cpu, peak))
    med = {k: [statistics.median(r[j] for r in v) for j in range(3)] for k, v in runs.items()}
    print(
        f"| {args.rows:,} rows, {args.format}, median of {args.repeat} | file MiB | wall s | "
        "CPU s | peak RSS MiB | rows stored | bad lines named | cells counted |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, made, what in (
        ("clean", clean, "no bad cells (baseline)"),
        ("bad", bad, f"bad cells in 1 line of {BAD_EVERY}"),
    ):
        wall, cpu, peak = med[label]
        print(
            f"| {what} | {size[label]:.1f} | {wall:.2f} | {cpu:.2f} | {peak:.0f} | "
            f"{args.rows - len(made.bad_lines):,} | {len(made.bad_lines):,} | {made.bad_cells:,} |"
        )
    (cw, cc, cp), (bw, bc, bp) = med["clean"], med["bad"]
    print(f"\nbad / clean: wall {bw / cw:.2f}x, CPU {bc / cc:.2f}x, peak memory {bp / cp:.2f}x")
    for label, v in runs.items():
        print(
            f"{label} runs (wall s, CPU s, MiB): "
            + ", ".join(f"({w:.1f}, {c:.1f}, {m:.0f})" for w, c, m in v)
        )


if __name__ == "__main__":
    main()
