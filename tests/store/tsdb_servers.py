"""Real VictoriaMetrics and Prometheus servers for the store tests, on 127.0.0.1 in temporary
directories (tests/integration/conftest.py starts and stops them; a missing binary fails the
test when CI=true).

    vm = start_victoriametrics(tmp)                 # empty, keeps 100 years, dedups to 1 ms
    prom = start_prometheus_with(tmp, series)       # started, then series written to it

gpuwarden only reads Prometheus, so the tests load it through its remote-write receiver
(``prom_remote_write``), in time order, with a retention long enough that it deletes nothing.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuwarden.store import _series
from gpuwarden.store._frames import frame_rows
from gpuwarden.telemetry import Event, Failure


def _module(name: str, path: Path) -> Any:
    """The module at ``path`` (this folder need not be on ``sys.path``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


daemons = _module("integration_daemons", Path(__file__).parents[1] / "integration" / "conftest.py")
Daemon = daemons.Daemon
prom_remote_write = _module("prom_remote_write", Path(__file__).with_name("prom_remote_write.py"))


def start_victoriametrics(workdir: Path, *, args: tuple[str, ...] = ()) -> Any:
    """An empty VictoriaMetrics (the integration tests' launcher: 100 years of retention, no
    response cache, no latency offset) that keeps one sample per series and millisecond, so a
    rewrite replaces; ``args`` are more flags."""
    flags = ("-dedup.minScrapeInterval=1ms", "-loggerLevel=ERROR", *args)
    return daemons.launch_victoria_metrics(workdir, args=flags)


def start_prometheus(workdir: Path, *, timeout_s: float = 30.0) -> Any:
    """Prometheus on the data in ``workdir`` (none the first time), with 100 years of retention,
    nothing to scrape, and its remote-write receiver on (``prom_remote_write``: day-long blocks,
    out-of-order samples accepted); ``timeout_s`` for it to replay what it holds."""
    binary = daemons.require_binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config = {"global": {}, "storage": prom_remote_write.OUT_OF_ORDER}
    (workdir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = daemons.free_port()
    argv = [
        binary,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=100y",
        f"--storage.tsdb.min-block-duration={prom_remote_write.BLOCK}",
        "--web.enable-remote-write-receiver",
        "--log.level=warn",
    ]
    return daemons.start_daemon("prometheus", argv, port=port, workdir=workdir, timeout_s=timeout_s)


def start_prometheus_with(workdir: Path, series: Iterable[_series.Series]) -> Any:
    """Prometheus holding ``series``, written through its remote-write receiver."""
    daemon = start_prometheus(workdir)
    try:
        with prom_remote_write.RemoteWriter(daemon.url) as writer:
            writer.write(series)
    except BaseException:
        daemon.stop()
        raise
    return daemon


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
