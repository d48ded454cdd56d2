"""Scoring a fleet whose history is in VictoriaMetrics, in Prometheus or in SQLite, and writing
it to VictoriaMetrics against SQLite's ``write_frame``: the same simulated history, one process.

    .venv/bin/python bench/bench_backends.py                         # 64 GPUs x 7 days (minutes)
    .venv/bin/python bench/bench_backends.py --gpus 1024 --backends sqlite,victoriametrics
    .venv/bin/python bench/bench_backends.py --gpus 10000 --step 900 \
        --backends sqlite,victoriametrics --vm-rollups sqlite \
        --workdir /tmp/w10k                                          # the issue's fleet (~1 h)
    .venv/bin/python bench/bench_backends.py --from /tmp/w10k         # score it again (minutes)
    .venv/bin/python bench/bench_backends.py --from /tmp/w10k --vm-json  # and through JSON
    .venv/bin/python bench/bench_backends.py --from /tmp/w10k \
        --backends sqlite,prometheus           # Prometheus loaded from its SQLite (~30 min)

The fleet is simulated a day at a time (``--step`` seconds between samples) and each day is
written to a fresh SQLite file (``write_frame``; ``compact`` into hourly rollups at the end, as
the collector does) and to a fresh VictoriaMetrics (``VictoriaMetricsStore.write_frame``: its
import API). VictoriaMetrics then keeps hourly rollups as series: rolled up by the server
(``compact``, ``--vm-rollups compact``), or, where that takes too long (about 2 minutes a day
of 2,048 GPUs here), SQLite's own rollups imported (``write_rollups``, ``--vm-rollups
sqlite``: the same values, the same series a compact writes). Prometheus (no rollups kept:
every hour is rolled up by the server when it is read) gets each simulated day through its
remote-write receiver (tests/store/prom_remote_write.py; read-only for gpuwarden: a load
figure, no write figure), then compacts its blocks before scoring. ``--from`` a workdir whose
run left Prometheus out loads it from that run's SQLite file instead (its raw samples,
events and failures), so a 10,000-GPU history need not be simulated again. Each
backend then scores the whole fleet half an hour into the last hour, as ``gpuwarden score``
does; the time is split into the store read (``read_history``: the hourly window, GPUs,
events, failures) and features plus model, best of ``--repeat``, with the CPU seconds of the
read here and in the server (``--vm-json``: VictoriaMetrics read a second time through its JSON
query API instead of its native export, as before); the backends take turns, one run each a
round. Every backend's risks are compared with SQLite's. The servers run on 127.0.0.1 from
the Debian packages, as in the tests; VictoriaMetrics' bytes per stored sample come from its
``/metrics``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "store"))  # the test suite's server helpers

from tsdb_servers import (  # noqa: E402
    history_series,
    prom_remote_write,
    start_prometheus,
    start_victoriametrics,
)

from gpuwarden import tuning  # noqa: E402
from gpuwarden.config import load_settings  # noqa: E402
from gpuwarden.models.artifact import load_model  # noqa: E402
from gpuwarden.models.history import panel_of, read_history  # noqa: E402
from gpuwarden.models.score import HISTORY_S, score_panel  # noqa: E402
from gpuwarden.models.simdata import fleet_spec  # noqa: E402
from gpuwarden.sim import Fleet  # noqa: E402
from gpuwarden.store._promapi import DEFAULT_MAX_POINTS  # noqa: E402
from gpuwarden.store.prometheus import PrometheusStore  # noqa: E402
from gpuwarden.store.sqlite import SqliteStore  # noqa: E402
from gpuwarden.store.victoriametrics import VictoriaMetricsStore  # noqa: E402
from gpuwarden.telemetry import FRAME_ID_COLUMNS, Event, Failure, GpuId  # noqa: E402


def simulate(gpus: int, days: float, step_s: int, end: float) -> Fleet:
    start = (end - days * 86400) // step_s * step_s
    spec = fleet_spec(
        nodes=max(1, gpus // 8), days=days, step_s=step_s, accel=1.0, seed=3, start_ts=start
    )
    return Fleet(spec)


def vm_storage(url: str) -> tuple[float, float]:
    """VictoriaMetrics' bytes on disk and rows (samples) stored, from its ``/metrics``."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    size = rows = 0.0
    for line in text.splitlines():
        name = line.partition("{")[0].partition(" ")[0]
        if name == "vm_data_size_bytes":
            size += float(line.rpartition(" ")[2])
        elif name == "vm_rows" and 'type="indexdb' not in line:
            rows += float(line.rpartition(" ")[2])
    return size, rows


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


