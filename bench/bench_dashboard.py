"""Dashboard first paint on a 1,000-GPU store: how long the first script run of a page takes.

    .venv/bin/python bench/bench_dashboard.py                    # 125 nodes x 8 GPUs, 3 days at 60 s
    .venv/bin/python bench/bench_dashboard.py --raw-tail-min 0   # everything rolled up
    .venv/bin/python bench/bench_dashboard.py --tail-step 15     # the raw hour sampled every 15 s
    .venv/bin/python bench/bench_dashboard.py --profile overview # where the cold overview spends it
    .venv/bin/python bench/bench_dashboard.py --backfill         # store the week's verdicts
    .venv/bin/python bench/bench_dashboard.py --pages overview,energy  # the Energy page beside the overview

Builds the store once (simulated fleet via ``gpuwarden.demo.simulate_into``, then ``compact``
up to ``--raw-tail-min`` before the end: ``gpuwarden collect`` compacts hourly, so a live store
has up to an hour of raw samples not rolled up yet, the worst case and the default; the file is
kept in the temp dir and reused; ``--tail-step 15`` copies each raw minute of that hour to 15 s
apart, as `gpuwarden collect` at its default interval writes it), then runs the app
with Streamlit's ``AppTest`` (in-process, what a browser's first request makes the server do,
minus the websocket): the overview and one GPU's page, each "cold" (every ``st.cache_data`` /
``st.cache_resource`` cleared: the first visitor after a restart or a cache expiry) and
"warm" (a new session, caches kept: the next visitor, or a rerun within ``_cache.TTL_S``).
No risk model: the app scores in the background and never waits for it. One untimed run over
an empty store first imports the app's modules, as a running server has already done; after it
AppTest's scan of installed packages for Streamlit components (about 0.9 s per AppTest run here,
done once at startup by a real server) is skipped. ``--profile`` times the overview's reads one
by one, outside Streamlit, and prints cProfile's top functions. ``--backfill`` stores the
shipped model's hourly verdicts for the store's days (``gpuwarden score --into``, what the
dashboard's states and risk chart read; the dashboard scores nothing itself) and times it; the
first-paint runs after it read those verdicts.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import streamlit as st
import streamlit.logger
from streamlit.testing.v1 import AppTest

streamlit.logger.set_log_level("error")  # no "missing ScriptRunContext" lines between results

from streamlit.components.v2.component_manager import BidiComponentManager  # noqa: E402

from gpuwarden.dashboard import _charts, data  # noqa: E402
from gpuwarden.dashboard import app as app_module  # noqa: E402
from gpuwarden.demo import fleet_spec, simulate_into  # noqa: E402
from gpuwarden.store.sqlite import SqliteStore  # noqa: E402

APP = str(Path(app_module.__file__))
END_TS = 1_767_225_600.0  # 2026-01-01 00:00 UTC: fixed, so the store can be reused


def build_store(
    path: Path, *, nodes: int, gpus: int, days: float, step_s: int, raw_tail_s: float
) -> str:
    url = f"sqlite:///{path}"
    if path.exists():
        return url
    tmp = path.with_suffix(".building")
    spec = fleet_spec(
        nodes=nodes, gpus_per_node=gpus, models="H100-80GB,A100-80GB,H200", days=days,
        step_s=step_s, seed=3, accel=40.0, end_ts=END_TS,
    )  # fmt: skip
    t0 = time.perf_counter()
    with SqliteStore(tmp, url=f"sqlite:///{tmp}") as store:
        n_samples, n_events, _ = simulate_into(store, spec)
        store.compact(END_TS - raw_tail_s)  # what `gpuwarden collect` does every hour
    for suffix in ("", "-wal", "-shm"):
        src = Path(str(tmp) + suffix)
        if src.exists():
            src.rename(str(path) + suffix)
    print(
        f"built {path}: {n_samples:,} samples, {n_events:,} events in "
        f"{time.perf_counter() - t0:.0f} s"
    )
    return url


def densify_tail(src: Path, dst: Path, *, tail_s: float, step_s: int, tail_step_s: int) -> None:
    """Copy the store at ``src`` to ``dst`` with its raw tail resampled every ``tail_step_s``
    (each reading repeated: what matters here is the number of rows the pages read)."""
    shutil.copyfile(src, dst)
    conn = sqlite3.connect(dst)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(samples)") if r[1] != "ts"]
    cols = ", ".join(columns)
    with conn:
        for offset in range(tail_step_s, step_s, tail_step_s):
            conn.execute(
                f"INSERT OR IGNORE INTO samples (ts, {cols}) "
                f"SELECT ts + {offset}, {cols} FROM samples WHERE ts >= ?",
                (END_TS - tail_s,),
            )
    conn.close()


def first_run(url: str, query: dict[str, str], *, cold: bool) -> float:
    """Seconds for one new session's first script run (``cold``: with empty caches)."""
    if cold:
        st.cache_data.clear()
        st.cache_resource.clear()
    os.environ["GPUWARDEN_STORE"] = url
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update(query)
    t0 = time.perf_counter()
    at.run()
    took = time.perf_counter() - t0
    if at.exception:
        raise SystemExit(f"the app failed: {[e.value for e in at.exception]}")
    return took


