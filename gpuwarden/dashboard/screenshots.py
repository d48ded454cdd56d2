"""Screenshots of the dashboard in headless Chromium: ``make screenshots`` writes docs/img/.

    python -m gpuwarden.dashboard.screenshots --out docs/img             # simulated 1,024 GPUs
    python -m gpuwarden.dashboard.screenshots --store sqlite:///my.db --out /tmp/shots \
        --serve-url http://127.0.0.1:9401 --scheduler-url http://127.0.0.1:8477

Serves the app with ``streamlit run`` on 127.0.0.1, loads each page in Chromium (DevTools
protocol, see ``_browser``), waits until it is drawn, and fails when a page shows a Streamlit
exception box or comes out blank. Without ``--store`` it simulates a fleet first (a temporary
SQLite file, rolled up as ``gpuwarden collect`` would) and, without ``--serve-url``, runs a
``gpuwarden serve`` over it (hard signals, no hooks) for the Decisions page. The Scheduler page
is shot when ``--scheduler-url`` is given (its token in ``GPUWARDEN_SCHEDULER_TOKEN``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuwarden import demo
from gpuwarden.dashboard import data
from gpuwarden.dashboard._browser import Browser, _free_port, blank_reason, find_chromium
from gpuwarden.dashboard.cli import APP, start_dashboard, stop_dashboard, wait_ready
from gpuwarden.errors import GpuwardenError
from gpuwarden.store import open_store


@dataclass(frozen=True)
class Shot:
    name: str  # file stem under the output folder
    query: str  # the page's query string


@dataclass(frozen=True)
class Captured:
    path: Path  # the PNG
    text: str  # the page's visible text, for checks


def pick_gpu(store_url: str) -> str | None:
    """The GPU worth showing: the worst flagged GPU that still reports (so its charts run to
    the end), else the worst GPU."""
    store = open_store(store_url)
    try:
        snap = data.snapshot(store, time.time())
        if snap is None:
            return None
        states = data.fleet_states(store, snap.as_of, stale_s=snap.stale_s)
    finally:
        store.close()
    reporting = data.flagged(states)
    reporting = reporting[reporting["last_ts"] >= snap.as_of - snap.stale_s]
    best = reporting if len(reporting) else states
    return str(best["uuid"].iloc[0]) if len(best) else None


def capture(
    store_url: str,
    out: Path,
    shots: list[Shot],
    *,
    chromium: str,
    width: int = 1400,
    height: int = 2400,
    timeout_s: float = 90.0,
    app: Path = APP,
    extra: tuple[str, ...] = (),
) -> list[Captured]:
    """Serve the dashboard over ``store_url`` and write one PNG per shot into ``out``.

    Raises ``GpuwardenError`` naming the page when it does not finish drawing, shows a
    Streamlit exception, or is blank. ``extra``: more arguments for the app (``--serve-url URL``)."""
    out.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="gpuwarden-dash-") as tmp:
        log = Path(tmp) / "streamlit.log"
        proc = start_dashboard(store_url, "127.0.0.1", port, log=log, app=app, extra=extra)
        try:
            try:
                wait_ready(proc, base, timeout_s=timeout_s)
            except GpuwardenError as exc:
                raise GpuwardenError(f"{exc}\n{log.read_text(errors='replace')[-2000:]}") from exc
            with Browser(chromium, width=width, height=height) as browser:
                return [_one(browser, base, shot, out, timeout_s) for shot in shots]
        finally:
            stop_dashboard(proc)


def _one(browser: Browser, base: str, shot: Shot, out: Path, timeout_s: float) -> Captured:
    url = f"{base}/?{shot.query}" if shot.query else f"{base}/"
    # the first load after the server starts sometimes never draws: load again once
    drawn = browser.open(url, timeout_s=timeout_s / 2) or browser.open(url, timeout_s=timeout_s)
    path = browser.screenshot(out / f"{shot.name}.png")
    if browser.exceptions():
        raise GpuwardenError(f"{url} shows a Streamlit exception:\n{browser.text()[:2000]}")
    if not drawn:
        raise GpuwardenError(f"{url} did not finish drawing within {timeout_s:g} s ({path})")
    if reason := blank_reason(path):
        raise GpuwardenError(f"{url} looks blank: {reason}")
    return Captured(path, browser.text())


def default_shots(
    gpu: str | None, *, decisions: bool = False, scheduler: bool = False
) -> list[Shot]:
    shots = [
        Shot("dashboard-overview", "view=overview"),
        Shot("dashboard-attention", "view=attention"),
    ]
    if gpu:
        shots.append(Shot("dashboard-gpu", f"view=gpu&gpu={gpu}"))
    shots.append(Shot("dashboard-energy", "view=energy"))
    if decisions:
        shots.append(Shot("dashboard-decisions", "view=decisions"))
    if scheduler:
        shots.append(Shot("dashboard-scheduler", "view=scheduler"))
    return shots


@contextlib.contextmanager
def local_serve(store_url: str, lookback_s: float) -> Iterator[str]:
    """``gpuwarden serve``'s API over ``store_url`` on a free port, after one round of hard-
    signal decisions (no hooks, no model, no token); yields its URL."""
    from gpuwarden.alerts.hard_signals import HardSignalAssessor
    from gpuwarden.serve.server import ServeHandle
    from gpuwarden.serve.service import RiskService

    store = open_store(store_url)
    # a prop for the Decisions page: its verdicts (no model) must not hide the backfilled risk
    service = RiskService(store, assess=HardSignalAssessor(lookback_s=lookback_s), verdicts=None)
    service.tick()
    handle = ServeHandle(service, token=None).start(loop=False)
    try:
        yield handle.url
    finally:
        handle.stop()
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store", help="store URL (default: simulate a fleet into a temporary file)"
    )
    parser.add_argument("--out", type=Path, default=Path("docs/img"), help="folder for the PNGs")
    parser.add_argument("--nodes", type=int, default=128, help="simulated nodes (8 GPUs each)")
    parser.add_argument("--days", type=float, default=3.0, help="simulated days of history")
    parser.add_argument("--serve-url", help="gpuwarden serve's API (default: run one)")
    parser.add_argument(
        "--scheduler-url",
        default=os.environ.get("GPUWARDEN_SCHEDULER_URL"),
        help="the scheduler's API (default: $GPUWARDEN_SCHEDULER_URL; none: no Scheduler shot)",
    )
    args = parser.parse_args(argv)
    chromium = find_chromium()
    if chromium is None:
        print("chromium is not installed (apt-get install -y chromium)", file=sys.stderr)
        return 1
    try:
        with (
            tempfile.TemporaryDirectory(prefix="gpuwarden-shots-") as tmp,
            contextlib.ExitStack() as stack,
        ):
            url = args.store
            if url is None:
                print(f"simulating {args.nodes * 8} GPUs over {args.days:g} days...", flush=True)
                url = demo.demo_store(Path(tmp) / "gpuwarden.db", nodes=args.nodes, days=args.days)
            serve_url = args.serve_url
            if serve_url is None and args.store is None:
                serve_url = stack.enter_context(local_serve(url, args.days * 86400))
            extra: tuple[str, ...] = ()
            if serve_url:
                extra += ("--serve-url", serve_url)
            if args.scheduler_url:
                extra += ("--scheduler-url", args.scheduler_url)
            shots = default_shots(
                pick_gpu(url), decisions=bool(serve_url), scheduler=bool(args.scheduler_url)
            )
            paths = capture(
                url, args.out, shots, chromium=chromium, height=3000,
                extra=extra,
            )  # fmt: skip
    except GpuwardenError as exc:
        print(f"screenshots failed: {exc}", file=sys.stderr)
        return 1
    for page in paths:
        print(f"wrote {page.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
