"""Every PromQL query of the Grafana dashboards returns data from a real Prometheus.

A real Prometheus scrapes ``gpuwarden serve``'s /metrics (the exporter's telemetry plus the risk
loop's verdicts) over a simulated fleet in which a few faults are injected (a GPU falls off the
bus with Xid 79; another gets double-bit errors, Xid 48 and a failed row remap), so the panels
that list sick GPUs have something to list and the risk panels have transitions to draw. Each dashboard's
template variables are resolved through Prometheus as Grafana would (``label_values``), then
every panel and annotation query is evaluated. The same is done for the eight queries of NVIDIA's
dcgm-exporter dashboard (grafana.com 12239).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpuwarden.alerts.hard_signals import HardSignalAssessor
from gpuwarden.collectors.sim import SimCollector
from gpuwarden.exporter import Exporter
from gpuwarden.health import RiskAssessment
from gpuwarden.serve.assessors import combine
from gpuwarden.serve.server import ServeHandle
from gpuwarden.serve.service import RiskService
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Batch, Event, GpuId

if TYPE_CHECKING:  # tests/ is not a package; pytest loads conftest itself
    from conftest import Daemon

pytestmark = pytest.mark.integration

DASHBOARDS = sorted((Path(__file__).resolve().parents[2] / "grafana" / "dashboards").glob("*.json"))

# NVIDIA dcgm-exporter's Grafana dashboard (grafana.com 12239, dcgm-exporter's
# grafana/dcgm-exporter-dashboard.json): its eight panel queries and two variables.
DCGM_VARIABLES = {
    "Hostname": "label_values(DCGM_FI_DEV_FB_FREE, Hostname)",
    "gpu": 'label_values(DCGM_FI_DEV_FB_FREE{Hostname=~"$Hostname"}, gpu)',
}
_SEL = '{Hostname=~"$Hostname", gpu=~"$gpu"}'
DCGM_12239 = {
    "GPU Temperature": f"max(DCGM_FI_DEV_GPU_TEMP{_SEL}) by (Hostname, gpu, uuid)",
    "GPU Avg. Temp": f"avg(DCGM_FI_DEV_GPU_TEMP{_SEL})",
    "GPU Power Usage": f"max(DCGM_FI_DEV_POWER_USAGE{_SEL}) by (Hostname, gpu, uuid)",
    "GPU Power Total": f"sum(max(DCGM_FI_DEV_POWER_USAGE{_SEL}) by (gpu))",
    "GPU SM Clocks": f"max(DCGM_FI_DEV_SM_CLOCK{_SEL} * 1000000) by (Hostname, UUID, gpu)",
    "GPU Framebuffer Mem Used": f"max(DCGM_FI_DEV_FB_USED{_SEL}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
    # DCGM's profiling fields: the simulator derives them from utilisation
    "GPU Utilization": f"max(DCGM_FI_PROF_GR_ENGINE_ACTIVE{_SEL}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
    "Tensor Core Utilization": f"max(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{_SEL}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
}
# Grafana's built-in interval variables, for a 1 s scrape interval and a short time range.
BUILTINS = {"__rate_interval": "5s", "__interval": "1s", "__range": "1m", "__range_s": "60"}


class FaultyFleet:
    """The simulator plus faults injected on demand: ``lost`` falls off the bus (Xid 79, then
    absent); ``sick`` drops off for a few collections (gpu_lost), then comes back with a
    double-bit error per collection, Xid 48 and a failed row remap. The exporter's poll thread
    and the test take turns on the simulator."""

    def __init__(self, sim: SimCollector) -> None:
        self.sim = sim
        self.url = sim.url
        self.lost: GpuId = sim.gpus[1]
        self.sick: GpuId = sim.gpus[4]
        self._armed = False
        self._dbe = 0.0
        self.now = sim.spec.start_ts  # simulated time of the last collection
        self._lock = threading.Lock()

    def arm(self) -> None:
        with self._lock:
            self.sim.inject_xid(self.lost.hostname, self.lost.index, 79)
            self.sim.inject_xid(self.sick.hostname, self.sick.index, 48)
            self._armed = True
            self._lost_sent = False
            self._sick_away = 6  # collections

    def collect(self) -> Batch:
        with self._lock:
            batch = self.sim.collect()
            self.now = batch.ts
            if not self._armed:
                return batch
            self._dbe += 1
            samples = []
            away = self._sick_away > 0
            self._sick_away -= 1
            for s in batch.samples:
                if s.gpu.uuid == self.lost.uuid or (away and s.gpu.uuid == self.sick.uuid):
                    continue  # gone from the bus: no readings
                if s.gpu.uuid == self.sick.uuid:
                    values = dict(s.values)
                    values["ecc_dbe_volatile_total"] = (
                        values.get("ecc_dbe_volatile_total", 0) + self._dbe
                    )
                    values["remapped_rows_failure"] = 1.0
                    values["remapped_rows_pending"] = 1.0
                    s = replace(s, values=values)
                samples.append(s)
            events = list(batch.events)
            if not self._lost_sent:
                for gpu in (self.lost, self.sick):
                    events.append(Event(batch.ts, gpu, "gpu_lost", None, "fell off the bus"))
                self._lost_sent = True
            return replace(batch, samples=tuple(samples), events=tuple(events))

    def close(self) -> None:
        self.sim.close()


def _result(prometheus: Daemon, expr: str, *, instant: bool) -> tuple[bool, str]:
    """(returned data, why not) for one query, run as Grafana runs it (instant or range).
    A query Prometheus rejects raises AssertionError at once: waiting cannot fix it."""
    if instant:
        response = prometheus.get("/api/v1/query", query=expr)
    else:
        now = time.time()
        # from before the faults were injected: annotations show events, not a state
        response = prometheus.get(
            "/api/v1/query_range", query=expr, start=f"{now - 120:.3f}", end=f"{now:.3f}", step="1"
        )
    body = response.json()
    if body.get("status") != "success":
        raise AssertionError(
            f"Prometheus rejects {expr!r}: {body.get('errorType')}: {body.get('error')}"
        )
    result = body["data"]["result"]
    if body["data"]["resultType"] == "matrix":
        return any(series["values"] for series in result), "no samples"
    return bool(result), "empty result"


def _eventually(
    prometheus: Daemon, expr: str, *, instant: bool, timeout_s: float = 20.0
) -> str | None:
    """None once ``expr`` returns data; else why not, after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        ok, detail = _result(prometheus, expr, instant=instant)
        if ok:
            return None
        if time.monotonic() > deadline:
            return detail
        time.sleep(0.5)


