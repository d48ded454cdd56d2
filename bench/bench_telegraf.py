"""Reading Telegraf's line protocol: how fast ``ingest --line-protocol`` goes, and where the time is.

    .venv/bin/python bench/bench_telegraf.py                 # 20,000 lines, median of 3
    .venv/bin/python bench/bench_telegraf.py --lines 100000 --repeat 1

The lines are Telegraf's ``nvidia_smi`` schema v13 point of the real H100 capture
(``tests/data/telegraf/h100_v13_from_q.lp``: 79 fields, 2.9 KB, escaped spaces in a tag, quoted
strings with spaces), for 50 GPUs on 7 hosts every 10 s. Measured in the same process:

- "split floor": ``str.split`` of every line at its commas and each part at its ``=``, with no
  escape, quote or type handled: the least any reader of these lines does in Python;
- "parse": ``lineproto.parse_line`` on every line (escapes, quoted strings, types, errors);
- "parse + map": and ``telegraf.points_to_batches`` (catalogue fields, ECC sums, screening);
- "store alone": ``SqliteStore.write_batch`` of those batches into a fresh file;
- "ingest": ``ingest_line_protocol`` end to end (read, parse, map, store);
- with ``--influxql URL`` (a running InfluxDB 1.x, e.g. Debian's ``influxd``): the same lines
  written to a fresh database there, then "ingest --influxql" reads them back into a fresh
  SQLite file (InfluxDB's chunked JSON instead of the text).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpuwarden.collectors.lineproto import parse_line
from gpuwarden.collectors.telegraf import points_to_batches
from gpuwarden.ingest import ingest_line_protocol
from gpuwarden.store.sqlite import SqliteStore

FIXTURE = Path(__file__).resolve().parents[1] / "tests/data/telegraf/h100_v13_from_q.lp"
UUID = "GPU-00000000-0000-0000-0000-000000000000"


def make_lines(n: int) -> list[str]:
    (line,) = [x for x in FIXTURE.read_text().splitlines() if x and not x.startswith("#")]
    head, rest = line.split(" ", 1)
    fields = rest.rsplit(" ", 1)[0]
    out = []
    for k in range(n):
        g, t = k % 50, k // 50
        tags = head.replace("index=0", f"host=n{g // 8},index={g % 8}").replace(
            UUID, f"GPU-{g:08d}-0000-0000-0000-000000000000"
        )
        out.append(f"{tags} {fields} {1_784_016_773_000_000_000 + t * 10_000_000_000}")
    return out


def median_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _influxql(base: str, lines: list[str], tmp: str, repeat: int) -> float:
    import httpx

    from gpuwarden.ingest import ingest_influxql

    httpx.post(f"{base}/query", params={"q": "DROP DATABASE bench_telegraf"}).raise_for_status()
    httpx.post(f"{base}/query", params={"q": "CREATE DATABASE bench_telegraf"}).raise_for_status()
    for i in range(0, len(lines), 5000):
        httpx.post(f"{base}/write", params={"db": "bench_telegraf"},
                   content="\n".join(lines[i : i + 5000]).encode(), timeout=120).raise_for_status()  # fmt: skip
    host = base.split("://", 1)[1]
    runs = iter(range(10**6))

    def read() -> None:
        store = SqliteStore(Path(tmp) / f"q{next(runs)}.db")
        ingest_influxql(store, f"influxql://{host}?db=bench_telegraf", start=1.7e9, end=1.9e9)
        store.close()

    return median_time(read, repeat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--influxql", default=None, help="http://HOST:PORT of an InfluxDB 1.x")
    args = ap.parse_args()
    lines = make_lines(args.lines)
    points = [(i, p) for i, line in enumerate(lines, 1) if (p := parse_line(line)) is not None]
    batches = points_to_batches(points, host="bench").batches

    def split_floor() -> None:
        for line in lines:
            for f in line.split(","):
                f.partition("=")

    def parse() -> None:
        for line in lines:
            parse_line(line)

    def parse_map() -> None:
        points_to_batches(
            [(i, p) for i, line in enumerate(lines, 1) if (p := parse_line(line)) is not None],
            host="bench",
        )

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.lp"
        path.write_text("\n".join(lines) + "\n")
        runs = iter(range(10**6))

        def store_alone() -> None:
            store = SqliteStore(Path(tmp) / f"s{next(runs)}.db")
            for b in batches:
                store.write_batch(b)
            store.close()

        def ingest() -> None:
            store = SqliteStore(Path(tmp) / f"i{next(runs)}.db")
            ingest_line_protocol(store, path, host="bench")
            store.close()

        rows = [
            ("split floor", median_time(split_floor, args.repeat)),
            ("parse", median_time(parse, args.repeat)),
            ("parse + map", median_time(parse_map, args.repeat)),
            ("store alone", median_time(store_alone, args.repeat)),
            ("ingest", median_time(ingest, args.repeat)),
        ]
        if args.influxql:
            rows.append(("ingest --influxql", _influxql(args.influxql, lines, tmp, args.repeat)))
    floor = rows[0][1]
    print(f"{args.lines:,} lines of Telegraf nvidia_smi v13 ({len(lines[0]):,} bytes each), "
          f"median of {args.repeat}")  # fmt: skip
    print("| step | seconds | lines/s | x split floor |")
    print("|---|---:|---:|---:|")
    for name, s in rows:
        print(f"| {name} | {s:.2f} | {args.lines / s:,.0f} | {s / floor:.1f} |")


if __name__ == "__main__":
    main()
