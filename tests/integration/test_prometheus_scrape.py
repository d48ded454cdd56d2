"""A real Prometheus scrapes the exporter over a simulated fleet; checked through PromQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from gpuwarden.collectors.sim import SimCollector
from gpuwarden.exporter import Exporter
from gpuwarden.telemetry import Batch

if TYPE_CHECKING:  # tests/ is not a package; pytest loads conftest itself
    from conftest import Daemon

pytestmark = pytest.mark.integration


class LockedSim:
    """The exporter's poll thread calls collect() while the test calls inject_xid(); the
    simulator is not meant to be shared between threads, so take turns. Also records every Xid
    the simulator reported, injected or its own."""

    def __init__(self, sim: SimCollector) -> None:
        self.sim = sim
        self.url = sim.url
        self.xids: set[tuple[str, str]] = set()  # (UUID, code)
        self._lock = threading.Lock()

    def collect(self) -> Batch:
        with self._lock:
            batch = self.sim.collect()
            self.xids |= {(e.gpu.uuid, str(e.code)) for e in batch.events if e.kind == "xid"}
            return batch

    def inject_xid(self, hostname: str, index: int, code: int) -> None:
        with self._lock:
            self.sim.inject_xid(hostname, index, code)

    def close(self) -> None:
        self.sim.close()


def query(prometheus: Daemon, promql: str) -> list[dict]:
    body = prometheus.get("/api/v1/query", query=promql).json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def eventually(
    prometheus: Daemon, promql: str, ok: Callable[[list[dict]], bool], timeout_s: float = 40.0
) -> list[dict]:
    """Query until ``ok(result)``; a generous deadline, as CI machines are often busy."""
    deadline = time.monotonic() + timeout_s
    while not ok(result := query(prometheus, promql)):
        if time.monotonic() > deadline:
            targets = prometheus.get("/api/v1/targets").json()["data"]["activeTargets"]
            health = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets]
            raise AssertionError(
                f"timed out waiting on {promql}; last result {result}; targets {health}\n"
                f"{prometheus.log_tail(10)}"
            )
        time.sleep(0.2)
    return result


def value_is(expected: int) -> Callable[[list[dict]], bool]:
    return lambda result: len(result) == 1 and result[0]["value"][1] == str(expected)


def test_prometheus_scrapes_every_gpu_and_counts_an_injected_xid(
    start_prometheus: Callable[[list[str]], Daemon],
) -> None:
    sim = LockedSim(SimCollector.from_url("sim://?nodes=2&gpus=4&seed=1"))
    gpus = sim.sim.gpus
    assert len(gpus) == 8
    exporter = Exporter(sim, interval_s=0.5)
    try:
        server = exporter.serve("127.0.0.1", 0)
        prometheus = start_prometheus([f"127.0.0.1:{server.server_port}"])

        eventually(prometheus, "count(DCGM_FI_DEV_GPU_TEMP)", value_is(len(gpus)))
        temps = query(prometheus, "DCGM_FI_DEV_GPU_TEMP")
        assert {r["metric"]["UUID"] for r in temps} == {g.uuid for g in gpus}
        assert {(r["metric"]["Hostname"], r["metric"]["gpu"]) for r in temps} == {
            (g.hostname, str(g.index)) for g in gpus
        }
        assert {r["metric"]["device"] for r in temps} == {f"nvidia{g.index}" for g in gpus}
        up = query(prometheus, "gpuwarden_gpu_up == 1")
        assert {r["metric"]["UUID"] for r in up} == {g.uuid for g in gpus}
        assert query(prometheus, "gpuwarden_collector_up")[0]["value"][1] == "1"

        target = gpus[5]
        sim.inject_xid(target.hostname, target.index, 79)
        selector = f'gpuwarden_xid_errors_total{{UUID="{target.uuid}",xid="79"}}'
        eventually(prometheus, selector, value_is(1))
        # every Xid series belongs to a GPU and code the simulator reported, nothing else
        series = query(prometheus, "gpuwarden_xid_errors_total")
        assert {(r["metric"]["UUID"], r["metric"]["xid"]) for r in series} <= sim.xids
    finally:
        exporter.stop()
        sim.close()