def reset_peak_rss() -> None:
    """Start this process' peak resident memory (VmHWM) over from what it holds now."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss_gb() -> float:
    """This process' peak resident memory since ``reset_peak_rss``, in GB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e9
    return math.nan


def forget(store) -> None:
    """Drop what a Prometheus-API store cached (its inventory), as a new process would."""
    if hasattr(store, "_inv"):
        store._inv = None
        store._interval_s = None
        store._until_at = -math.inf


def load_prometheus(loader, load, server_pid, frames, events, failures) -> None:
    """Write a day of the history to Prometheus (remote write), adding to ``load``'s wall and
    CPU seconds."""
    t0, c0, s0 = time.perf_counter(), cpu_s(), cpu_s(server_pid)
    loader.write(history_series(frames, events, failures, source="sim"))
    load["s"] += time.perf_counter() - t0
    load["client_cpu"] += cpu_s() - c0
    load["server_cpu"] += cpu_s(server_pid) - s0


def load_from_sqlite(sqlite, loader, load, server_pid, start: float, end: float) -> None:
    """Prometheus given what the SQLite store of a ``--workdir`` run holds, a day at a time:
    its raw samples, events and failures (the history SQLite scores from)."""
    gpus = sqlite.gpus().drop_duplicates("uuid", keep="last").set_index("uuid")

    def gpu(r) -> GpuId:
        g = gpus.loc[r.uuid]
        return GpuId(r.hostname, int(r.gpu), r.uuid, g.pci_bus_id, g.model, g.rack)

    def value(x):
        return None if pd.isna(x) else x

    day = 86400.0
    for a in tqdm(np.arange(start // day * day, end, day), desc="sqlite -> prometheus"):
        frame = sqlite.read_samples(start=a, end=a + day)
        frame["rack"] = gpus["rack"].reindex(frame["uuid"]).to_numpy()
        events = [
            Event(r.ts, gpu(r), r.kind, value(r.code), r.detail or "")
            for r in sqlite.read_events(start=a, end=a + day).itertuples()
        ]
        load_prometheus(loader, load, server_pid, [frame], events, [])
    failures = [
        Failure(r.ts, gpu(r), r.kind, value(r.precursor_start_ts), value(r.repair_s), value(r.xid))
        for r in sqlite.read_failures().itertuples()
    ]
    load_prometheus(loader, load, server_pid, [], [], failures)


def settle(url: str, pid: int, quiet_s: float = 5.0) -> None:
    """Wait until Prometheus (``url``, process ``pid``) has cut its head into blocks (it does
    once its head spans 1.5 blocks; started again on a kept history, only at its first
    once-a-minute check) and then used under 5% of a core for ``quiet_s`` seconds: scoring
    should not pay for its compactions."""
    block_ms = 2 * prom_remote_write.WINDOW_MS  # the head appends half a block behind
    while True:
        time.sleep(quiet_s)
        head = {}
        for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
            name, _, value = line.partition(" ")
            if name in ("prometheus_tsdb_head_min_time", "prometheus_tsdb_head_max_time"):
                head[name] = float(value)
        if (
            len(head) == 2
            and head["prometheus_tsdb_head_max_time"] - head["prometheus_tsdb_head_min_time"]
            > 1.5 * block_ms
        ):
            continue
        c0 = cpu_s(pid)
        time.sleep(quiet_s)
        if cpu_s(pid) - c0 < 0.05 * quiet_s:
            return


def score(
    store, model, at: float, repeat: int, server_pid: int | None = None
) -> tuple[dict[str, float], pd.DataFrame]:
    """Best of ``repeat`` scoring runs: wall seconds of the read and the rest, and the CPU
    seconds of the read here and in the server (``server_pid``)."""
    best: dict[str, float] | None = None
    rows = pd.DataFrame()
    for _ in range(repeat):
        api = getattr(store, "api", None)
        q0 = api.queries if api is not None else 0
        if hasattr(api, "largest"):  # counted since the point budgets (before: not)
            api.largest = 0
        gc.collect()
        reset_peak_rss()
        t0, c0, s0 = time.perf_counter(), cpu_s(), cpu_s(server_pid) if server_pid else 0.0
        history = read_history(store, start=at - HISTORY_S, end=at)
        t1, c1, s1 = time.perf_counter(), cpu_s(), cpu_s(server_pid) if server_pid else 0.0
        peak = peak_rss_gb()
        rows = score_panel(panel_of(history), model, at=at)
        t2 = time.perf_counter()
        run = {
            "read": t1 - t0, "rest": t2 - t1, "total": t2 - t0, "gpus": float(len(rows)),
            "read_cpu": c1 - c0, "server_cpu": s1 - s0, "peak_gb": peak,
            "queries": float(api.queries - q0) if api is not None else math.nan,
            "largest": float(getattr(api, "largest", math.nan)),
        }  # fmt: skip
        del history
        if best is None or run["total"] < best["total"]:
            best = run
        forget(store)  # a new process each time: nothing cached between runs
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
    ap.add_argument(
        "--prom-max-points", default="",
        help="point budgets of Prometheus' queries, comma-separated: one store each "
        "(default: the store's own)",
    )  # fmt: skip
    ap.add_argument(
        "--from", dest="reuse", type=Path, default=None,
        help="score the stores a run with --workdir left there again (no simulation, no writes)",
    )  # fmt: skip
    ap.add_argument(
        "--vm-json", action="store_true",
        help="also score VictoriaMetrics through its JSON query API (the reads before native "
        "export), same server, same process",
    )  # fmt: skip
    ap.add_argument(
        "--vm-rollups", choices=("compact", "sqlite"), default="compact",
        help="VictoriaMetrics' hourly rollups: rolled up by the server, or SQLite's imported",
    )  # fmt: skip
    args = ap.parse_args()
    backends = args.backends.split(",")
    print(tuning.apply(load_settings()))  # as the CLI does
    work = args.reuse or args.workdir or Path(tempfile.mkdtemp(prefix="gpuwarden-bench-backends-"))
    work.mkdir(parents=True, exist_ok=True)
    end = float(np.floor(time.time() / 3600) * 3600)  # near now: any retention keeps it
    meta: dict = {}
    if args.reuse:  # the history a --workdir run loaded: its end, size and write figures
        meta = json.loads((work / "meta.json").read_text())
        end = meta["end"]
        args.gpus, args.days, args.step = meta["gpus"], meta["days"], meta["step"]
    at = end - 1800.0  # half an hour into the last hour, as bench_score.py
    model = load_model(None)
    stores: dict[str, object] = {}
    writes = {name: 0.0 for name in ("sqlite", "victoriametrics") if name in backends}
    if args.reuse:
        writes = {k: v for k, v in meta["writes"].items() if k in backends}
    daemons = []
    pids: dict[str, int] = {}
    loader = None  # Prometheus' remote-write client while the history is written
    load = {"s": 0.0, "client_cpu": 0.0, "server_cpu": 0.0}
    n_rows = n_fields = 0
    try:
        sqlite = SqliteStore(work / "fleet.db", chunk_rows=200_000)
        stores["sqlite"] = sqlite
        if "victoriametrics" in backends:
            vm = start_victoriametrics(work / "vm")  # finds what a --workdir run stored
            daemons.append(vm)
            pids["victoriametrics"] = vm.proc.pid
            stores["victoriametrics"] = VictoriaMetricsStore(vm.url)
        if "prometheus" in backends:
            kept = (work / "prom" / "data").exists()
            if not args.reuse and kept:
                sys.exit(f"{work / 'prom'} exists: score it with --from, or use a new --workdir")
            # a kept one replays its write-ahead log first: a minute or two at 10,000 GPUs
            prom = start_prometheus(work / "prom", timeout_s=1800.0)
            daemons.append(prom)
            pids["prometheus"] = prom.proc.pid
            if not kept:
                loader = prom_remote_write.RemoteWriter(prom.url)
            if args.reuse and loader:  # a --workdir run without prometheus: SQLite's history
                t = time.perf_counter()
                load_from_sqlite(sqlite, loader, load, prom.proc.pid, end - args.days * 86400, end)
                loader.close()
                meta["prometheus_load"] = {**load, "samples": loader.samples, "from": "sqlite"}
                (work / "meta.json").write_text(json.dumps(meta))
                print(f"prometheus: loaded from sqlite in {time.perf_counter() - t:.0f} s",
                      flush=True)  # fmt: skip
        if args.reuse:
            n_rows, n_fields = meta["rows"], meta["fields"]
        else:
            t0 = time.perf_counter()
            fleet = simulate(args.gpus, args.days, args.step, end)
            for chunk in fleet.chunks(progress=True):
                frame = chunk.samples
                n_rows += len(frame)
                n_fields = len([c for c in frame.columns if c not in (*FRAME_ID_COLUMNS, "rack")])
                for name in writes:
                    writes[name] += write(stores[name], [frame], chunk.events, [])
                if loader:
                    load_prometheus(loader, load, prom.proc.pid, [frame], chunk.events, [])
            failures = list(fleet.failures)
            for name in writes:
                writes[name] += write(stores[name], [], [], failures)
            if loader:
                load_prometheus(loader, load, prom.proc.pid, [], [], failures)
                loader.close()
                rate = loader.samples / load["s"]
                print(f"prometheus: {loader.samples:,} samples through remote write in "
                      f"{load['s']:.0f} s ({rate:,.0f} samples/s; CPU s: client "
                      f"{load['client_cpu']:.0f}, server {load['server_cpu']:.0f})", flush=True)  # fmt: skip
                meta["prometheus_load"] = {**load, "samples": loader.samples}
            print(f"simulated and written {n_rows:,} rows x {n_fields} fields ({args.gpus} GPUs, "
                  f"{args.days:g} d, {args.step} s) in {time.perf_counter() - t0:.0f} s; "
                  f"writes: {', '.join(f'{k} {v:.0f} s' for k, v in writes.items())}",
                  flush=True)  # fmt: skip
            t = time.perf_counter()
            sqlite.compact(end)
            print(f"sqlite: rolled up in {time.perf_counter() - t:.1f} s", flush=True)
            if "victoriametrics" in backends:
                store = stores["victoriametrics"]
                t = time.perf_counter()
                if args.vm_rollups == "compact":
                    store.compact(end, progress=True)  # type: ignore[attr-defined]
                else:
                    rolls = sqlite.read_window(
                        start=end - args.days * 86400, end=end, resolution_s=3600
                    )
                    store.write_rollups(rolls[rolls["ts"] < end], end, gpus=sqlite.gpus())  # type: ignore[attr-defined]
                    del rolls
                print(f"victoriametrics: rollups ({args.vm_rollups}) in "
                      f"{time.perf_counter() - t:.1f} s", flush=True)  # fmt: skip
                size, rows = vm_storage(vm.url)
                print(f"victoriametrics: {size / 1e6:,.0f} MB for {rows:,.0f} samples: "
                      f"{size / max(rows, 1):.2f} bytes a sample", flush=True)  # fmt: skip
            if args.workdir:  # kept for --from
                meta = {
                    **meta, "end": end, "gpus": args.gpus, "days": args.days, "step": args.step,
                    "rows": n_rows, "fields": n_fields, "writes": writes,
                }  # fmt: skip
                (work / "meta.json").write_text(json.dumps(meta))
        if "prometheus" in backends:
            t = time.perf_counter()
            settle(prom.url, prom.proc.pid)
            print(f"prometheus: compactions done in {time.perf_counter() - t:.0f} s", flush=True)
            # its per-bit subqueries take tens of seconds on a loaded machine
            budgets = [int(b) for b in args.prom_max_points.split(",") if b.strip()]
            for k, budget in enumerate(budgets or [DEFAULT_MAX_POINTS]):
                name = "prometheus" if k == 0 else f"prometheus@{budget}"
                stores[name] = PrometheusStore(prom.url, timeout_s=600.0, max_points=budget)
                pids[name] = prom.proc.pid
        if args.vm_json and "victoriametrics" in stores:
            as_json = VictoriaMetricsStore(vm.url)
            as_json.api.native = False  # type: ignore[attr-defined]
            stores["victoriametrics-json"] = as_json
            pids["victoriametrics-json"] = vm.proc.pid
        results: dict[str, tuple[dict[str, float], pd.DataFrame]] = {}
        # the backends in turn, each run once a round: the shared machine's load, which
        # drifts over minutes, weighs on all of them alike
        for k in range(args.repeat):
            for name, store in stores.items():
                run, rows = score(store, model, at, 1, pids.get(name))
                if name not in results or run["total"] < results[name][0]["total"]:
                    results[name] = (run, rows)
                print(f"{name}: scored ({k + 1}/{args.repeat})", flush=True)
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
    print(f"{'backend':<21}{'read s':>8}{'rest s':>8}{'total s':>9}{'vs sqlite':>10}"
          f"{'GPUs':>7}{'same state':>11}{'|dRisk|<=0.01':>14}{'read cpu s':>11}"
          f"{'server cpu s':>13}{'read peak GB':>13}{'queries':>8}{'largest':>10}")  # fmt: skip
    for name, (run, rows) in results.items():
        got = rows.set_index("uuid").reindex(want.index)
        same = float((got["state"] == want["state"]).mean())
        close = float((np.abs(got["risk"] - want["risk"]) <= 0.01).mean())
        print(f"{name:<21}{run['read']:>8.2f}{run['rest']:>8.2f}{run['total']:>9.2f}"
              f"{run['total'] / base['total']:>9.2f}x{int(run['gpus']):>7}{same:>11.1%}"
              f"{close:>14.1%}{run['read_cpu']:>11.2f}{run['server_cpu']:>13.2f}"
              f"{run['peak_gb']:>13.2f}{run['queries']:>8.0f}{run['largest']:>10,.0f}")  # fmt: skip
    if "prometheus_load" in meta and "prometheus" in results:
        pl = meta["prometheus_load"]
        print(f"prometheus loaded through remote write: {pl['samples']:,} samples in "
              f"{pl['s']:.0f} s, {pl['samples'] / pl['s']:,.0f} samples/s (CPU s: client "
              f"{pl['client_cpu']:.0f}, server {pl['server_cpu']:.0f})")  # fmt: skip
    print()
    print(f"{'writes':<16}{'seconds':>8}{'rows/s':>12}{'values/s':>12}{'vs sqlite':>10}")
    for name, seconds in writes.items():
        print(f"{name:<16}{seconds:>8.1f}{n_rows / seconds:>12,.0f}"
              f"{n_rows * n_fields / seconds:>12,.0f}{writes['sqlite'] / seconds:>9.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
