"""`gpuwarden demo`: the whole pipeline on a simulated fleet, with nothing outside the project.

It prints seven numbered steps:

1. simulate a fleet's history with failures (8 nodes x 8 GPUs, 30 days, failure rate x40 by
   default) and write it into a SQLite store (``demo-out/gpuwarden.db``);
2. serve the exporter over the live simulated fleet, collecting into the same store, and scrape
   ``/metrics`` once as Prometheus would;
3. roll the raw samples up into hourly buckets (retention);
4. print a fleet summary, then the risk of every GPU now as ``gpuwarden score`` gives it with the
   shipped model, GPUs needing attention first;
5. the risk loop: replay the store's last two days through the risk service (shipped model plus
   hard signals) with a bundled scheduler running a critical job on every GPU, and narrate the
   GPU it flags: its risk climbing, the at-risk decision and its reasons, the job told to
   checkpoint and leave, and what the recorded failures say became of it. When nothing is
   flagged there, the two days before the last failure that showed a precursor a day ahead;
   when nothing is flagged there either, a scripted loop on a small fleet;
6. a short closed-loop run (one seed, 256 GPUs, 14 days): inference interruptions, training lost
   and capacity withheld with no prediction, hard signals only, the rule baseline and the model;
7. start the dashboard on the demo store; it keeps serving until Ctrl-C when stdin and stdout are
   a terminal, and is stopped again otherwise (skipped when streamlit is not installed).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuwarden.config import parse_listen
from gpuwarden.errors import ConfigError
from gpuwarden.store import open_store
from gpuwarden.store.base import Store
from gpuwarden.wording import counted


def fleet_spec(
    *,
    nodes: int,
    gpus_per_node: int,
    models: str,
    days: float,
    step_s: int,
    seed: int,
    accel: float,
    end_ts: float | None = None,
):  # -> FleetSpec
    """A ``FleetSpec`` whose history ends at ``end_ts`` (default: now), aligned to ``step_s``."""
    from gpuwarden.sim import FleetSpec

    end = time.time() if end_ts is None else end_ts
    start = (end - days * 86400) // step_s * step_s
    try:
        return FleetSpec(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            models=tuple(m.strip() for m in models.split(",") if m.strip()),
            start_ts=float(start),
            days=days,
            step_s=step_s,
            seed=seed,
            accel=accel,
        )
    except (ValueError, KeyError) as exc:
        raise ConfigError(f"bad simulated fleet: {exc}") from exc


def demo_store(
    path: Path,
    *,
    nodes: int = 128,
    gpus_per_node: int = 8,
    days: float = 3.0,
    seed: int = 3,
    accel: float = 20.0,
    step_s: int = 300,
) -> str:
    """Simulate a fleet ending now into a new SQLite file, roll it up and backfill a week of hourly
    verdicts (the dashboard's states and risk); returns its URL."""
    from gpuwarden.models import load_model

    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        leftover.unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    store = open_store(url)
    try:
        spec = fleet_spec(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            models="H100-80GB,A100-80GB,H200",
            days=days,
            step_s=step_s,
            seed=seed,
            accel=accel,
        )
        simulate_into(store, spec, progress=False)
        store.compact(time.time())
        backfill_verdicts(store, load_model(), days=min(days, 7.0))
    finally:
        store.close()
    return url


def backfill_verdicts(store: Store, model: Any, *, days: float) -> int:
    """Hourly verdicts for the ``days`` before the store's newest sample, stored in it (what
    ``gpuwarden score --start ... --step 1h --into`` does): the dashboard's states and risk."""
    from gpuwarden.models.score import backfill

    newest = float(store.gpus()["last_ts"].max())
    end = newest // 3600 * 3600
    return backfill(store, model, store, start=end - days * 86400, end=end)


def simulate_into(store: Store, spec, *, progress: bool = True) -> tuple[int, int, int]:
    """Write ``spec``'s telemetry, events and ground-truth failures into ``store``."""
    from gpuwarden.sim import Fleet

    try:
        fleet = Fleet(spec)
    except (ValueError, KeyError) as exc:
        raise ConfigError(f"bad simulated fleet: {exc}") from exc
    n_samples = n_events = 0
    for chunk in fleet.chunks(progress=progress):
        n_samples += store.write_frame(chunk.samples)
        n_events += store.write_events(chunk.events)
    n_failures = store.write_failures(fleet.failures)
    return n_samples, n_events, n_failures


def run_demo(
    out: Path,
    *,
    nodes: int = 8,
    gpus_per_node: int = 8,
    days: float = 30.0,
    accel: float = 40.0,
    seed: int = 7,
    serve_seconds: float = 6.0,
    listen: str = "127.0.0.1:0",
    models: str = "H100-80GB,A100-80GB,H200",
    step_s: int = 300,
    echo: Callable[[str], None] = print,
    keep_serving: bool = False,
) -> None:
    import httpx

    from gpuwarden.collectors.sim import SimCollector
    from gpuwarden.exporter import Exporter
    from gpuwarden.summary import fleet_summary

    out.mkdir(parents=True, exist_ok=True)
    db = out / "gpuwarden.db"
    for leftover in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        leftover.unlink(missing_ok=True)
    store = open_store(f"sqlite:///{db}")
    end = time.time()
    spec = fleet_spec(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        models=models,
        days=days,
        step_s=step_s,
        seed=seed,
        accel=accel,
        end_ts=end,
    )
    echo(
        f"[1/7] Simulating {nodes} nodes x {gpus_per_node} GPUs, {days:g} days at {step_s} s "
        f"(failure rate x{accel:g}) into {db}"
    )
    # a bar only at a terminal: `make demo > log` gets the steps, not 30 redraws
    n_samples, n_events, n_failures = simulate_into(store, spec, progress=sys.stderr.isatty())
    echo(
        f"      stored {n_samples:,} samples, {n_events:,} events, {counted(n_failures, 'failure')} (ground truth)"
    )

    host, port = parse_listen(listen)
    collector = SimCollector.from_url(
        f"sim://?nodes={nodes}&gpus={gpus_per_node}&seed={seed}&models={models}&accel={accel}"
        f"&step={step_s}&start={spec.start_ts:.0f}&resume={end:.0f}"
    )
    # /metrics only: the live fleet runs a simulated step a second, so what it collects would
    # land in the store ahead of the wall clock (half an hour ahead after 6 s)
    exporter = Exporter(collector, interval_s=1.0)
    server = exporter.serve(host, port)
    bound = f"http://{host}:{server.server_address[1]}"
    echo(
        f"[2/7] Exporter serving {bound}/metrics over the live simulated fleet for {serve_seconds:g} s"
    )
    try:
        time.sleep(serve_seconds)
        body = httpx.get(f"{bound}/metrics", timeout=10).text
    finally:
        exporter.stop()
        server.shutdown()
        server.server_close()
        collector.close()
    series = [ln for ln in body.splitlines() if ln and not ln.startswith("#")]
    temps = [ln for ln in series if ln.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    echo(
        f"      /metrics: {len(series):,} series, {len(temps)} GPUs with DCGM_FI_DEV_GPU_TEMP; e.g."
    )
    for line in temps[:2]:
        echo(f"      {line}")

    echo("[3/7] Rolling raw samples up into hourly buckets (retention)")
    store.compact(time.time())

    echo("[4/7] Fleet summary")
    echo("")
    echo(fleet_summary(store).render())
    echo("")

    from gpuwarden.models import load_model, score_store
    from gpuwarden.models.score import render_table

    model = load_model()
    echo("      Risk now (gpuwarden score, the shipped model), GPUs needing attention first:")
    echo(render_table(score_store(store, model), top=8))
    n = backfill_verdicts(store, model, days=2.0)
    echo(f"      Stored {n:,} hourly verdicts of the last 2 days for the dashboard (score --into)")
    from gpuwarden.reports.build import offline_report

    echo(f"      Weekly report (offline, template text): {offline_report(store, out / 'reports')}")
    store.close()
    echo("")

    from gpuwarden.serve.demo import run_loop_demo
    from gpuwarden.serve.history_demo import last_catchable_failure, run_history_loop_demo

    echo("[5/7] The risk loop: a GPU degrades, is flagged, and its node is re-tagged")
    store = open_store(f"sqlite:///{db}")
    flagged = run_history_loop_demo(store, echo=echo)
    last = None if flagged is not None else last_catchable_failure(store)
    if last is not None:  # the last two days hold no flag: the days before the last failure
        when = time.strftime("%m-%d %H:%M", time.gmtime(float(last["ts"])))
        echo(
            f"      the last failure that showed a precursor a day or more ahead: "
            f"{last['hostname']}/{last['gpu']} ({last['kind']}) at {when}; the 48 h before it:"
        )
        name, uuid = f"{last['hostname']}/{last['gpu']}", str(last["uuid"])
        at_risk: dict[str, float] = {}
        flagged = run_history_loop_demo(
            store, end=float(last["ts"]) - 3600, echo=echo, at_risk=at_risk, focus=uuid
        )
        if flagged is not None and uuid not in at_risk:
            echo(f"      the model did not flag {name} at-risk before it failed")
    store.close()
    if flagged is None:  # nothing flagged in either window: the scripted loop
        run_loop_demo(echo=echo)
    echo("")
    from gpuwarden.closedloop.report import demo_run

    # before the dashboard, which keeps serving until Ctrl-C when a person is watching
    echo("[6/7] Closed loop: does flagging keep inference off failing GPUs? (simulated fleet)")
    demo_run(echo=echo)
    echo("")
    _demo_dashboard(
        f"sqlite:///{db}", echo=echo, keep_serving=keep_serving, log=out / "dashboard.log"
    )
    echo(f"Explore it: gpuwarden summary --store sqlite:///{db}")


def _demo_dashboard(
    store_url: str, *, echo: Callable[[str], None], keep_serving: bool, log: Path
) -> None:
    """Serve the dashboard on the demo store; keep it up for a person at a terminal. Streamlit's
    own lines (its banner, its URLs) go to ``log``: the step says where the page is."""
    from gpuwarden.dashboard.cli import start_dashboard, stop_dashboard, wait_ready
    from gpuwarden.errors import GpuwardenError

    host, port = "127.0.0.1", _free_port()
    url = f"http://{host}:{port}/"
    try:
        proc = start_dashboard(store_url, host, port, log=log)
    except GpuwardenError as exc:  # streamlit not installed: pip install '.[dashboard]'
        echo(f"[7/7] Dashboard skipped: {exc}")
        return
    try:
        try:
            wait_ready(proc, url.rstrip("/"), timeout_s=90)
        except GpuwardenError as exc:
            raise GpuwardenError(f"{exc}; its output is in {log}") from exc
        echo(f"[7/7] Dashboard running on the demo store: {url}")
        if keep_serving:
            echo("      Ctrl-C to stop.")
            proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_dashboard(proc)
    if not keep_serving:
        echo(
            "      (stopped again: not at a terminal; `gpuwarden dashboard --store ...` serves it)"
        )


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
