"""Real VictoriaMetrics and Prometheus servers for the store tests, on 127.0.0.1 in temporary
directories (tests/integration/conftest.py starts and stops them; a missing binary fails the
test when CI=true).

    vm = start_victoriametrics(tmp)                 # empty, keeps 100 years, dedups to 1 ms
    prom = start_prometheus_with(tmp, series)       # series backfilled as blocks, then started

Prometheus is read-only, so it is loaded the way a fleet's history gets into one after the
fact: ``promtool tsdb create-blocks-from openmetrics`` into its data directory, before it
starts, with a retention long enough that it deletes nothing.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from gpuwarden.store import _series
from gpuwarden.store._frames import frame_rows
from gpuwarden.telemetry import Event, Failure

_spec = importlib.util.spec_from_file_location(
    "integration_daemons", Path(__file__).parents[1] / "integration" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
daemons = importlib.util.module_from_spec(_spec)
sys.modules["integration_daemons"] = daemons  # dataclasses look their module up there
_spec.loader.exec_module(daemons)
Daemon = daemons.Daemon


def start_victoriametrics(workdir: Path, *, args: tuple[str, ...] = ()) -> Any:
    """An empty VictoriaMetrics (the integration tests' launcher: 100 years of retention, no
    response cache, no latency offset) that keeps one sample per series and millisecond, so a
    rewrite replaces; ``args`` are more flags."""
    flags = ("-dedup.minScrapeInterval=1ms", "-loggerLevel=ERROR", *args)
    return daemons.launch_victoria_metrics(workdir, args=flags)


def start_prometheus_with(workdir: Path, series: Iterable[_series.Series]) -> Any:
    """Prometheus holding ``series``: backfilled by promtool, then started with 100 years of
    retention and nothing to scrape."""
    binary = daemons.require_binary("prometheus")
    promtool = daemons.require_binary("promtool")
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "data"

    # promtool 2.42 cuts 2-hour blocks and reads its whole input once per block: give it one
    # file per 2-hour block, so the history is read once in all
    def backfill(k_part: tuple[int, list[_series.Series]]) -> None:
        k, part = k_part
        source = workdir / f"history-{k}.om"
        with source.open("w") as out:
            out.writelines(_series.openmetrics(part))
        done = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(source), str(data)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        source.unlink()

    with ThreadPoolExecutor(2) as pool:  # promtool is the slow part; two cores here
        list(pool.map(backfill, enumerate(_by_block(list(series)))))
    (workdir / "prometheus.yml").write_text('{"global": {}}\n')
    port = daemons.free_port()
    argv = [
        binary,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=100y",
        "--log.level=warn",
    ]
    return daemons.start_daemon("prometheus", argv, port=port, workdir=workdir)


BLOCK_MS = 2 * 3600 * 1000


def _by_block(series: list[_series.Series]) -> list[list[_series.Series]]:
    """``series`` cut at promtool's 2-hour block boundaries."""
    blocks: dict[int, list[_series.Series]] = {}
    for s in series:
        which = s.ts_ms // BLOCK_MS
        cuts = np.flatnonzero(np.diff(which)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(which)], strict=True):
            part = _series.Series(s.labels, s.ts_ms[lo:hi], s.values[lo:hi])
            blocks.setdefault(int(which[lo]), []).append(part)
    return [blocks[k] for k in sorted(blocks)]


def history_series(
    frames: Iterable[Any],
    events: Iterable[Event] = (),
    failures: Iterable[Failure] = (),
    *,
    source: str | None = None,
    verdicts: Iterable[Any] = (),
) -> list[_series.Series]:
    """Wide sample frames and records as the series a ``victoriametrics://`` store writes."""
    out: list[_series.Series] = []
    for frame in frames:
        out += _series.frame_series(frame_rows(frame))
    out += _series.event_series(events)
    out += _series.failure_series(failures, source)
    out += _series.verdict_series(list(verdicts))
    return out