def label_values(prometheus: Daemon, definition: str) -> list[str]:
    """Grafana's ``label_values(selector, label)`` through /api/v1/series."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", definition, flags=re.S)
    assert m, f"unsupported variable query {definition!r}"
    selector, label = m.groups()
    now = time.time()
    body = prometheus.get(
        "/api/v1/series", **{"match[]": selector, "start": f"{now - 300:.0f}"}
    ).json()
    assert body["status"] == "success", body
    return sorted({s[label] for s in body["data"] if label in s})


def substitute(expr: str, values: dict[str, str]) -> str:
    """Replace ``$name``, ``${name}``, ``${name:format}`` and ``[[name]]`` as Grafana does."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in values:
            raise AssertionError(f"unknown template variable {name!r} in {expr!r}")
        return values[name]

    pattern = r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)"
    return re.sub(pattern, one, expr)


def resolve_variables(
    prometheus: Daemon, variables: list[dict[str, Any]], prefer: dict[str, str]
) -> dict[str, str]:
    """Each query variable's options through Prometheus (they must not be empty), then the
    value Grafana would send: the ``allValue`` (or every option) for multi-value variables,
    else ``prefer[name]`` (which must be an option) or the first option."""
    values = dict(BUILTINS)
    for var in variables:
        name = var["name"]
        if var["type"] == "datasource":
            values[name] = "gpuwarden-prometheus"
            continue
        assert var["type"] == "query", f"variable {name}: unexpected type {var['type']}"
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        options = label_values(prometheus, substitute(query, values))
        assert options, f"variable {name} ({query}) has no options"
        if var.get("multi") or var.get("includeAll"):
            values[name] = var.get("allValue") or "(" + "|".join(map(re.escape, options)) + ")"
        elif name in prefer:
            assert prefer[name] in options, f"{name}={prefer[name]} is not among {options}"
            values[name] = prefer[name]
        else:
            values[name] = options[0]
    return values


def dashboard_queries(board: dict[str, Any]) -> Iterator[tuple[str, str, bool]]:
    """(where, expr, instant) for every panel target (rows included) and annotation query."""

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for panel in panels(board["panels"]):
        for t in panel.get("targets", []):
            if t.get("expr"):
                yield f"panel {panel['title']!r} {t['refId']}", t["expr"], bool(t.get("instant"))
    for ann in board.get("annotations", {}).get("list", []):
        if ann.get("expr"):
            yield f"annotation {ann['name']!r}", ann["expr"], False