def overview_reads(url: str) -> list[tuple[str, float]]:
    """The overview's reads and chart, in the page's order, each timed (cold: a new store)."""
    steps: list[tuple[str, float]] = []
    t0 = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t0
        now = time.perf_counter()
        steps.append((name, now - t0))
        t0 = now

    with SqliteStore.from_url(url) as store:
        snap = data.snapshot(store, time.time())
        assert snap is not None
        lap("snapshot")
        table = data.fleet_states(store, snap.as_of, stale_s=snap.stale_s)
        lap("fleet_states (hard signals)")
        data.fleet_now(store, snap.as_of, stale_s=snap.stale_s)
        lap("fleet_now")
        _charts.heatmap(data.heatmap_frame(table), by_risk=False).to_dict()
        lap("fleet map (frame + chart spec)")
        data.fleet_series(store, snap.as_of - data.DAY_S, snap.as_of + 1e-3, gpus=snap.gpus,
                          step_s=snap.step_s)  # fmt: skip
        lap("fleet_series (24 h)")
        data.recent_events(store, snap.as_of - data.DAY_S, snap.as_of + 1e-3)
        lap("recent_events")
    return steps


def backfill(url: str, days: float) -> None:
    """Time storing the shipped model's hourly verdicts of the last ``days`` (score --into)."""
    from gpuwarden.models import load_model
    from gpuwarden.models.score import backfill as store_verdicts

    with SqliteStore.from_url(url) as store:
        t0 = time.perf_counter()
        model = load_model()
        loaded = time.perf_counter()
        end = END_TS // 3600 * 3600
        n = store_verdicts(store, model, store, start=end - days * 86400, end=end, progress=True)
        took = time.perf_counter() - loaded
    print(f"model load: {loaded - t0:.1f} s; {n:,} hourly verdicts stored in {took:.1f} s")


def some_uuid(url: str) -> str:
    with SqliteStore.from_url(url) as store:
        gpus = store.gpus()
    return str(gpus.sort_values(["hostname", "gpu"])["uuid"].iloc[len(gpus) // 2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--step", type=int, default=60, help="seconds between samples")
    parser.add_argument(
        "--raw-tail-min", type=float, default=60.0, help="minutes at the end not rolled up"
    )
    parser.add_argument("--tail-step", type=int, help="seconds between raw samples of the tail")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--db", type=Path, help="store file (default: in the temp dir)")
    parser.add_argument("--profile", choices=["overview", "gpu"], help="profile one cold run")
    parser.add_argument("--backfill", action="store_true", help="time the risk history instead")
    parser.add_argument("--pages", default="overview,gpu",
                        help="pages to time, comma-separated: overview, gpu, energy")  # fmt: skip
    args = parser.parse_args()
    name = (
        f"gpuwarden-bench-dashboard-{args.nodes}x{args.gpus}-{args.days:g}d-{args.step}s"
        f"-tail{args.raw_tail_min:g}m.db"
    )
    db = args.db or Path(tempfile.gettempdir()) / name
    url = build_store(
        db, nodes=args.nodes, gpus=args.gpus, days=args.days, step_s=args.step,
        raw_tail_s=args.raw_tail_min * 60,
    )  # fmt: skip
    if args.tail_step and args.tail_step < args.step:
        dense = db.with_name(db.stem + f"-every{args.tail_step}s.db")
        if not dense.exists():
            densify_tail(db, dense, tail_s=args.raw_tail_min * 60, step_s=args.step,
                         tail_step_s=args.tail_step)  # fmt: skip
        db, url = dense, f"sqlite:///{dense}"
    size_mib = sum(p.stat().st_size for p in db.parent.glob(db.name + "*")) / 2**20
    every = {"overview": {"view": "overview"}, "gpu": {"view": "gpu", "gpu": some_uuid(url)},
             "energy": {"view": "energy"}}  # fmt: skip
    pages = {p: every[p] for p in args.pages.split(",")}

    if args.backfill:
        print(f"store: {args.nodes * args.gpus:,} GPUs, {args.days:g} days, {size_mib:,.0f} MiB")
        backfill(url, min(args.days, 7.0))
        return

    if args.profile:
        for name, took in overview_reads(url):
            print(f"{name:<32} {took:6.2f} s")
        prof = cProfile.Profile()
        prof.enable()
        overview_reads(url)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        return

    with tempfile.TemporaryDirectory() as empty:  # import the app's modules, untimed
        first_run(f"sqlite:///{Path(empty) / 'none.db'}", {}, cold=True)
    # what Runtime.start does once; AppTest would do it again on every run
    BidiComponentManager.discover_and_register_components = lambda *a, **k: None  # type: ignore[method-assign]

    print(f"store: {args.nodes * args.gpus:,} GPUs, {args.days:g} days at {args.step} s, "
          f"last {args.raw_tail_min:g} min raw (every {args.tail_step or args.step} s), "
          f"{size_mib:,.0f} MiB ({db})")  # fmt: skip
    print(f"{'page':<10} {'cache':<6} {'median s':>9} {'min s':>7} {'max s':>7}")
    for page, query in pages.items():
        for cold in (True, False):
            times = []
            for _ in range(args.repeat):
                if not cold:
                    first_run(url, query, cold=False)  # the previous run filled the caches
                times.append(first_run(url, query, cold=cold))
            label = "cold" if cold else "warm"
            print(
                f"{page:<10} {label:<6} {statistics.median(times):>9.2f} "
                f"{min(times):>7.2f} {max(times):>7.2f}"
            )


if __name__ == "__main__":
    main()
