r"""How fast `gpuwarden report` builds its facts: 10,000 GPUs with 7 days of history in SQLite.

    .venv/bin/python bench/bench_report.py                  # reuses bench_score.py's store
    .venv/bin/python bench/bench_report.py --gpus 2000      # a smaller fleet

The store is bench_score.py's (simulated once at 15-minute samples, compacted into hourly
rollups, cached under the temp dir; building it takes minutes). Each run builds the facts of the
store's last 7 days, as `gpuwarden report --since ... --facts-only` does (the week before
included, for the changes), and prints the time next to the baseline: one plain read of the same
hourly window (``read_window`` at 3600 s), the read the facts cannot do without. Target: under
30 s for the whole fleet.

    .venv/bin/python bench/bench_report.py --vm-gpus 512    # also SQLite against VictoriaMetrics

``--vm-gpus N`` simulates a fresh fleet of N GPUs, writes it to SQLite and to a VictoriaMetrics
on 127.0.0.1 (Debian's package; bench_backends.py's loader, both rolled up as ``collect`` does)
and times the same facts on both, with the facts compared.

    .venv/bin/python bench/bench_backends.py --gpus 10000 --step 900 \
        --backends sqlite,victoriametrics --vm-rollups sqlite --workdir DIR   # loads it once
    .venv/bin/python bench/bench_report.py --from DIR        # the facts on both, from DIR

``--from DIR`` builds the facts from the stores a ``bench_backends.py --workdir DIR`` run kept:
``DIR/fleet.db``, and VictoriaMetrics restarted on ``DIR/vm`` when it is there; the week ends
at the history's end (``DIR/meta.json``). Each store call the facts make is timed (wall and
CPU seconds here, and the server's CPU seconds), so the time splits into reads and computing.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from bench_score import build

from gpuwarden import tuning
from gpuwarden.config import load_settings
from gpuwarden.reports import Facts, build_facts
from gpuwarden.reports._usage import USAGE_FIELDS
from gpuwarden.store.sqlite import SqliteStore


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--step", type=int, default=900, help="seconds between simulated samples")
    ap.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "gpuwarden-bench-score"
    )
    ap.add_argument("--repeat", type=int, default=2, help="runs; the best is reported")
    ap.add_argument("--vm-gpus", type=int, default=0, help="also compare VictoriaMetrics on N GPUs")
    ap.add_argument(
        "--from", dest="reuse", type=Path, default=None,
        help="the stores a bench_backends.py --workdir DIR run kept (fleet.db, vm/, meta.json)",
    )  # fmt: skip
    ap.add_argument(
        "--add-verdicts", action="store_true",
        help="with --from: first write serve's hourly verdicts for the history into DIR's stores "
        "(once; meta.json records it)",
    )  # fmt: skip
    ap.add_argument(
        "--verdicts-from", type=Path, default=None,
        help="with --from: every store reads its verdicts from this SQLite file (as with "
        "serve --verdicts and report --verdicts), e.g. a copy given --add-verdicts",
    )  # fmt: skip
    args = ap.parse_args()
    print(tuning.apply(load_settings()))  # as the CLI does
    if args.reuse:
        if args.add_verdicts:
            add_verdicts(args.reuse)
        return from_workdir(args.reuse, args.repeat, args.verdicts_from)
    if args.vm_gpus:
        return compare_backends(args.vm_gpus, args.days, args.step, args.repeat)
    args.cache.mkdir(parents=True, exist_ok=True)
    db = args.cache / f"fleet-{args.gpus}-{args.days:g}d-{args.step}s.db"
    meta = db.with_suffix(".json")
    if not (db.is_file() and meta.is_file()):
        meta.write_text(json.dumps({"end": build(db, args.gpus, args.days, args.step)}))
    end = json.loads(meta.read_text())["end"]
    since = end - 7 * 86400
    best = {"read": float("inf"), "facts": float("inf"), "reuse": float("inf")}
    facts = None
    for _ in range(args.repeat):
        with SqliteStore(db) as store:
            before = build_facts(store, since - 7 * 86400, since, now=end, compare=False)
            t0 = time.perf_counter()
            frame = store.read_window(
                start=since, end=end, fields=list(USAGE_FIELDS), resolution_s=3600
            )
            t1 = time.perf_counter()
            facts = build_facts(store, since, end, now=end)
            t2 = time.perf_counter()
            build_facts(store, since, end, now=end, previous=before)
            t3 = time.perf_counter()
        best["read"] = min(best["read"], t1 - t0)
        best["facts"] = min(best["facts"], t2 - t1)
        best["reuse"] = min(best["reuse"], t3 - t2)
    assert facts is not None
    print(f"store: {db} ({db.stat().st_size / 2**30:.1f} GiB), {facts.inventory.gpus:,} GPUs, "
          f"{len(frame):,} hourly rows in the week")  # fmt: skip
    print(f"{'stage':<52} {'seconds':>8} {'x baseline':>11}")
    rows = [("baseline: read_window, 4 fields, 1 h (SQLite)", best["read"]),
            ("build_facts, the week before built too", best["facts"]),
            ("build_facts, last week's facts.json reused", best["reuse"])]  # fmt: skip
    for name, seconds in rows:
        print(f"{name:<52} {seconds:>8.2f} {seconds / best['read']:>11.2f}")
    best["facts"] = min(best["facts"], best["reuse"])
    verdict = "meets" if best["facts"] < 30 else "misses"
    print(
        f"target < 30 s: {verdict} ({facts.failures.failures} failures, {facts.xids.xids:,} Xids, "
        f"fleet availability {facts.availability.fleet_availability_pct if facts.availability else 'n/a'}%)"
    )


def compare_backends(gpus: int, days: float, step: int, repeat: int) -> None:
    """A fresh fleet of ``gpus`` written to SQLite and VictoriaMetrics (rolled up as
    ``collect`` does) in a temporary folder laid out as ``bench_backends.py --workdir`` keeps
    it, then the facts from both (``from_workdir``)."""
    from bench_backends import simulate, start_victoriametrics, write

    from gpuwarden.store.victoriametrics import VictoriaMetricsStore

    end = float(int(time.time()) // 3600 * 3600)
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    fleet = simulate(gpus, days, step, end)
    vm = start_victoriametrics(work / "vm")
    try:
        with SqliteStore(work / "fleet.db", chunk_rows=200_000) as sqlite:
            store = VictoriaMetricsStore(vm.url)
            for chunk in fleet.chunks(progress=True):
                for st in (sqlite, store):
                    write(st, [chunk.samples], chunk.events, [])
            for st in (sqlite, store):
                write(st, [], [], list(fleet.failures))
                st.compact(end)
            store.close()
    finally:
        vm.stop()
    (work / "meta.json").write_text(json.dumps({"end": end, "gpus": gpus, "days": days,
                                                "step": step}))  # fmt: skip
    from_workdir(work, repeat)


class TimedStore:
    """A store whose calls are timed: wall and CPU seconds of this process per method, and the
    CPU seconds of the server (``server_pid``) while they ran."""

    def __init__(self, store: Any, server_pid: int | None = None) -> None:
        self.store, self.server_pid = store, server_pid
        self.calls: dict[str, list[float]] = {}  # name -> [calls, wall s, cpu s, server cpu s]

    def __getattr__(self, name: str) -> Any:
        from bench_backends import cpu_s

        attr = getattr(self.store, name)
        if not (callable(attr) and (name.startswith("read_") or name == "gpus")):
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            pid = self.server_pid
            t0, c0, s0 = time.perf_counter(), cpu_s(), cpu_s(pid) if pid else 0.0
            try:
                return attr(*args, **kwargs)
            finally:
                row = self.calls.setdefault(name, [0, 0.0, 0.0, 0.0])
                row[0] += 1
                row[1] += time.perf_counter() - t0
                row[2] += cpu_s() - c0
                row[3] += (cpu_s(pid) - s0) if pid else 0.0

        return timed


def from_workdir(work: Path, repeat: int, verdicts: Path | None = None) -> None:
    """The facts of the week that ends at the history's end, from each store ``work`` keeps;
    ``verdicts``: each reads its verdicts from that SQLite file instead."""
    from bench_backends import cpu_s, forget, start_victoriametrics

    from gpuwarden.store.victoriametrics import VictoriaMetricsStore

    meta = json.loads((work / "meta.json").read_text())
    end = float(meta["end"])
    since = end - 7 * 86400
    stores: dict[str, Any] = {"SQLite": SqliteStore(work / "fleet.db")}
    pids: dict[str, int] = {}
    vm = None
    results: dict[str, tuple[Facts, dict[str, float], dict[str, list[float]]]] = {}
    try:
        if (work / "vm").is_dir():
            vm = start_victoriametrics(work / "vm")
            stores["VictoriaMetrics"] = VictoriaMetricsStore(vm.url)
            pids["VictoriaMetrics"] = vm.proc.pid
        if verdicts is not None:
            from gpuwarden.store.split import WithVerdicts

            stores = {k: WithVerdicts(v, SqliteStore(verdicts)) for k, v in stores.items()}
            print(f"verdicts from {verdicts}")
        # the stores take turns, so that a slow minute of this shared machine (or memory
        # left fragmented by the runs before) falls on both, not on whichever runs last
        best_of: dict[str, dict[str, float]] = {}
        for turn in range(repeat):
            for name, store in stores.items():
                best = best_of.get(name)
                timed = TimedStore(store, pids.get(name))
                pid = pids.get(name)
                t0, c0, s0 = time.perf_counter(), cpu_s(), cpu_s(pid) if pid else 0.0
                facts = build_facts(timed, since, end, now=end)  # type: ignore[arg-type]
                run = {"wall": time.perf_counter() - t0, "cpu": cpu_s() - c0,
                       "server": (cpu_s(pid) - s0) if pid else 0.0}  # fmt: skip
                if best is None or run["wall"] < best["wall"]:
                    best_of[name] = run
                    results[name] = (facts, run, timed.calls)
                forget(getattr(store, "telemetry", store))
                print(f"{name}: facts built ({turn + 1}/{repeat}): {run['wall']:.2f} s", flush=True)
    finally:
        for store in stores.values():
            store.close()
        if vm is not None:
            vm.stop()
    print(f"{meta['gpus']:,} GPUs, {meta['days']:g} days at {meta['step']} s; the week to "
          f"{datetime.fromtimestamp(end, UTC):%Y-%m-%d %H:%M} UTC and the week before; best of "
          f"{repeat}; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'backend':<16}{'facts s':>8}{'vs SQLite':>10}{'cpu s':>7}{'server cpu s':>13}"
          f"{'reads s':>8}{'reads cpu s':>12}{'compute s':>10}{'compute cpu s':>14}")  # fmt: skip
    base = results["SQLite"][1]["wall"]
    for name, (_, run, calls) in results.items():
        reads, reads_cpu = sum(c[1] for c in calls.values()), sum(c[2] for c in calls.values())
        print(f"{name:<16}{run['wall']:>8.2f}{run['wall'] / base:>9.2f}x{run['cpu']:>7.2f}"
              f"{run['server']:>13.2f}{reads:>8.2f}{reads_cpu:>12.2f}{run['wall'] - reads:>10.2f}"
              f"{run['cpu'] - reads_cpu:>14.2f}")  # fmt: skip
    for name, (_, _, calls) in results.items():
        print(f"\n{name}: store calls (both weeks) {'calls':>6}{'wall s':>8}{'cpu s':>7}"
              f"{'server cpu s':>13}")  # fmt: skip
        for call, (n, wall, cpu, server) in sorted(calls.items(), key=lambda kv: -kv[1][1]):
            print(f"  {call:<32}{n:>6}{wall:>8.2f}{cpu:>7.2f}{server:>13.2f}")
    a = results["SQLite"][0]
    for name, (b, _, _) in results.items():
        differ = _differing(a, b)
        print(f"{name}: {_headline(b)}; "
              f"{'every section as SQLite' if not differ else 'DIFFERS from SQLite in ' + ', '.join(differ)}")  # fmt: skip


def hourly_verdicts(gpus: Any, start: float, end: float, seed: int = 5) -> Iterator[list[Any]]:
    """What ``serve`` writes for a steady fleet, an hour at a time: each GPU's heartbeat
    verdict every hour (ok, a small risk, its reasons), and 2 % of the GPUs at risk for a day
    once (a transition there and back)."""
    from gpuwarden.health import GpuState, Verdict
    from gpuwarden.telemetry import GpuId

    rng = np.random.default_rng(seed)
    ids = [GpuId(r.hostname, int(r.gpu), r.uuid, r.pci_bus_id, r.model, r.rack)
           for r in gpus.itertuples()]  # fmt: skip
    hours = np.arange(np.ceil(start / 3600) * 3600, end, 3600.0)
    sick = {i: float(rng.choice(hours[:-24])) for i in rng.choice(len(ids), len(ids) // 50)}
    reasons = ("sbe_rate_per_h 0 (fleet p50 0)", "mem_temp_spread_c 4.1 (fleet p50 3.8)")
    for h in hours:
        batch = []
        for i, gpu in enumerate(ids):
            at = sick.get(i)
            bad = at is not None and at <= h < at + 86400
            turn = at is not None and h in (at, at + 86400)
            state = GpuState.AT_RISK if bad else GpuState.OK
            before = (GpuState.OK if bad else GpuState.AT_RISK) if turn else None
            batch.append(Verdict(ts=h + 60, gpu=gpu, state=state,
                                 risk=float(0.8 if bad else rng.uniform(0.0, 0.2)),
                                 changed_from=before, reasons=reasons, threshold=0.7))  # fmt: skip
        yield batch


def add_verdicts(work: Path) -> None:
    """Write ``hourly_verdicts`` for the history into ``work``'s stores, once."""
    from bench_backends import start_victoriametrics

    from gpuwarden.store.victoriametrics import VictoriaMetricsStore

    meta = json.loads((work / "meta.json").read_text())
    if meta.get("verdicts"):
        print(f"{work}: {meta['verdicts']:,} verdicts stored already")
        return
    vm = start_victoriametrics(work / "vm") if (work / "vm").is_dir() else None
    stores: list[Any] = [SqliteStore(work / "fleet.db")]
    try:
        if vm is not None:
            stores.append(VictoriaMetricsStore(vm.url))
        end = float(meta["end"])
        n = 0
        t0 = time.perf_counter()
        for batch in hourly_verdicts(stores[0].gpus(), end - meta["days"] * 86400, end):
            for store in stores:
                store.write_verdicts(batch)
            n += len(batch)
        print(f"{n:,} verdicts written to {len(stores)} stores in {time.perf_counter() - t0:.0f} s")
    finally:
        for store in stores:
            store.close()
        if vm is not None:
            vm.stop()
    (work / "meta.json").write_text(json.dumps({**meta, "verdicts": n}))


def _differing(a: Facts, b: Facts) -> list[str]:
    """The sections of two facts documents that differ (when they were made left out)."""
    x, y = a.model_dump(exclude={"generated"}), b.model_dump(exclude={"generated"})
    return [k for k in x if x[k] != y[k]]


def _headline(f: Facts) -> tuple[Any, ...]:
    """What the backends must agree on: GPUs, failures, Xids, availability to 0.1 %."""
    avail = f.availability.fleet_availability_pct if f.availability else None
    util = f.utilisation.fleet_gpu_util_pct if f.utilisation else None
    return (f.inventory.gpus, f.failures.failures, f.xids.xids,
            None if avail is None else round(avail, 1), None if util is None else round(util, 1))  # fmt: skip


if __name__ == "__main__":
    main()
