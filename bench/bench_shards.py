"""One scoring round from a Prometheus-compatible store, as one process and as n replicas that
each score their shard (``--shard i/n``) at the same time, reading the same server.

    .venv/bin/python bench/bench_shards.py --store victoriametrics://127.0.0.1:8428 --at T
    .venv/bin/python bench/bench_shards.py --store ... --at T --replicas 1,2 --repeat 2

The store is one a benchmark left loaded (``bench_backends.py --workdir DIR``: start
VictoriaMetrics again on ``DIR/vm``). Each replica is its own process (as serve replicas are),
started together; a round's time is the slowest replica's wall time, from when all have
imported gpuwarden. A replica reads what ``score_store`` reads: its shard's history and, to
read error rates and thermal rises against the whole fleet's, the fleet's error counters,
temperatures and power over the week
(``score.fleet_panel``; "fleet s", the slowest replica's). Also printed: the queries one round
sends, and the CPU seconds the replicas and the server (``--server-pid``) spent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

_CHILD = r"""
import json, sys, time
from gpuwarden.models.artifact import load_model
from gpuwarden.models.features import LONG_FIELDS, RECENT_H
from gpuwarden.models.history import panel_of, read_history
from gpuwarden.models.score import HISTORY_S, fleet_panel, score_panel
from gpuwarden.store import open_store
from gpuwarden.store.shard import HostShard
url, at, index, count, go = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
model = load_model(None)
store = open_store(url)
view = store if count == 1 else HostShard(store, index, count)
while time.time() < go:
    time.sleep(0.01)
t0, c0 = time.perf_counter(), time.process_time()
history = read_history(view, start=at - HISTORY_S, end=at, recent_from=at - RECENT_H * 3600,
                       long_fields=LONG_FIELDS)
t1 = time.perf_counter()
fleet = fleet_panel(view, at, at)  # a shard's read of the fleet (None: one process)
tf = time.perf_counter()
rows = score_panel(panel_of(history), model, at=at, fleet=fleet)
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"read": t1 - t0, "fleet": tf - t1, "total": t2 - t0, "cpu": c2 - c0,
                  "gpus": len(rows), "queries": store.api.queries}))
"""


def server_cpu(pid: int | None) -> float:
    if not pid:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def round_of(url: str, at: float, count: int, pid: int | None) -> dict[str, float]:
    """One round: ``count`` replicas started together; the slowest one's times."""
    go = time.time() + 8.0  # every replica has imported gpuwarden and loaded the model by then
    s0 = server_cpu(pid)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, str(at), str(i), str(count), str(go)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    return {
        "read": max(o["read"] for o in outs),
        "fleet": max(o["fleet"] for o in outs),
        "total": max(o["total"] for o in outs),
        "cpu": sum(o["cpu"] for o in outs),
        "server_cpu": server_cpu(pid) - s0,
        "gpus": sum(o["gpus"] for o in outs),
        "queries": sum(o["queries"] for o in outs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--store", required=True, help="victoriametrics:// or prometheus+http:// URL")
    ap.add_argument("--at", type=float, required=True, help="scoring time (Unix s)")
    ap.add_argument("--replicas", default="1,2", help="replica counts to run, comma-separated")
    ap.add_argument("--repeat", type=int, default=2, help="rounds each; the best is reported")
    ap.add_argument("--server-pid", type=int, default=None, help="the server, for its CPU")
    args = ap.parse_args()
    print(f"{'replicas':>8}{'read s':>9}{'fleet s':>9}{'total s':>9}{'GPUs':>7}{'queries':>9}"
          f"{'cpu s':>8}{'server cpu s':>13}")  # fmt: skip
    for count in (int(c) for c in args.replicas.split(",")):
        runs = [round_of(args.store, args.at, count, args.server_pid) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["total"])
        print(f"{count:>8}{best['read']:>9.2f}{best['fleet']:>9.2f}{best['total']:>9.2f}"
              f"{int(best['gpus']):>7}"
              f"{int(best['queries']):>9}{best['cpu']:>8.2f}{best['server_cpu']:>13.2f}",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