def steady_risk(store: SqliteStore, at: float) -> list[RiskAssessment]:
    """A scorer for the risk panels: every GPU stored, a risk from its index (the model's own
    scoring is tested elsewhere; these panels only need risks and the hard signals' changes)."""
    gpus = store.gpus()
    return [
        RiskAssessment(GpuId(g.hostname, int(g.gpu), g.uuid), at, risk=0.1 + 0.05 * int(g.gpu))
        for g in gpus.itertuples()
    ]


@pytest.fixture
def fleet_prometheus(
    start_prometheus: Callable[[list[str]], Daemon], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Daemon, FaultyFleet]]:
    # the model's drift figure and error level need a week of history, which this live fleet
    # has not got: set them as the model's scorer leaves them, so that serve exports the gauges
    from gpuwarden.models import _assess

    monkeypatch.setitem(_assess._drift, "spread_drift_c", 0.42)
    # ... and the error level with its limits, as the shipped card gives them
    from gpuwarden.models.artifact import load_model
    from gpuwarden.models.score import level_limit

    limit = level_limit(load_model().card)
    monkeypatch.setitem(_assess._level, "level", {k: v / 8 for k, v in limit.items()})
    monkeypatch.setitem(_assess._level, "limit", limit)
    fleet = FaultyFleet(
        SimCollector.from_url("sim://?nodes=2&gpus=4&seed=1&models=H100-80GB,A100-80GB")
    )
    store = SqliteStore(tmp_path / "telemetry.db")
    exporter = Exporter(fleet, interval_s=0.5, store=store)
    service = RiskService(
        store,
        assess=combine(steady_risk, HardSignalAssessor()),
        exporter=exporter,
        interval_s=0.5,
        verdicts=None,
        clock=lambda: fleet.now,  # the risk loop runs on the simulated clock
    )
    handle = ServeHandle(service, token=None)
    try:
        handle.start("127.0.0.1", 0)
        prometheus = start_prometheus([f"127.0.0.1:{handle.port}"])
        assert _eventually(prometheus, "count(DCGM_FI_DEV_GPU_TEMP) == 8", instant=True) is None
        fleet.arm()
        for ready in (
            "gpuwarden_gpu_up == 0",
            "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[24h]) > 0",
            'gpuwarden_gpu_state{state="unhealthy"} == 1',
            "gpuwarden_decisions_total > 0",
        ):
            assert _eventually(prometheus, ready, instant=True) is None, ready
        yield prometheus, fleet
    finally:
        handle.stop()
        fleet.close()
        store.close()


def test_every_grafana_query_returns_data(fleet_prometheus: tuple[Daemon, FaultyFleet]) -> None:
    """Our dashboards, then NVIDIA's: one Prometheus for both keeps the test short."""
    prometheus, fleet = fleet_prometheus
    assert len(DASHBOARDS) >= 2, DASHBOARDS
    prefer = {"Hostname": fleet.sick.hostname, "gpu": str(fleet.sick.index)}
    failures: list[str] = []
    checked = 0
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        values = resolve_variables(prometheus, board["templating"]["list"], prefer)
        for where, expr, instant in dashboard_queries(board):
            checked += 1
            if why := _check(prometheus, substitute(expr, values), instant=instant):
                failures.append(f"{path.name} {where}: {why}")
    assert checked >= 40, f"only {checked} queries found"

    # NVIDIA's dcgm-exporter dashboard: its variables are multi-value with "All"
    variables = [
        {"name": name, "type": "query", "query": query, "multi": True, "includeAll": True}
        for name, query in DCGM_VARIABLES.items()
    ]
    values = resolve_variables(prometheus, variables, {})
    for title, expr in DCGM_12239.items():
        if why := _check(prometheus, substitute(expr, values), instant=False):
            failures.append(f"dcgm-exporter dashboard {title!r}: {why}")
    assert not failures, "queries without data:\n" + "\n".join(failures)


def _check(prometheus: Daemon, promql: str, *, instant: bool) -> str | None:
    try:
        why = _eventually(prometheus, promql, instant=instant)
    except AssertionError as exc:
        why = str(exc)
    return None if why is None else f"{why}\n    {promql}"
