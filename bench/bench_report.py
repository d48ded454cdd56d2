"""How fast `gpuwarden report` builds its facts: 10,000 GPUs with 7 days of history in SQLite.

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
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_score import build

from gpuwarden.reports import build_facts
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
    args = ap.parse_args()
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
    from bench_backends import simulate, start_victoriametrics, write

    from gpuwarden.store.victoriametrics import VictoriaMetricsStore

    end = float(int(time.time()) // 3600 * 3600)
    frames, events, failures = simulate(gpus, days, step, end)
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    sqlite = SqliteStore(work / "fleet.db", chunk_rows=200_000)
    vm = start_victoriametrics(work / "vm")
    stores: dict[str, object] = {"SQLite": sqlite}
    try:
        write(sqlite, frames, events, failures)
        sqlite.compact(end)
        store = VictoriaMetricsStore(vm.url)
        stores["VictoriaMetrics"] = store
        t0 = time.perf_counter()
        write(store, frames, events, failures)
        store.compact(end, progress=True)
        print(
            f"VictoriaMetrics loaded and rolled up in {time.perf_counter() - t0:.0f} s", flush=True
        )
        del frames
        times: dict[str, float] = {}
        facts = {}
        for name, st in stores.items():
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                facts[name] = build_facts(st, end - 7 * 86400, end, now=end)  # type: ignore[arg-type]
                best = min(best, time.perf_counter() - t0)
            times[name] = best
    finally:
        for st in stores.values():
            st.close()  # type: ignore[attr-defined]
        vm.stop()
    a, b = facts["SQLite"], facts["VictoriaMetrics"]
    same = (a.inventory.gpus, a.failures.failures, a.xids.xids) == (
        b.inventory.gpus,
        b.failures.failures,
        b.xids.xids,
    )
    print(f"{gpus} GPUs, {days:g} days at {step} s; best of {repeat}")
    print(f"{'backend':<16} {'facts s':>8} {'vs SQLite':>10}  same GPUs, failures, Xids")
    for name, t in times.items():
        print(
            f"{name:<16} {t:>8.2f} {t / times['SQLite']:>9.2f}x  {'yes' if same or name == 'SQLite' else 'NO'}"
        )
    print(
        f"availability SQLite {a.availability.fleet_availability_pct if a.availability else None}% "
        f"VictoriaMetrics {b.availability.fleet_availability_pct if b.availability else None}%"
    )


if __name__ == "__main__":
    main()
