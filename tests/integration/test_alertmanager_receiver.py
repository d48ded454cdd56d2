"""A real Alertmanager delivers to `gpuwarden serve`'s receiver: bearer token, firing, repeats
(one action), resolved, a hard-signal alert, and a wrong token changing nothing."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from alerting_daemons import post_alerts, start_alertmanager

from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks.base import NodeHealth, TagResult
from gpuwarden.serve.server import ServeHandle
from gpuwarden.serve.service import RiskService
from gpuwarden.store.sqlite import SqliteStore

pytestmark = pytest.mark.integration
TOKEN = "am-to-serve"


class Tags:
    name = "memory"
    dry_run = False

    def __init__(self) -> None:
        self.nodes: dict[str, GpuState] = {}
        self.changes: list[tuple[str, str]] = []

    def apply(self, node: NodeHealth) -> TagResult:
        if self.nodes.get(node.hostname, GpuState.OK) is node.state:
            return TagResult(False, "unchanged")
        self.nodes[node.hostname] = node.state
        self.changes.append((node.hostname, str(node.state)))
        return TagResult(True, f"{node.hostname} {node.state}")


def wait_for(check, what: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return result


def am_alert(name: str, uuid: str, gpu: str, *, ends: datetime | None = None) -> dict:
    now = datetime.now(UTC)
    body = {
        "labels": {"alertname": name, "Hostname": "node5", "gpu": gpu, "UUID": uuid},
        "annotations": {"summary": f"{name} on node5/{gpu}"},
        "startsAt": (now - timedelta(seconds=5)).isoformat(),
        "generatorURL": "http://prometheus/graph",
    }
    if ends is not None:
        body["endsAt"] = ends.isoformat()
    return body


def test_alertmanager_drives_the_decision_path(daemons, tmp_path):
    tags = Tags()
    service = RiskService(SqliteStore(":memory:"), taggers=[tags])
    handle = ServeHandle(service, token=TOKEN).start(loop=False)
    wrong = ServeHandle(RiskService(SqliteStore(":memory:")), token="other").start(loop=False)
    try:
        am = start_alertmanager(
            daemons, tmp_path / "am", f"{handle.url}/alertmanager", TOKEN, repeat="2s"
        )
        post_alerts(am, [am_alert("GpuAtRisk", "GPU-55", "1")])
        wait_for(lambda: tags.changes, "the at-risk re-tag")
        status = service.engine.status("GPU-55")
        assert (status.state, status.source) == (GpuState.AT_RISK, "alertmanager")
        assert status.reasons == ("GpuAtRisk: GpuAtRisk on node5/1",)
        # Alertmanager repeats the unresolved alert every 2 s: still one action
        wait_for(lambda: service.counters.alerts["duplicate"] >= 1, "a repeated notification")
        assert tags.changes == [("node5", "at-risk")]
        assert service.counters.decisions == {("ok", "at-risk", "alertmanager"): 1}

        post_alerts(am, [am_alert("GpuAtRisk", "GPU-55", "1", ends=datetime.now(UTC))])
        wait_for(lambda: not service.engine.status("GPU-55").firing, "the resolved notification")
        assert service.engine.status("GPU-55").state is GpuState.AT_RISK  # the hold starts

        post_alerts(am, [am_alert("GpuRowRemapFailure", "GPU-56", "2")])
        wait_for(lambda: tags.nodes.get("node5") is GpuState.UNHEALTHY, "the unhealthy re-tag")
        assert service.engine.status("GPU-56").state is GpuState.UNHEALTHY
        assert set(service.counters.webhook_requests) == {200}

        # an Alertmanager with the wrong token is refused, and changes nothing there
        am2 = start_alertmanager(daemons, tmp_path / "am2", f"{wrong.url}/alertmanager", TOKEN)
        post_alerts(am2, [am_alert("GpuAtRisk", "GPU-57", "3")])
        wait_for(lambda: wrong.service.counters.webhook_requests[401] >= 1, "a refused delivery")
        assert wrong.service.engine.statuses() == [] and wrong.service.audit.count() == 0
    finally:
        handle.stop()
        wrong.stop()
