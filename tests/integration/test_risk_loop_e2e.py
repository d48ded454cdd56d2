"""Acceptance 1, end to end with real servers.

A simulated fleet (2 nodes x 2 GPUs, one GPU degrading) is collected and scored by one
`gpuwarden serve` (the scorer: its assess() is scripted so the GPU's risk ramps up); a real
Prometheus scrapes its /metrics with the shipped alert rules; a real Alertmanager routes
GpuAtRisk to a second `gpuwarden serve`'s receiver, which re-tags the node in a real Slurm. Every
hop is checked on its own, and the time from the risk crossing 0.7 to the node re-tagged is
printed (1-second scrape, evaluation and scoring intervals).
"""

from __future__ import annotations

import threading
import time

import pytest
from alerting_daemons import start_alertmanager, start_prometheus_with_rules
from slurm_cluster import FEATURE, SlurmCluster

from gpuwarden.alerts.base import RiskAssessment
from gpuwarden.collectors.sim import SimCollector
from gpuwarden.exporter import Exporter
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks.slurm import SlurmTagger
from gpuwarden.serve.server import ServeHandle
from gpuwarden.serve.service import RiskService
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import GpuId

pytestmark = pytest.mark.integration
TOKEN = "e2e-token"


class DegradingGpu:
    """The scorer's assess(): every GPU in the store at 0.1, the target ramping up 0.05 per
    second once ``begin()`` is called; remembers when it first said >= 0.7."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.start: float | None = None
        self.crossed: float | None = None
        self.uuid = ""
        self._lock = threading.Lock()

    def begin(self) -> None:
        with self._lock:
            self.start = time.time()

    def __call__(self, store, at):
        out = []
        with self._lock:
            for r in store.gpus().itertuples():
                gpu = GpuId(r.hostname, int(r.gpu), r.uuid, model=r.model)
                risk = 0.1
                if (gpu.hostname, gpu.index) == self.target:
                    self.uuid = gpu.uuid
                    if self.start is not None:
                        risk = min(0.99, 0.4 + 0.05 * (time.time() - self.start))
                        if risk >= 0.7 and self.crossed is None:
                            self.crossed = time.time()
                reasons = (f"ECC SBE trend (risk {risk:.2f})",) if risk > 0.1 else ()
                out.append(RiskAssessment(gpu, at, risk, reasons=reasons))
        return out


def query(prometheus, promql: str) -> list[dict]:
    body = prometheus.get("/api/v1/query", query=promql).json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(check, what: str, timeout_s: float = 45.0):
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return result


def test_risk_to_prometheus_to_alertmanager_to_slurm(daemons, tmp_path):
    slurm = SlurmCluster(tmp_path / "slurm", nodes=("node000", "node001"))
    scorer = receiver = None
    try:
        slurm.start()
        tagger = SlurmTagger(slurm_conf=str(slurm.conf))
        receiver = ServeHandle(
            RiskService(SqliteStore(":memory:"), taggers=[tagger], breaker_share=1.0),
            token=TOKEN,
        ).start()

        sim = SimCollector.from_url(f"sim://?nodes=2&gpus=2&seed=5&step=1&start={int(time.time())}")
        store = SqliteStore(":memory:")
        degrading = DegradingGpu(("node001", 1))
        scorer_service = RiskService(
            store,
            assess=degrading,
            interval_s=1.0,
            exporter=Exporter(sim, interval_s=1.0, store=store),
        )
        scorer = ServeHandle(scorer_service, token=None).start()
        am = start_alertmanager(daemons, tmp_path / "am", f"{receiver.url}/alertmanager", TOKEN)
        prometheus = start_prometheus_with_rules(
            daemons, tmp_path / "prom", [f"127.0.0.1:{scorer.port}"], am
        )

        # hop 0: Prometheus scrapes the scorer's telemetry (dcgm-exporter names) and its scores
        wait_for(lambda: query(prometheus, "count(DCGM_FI_DEV_GPU_TEMP) == 4"), "telemetry")
        wait_for(lambda: query(prometheus, "count(gpuwarden_risk_score) == 4"), "risk scores")
        assert query(prometheus, 'gpuwarden_gpu_state{state="ok"} == 1') != []
        degrading.begin()

        uuid = degrading.uuid
        # hop 1: the score crosses 0.7 in the scorer, and Prometheus sees it
        wait_for(lambda: query(prometheus, f'gpuwarden_risk_score{{UUID="{uuid}"}} >= 0.7'), "0.7")
        # hop 2: the shipped rule fires
        firing = wait_for(
            lambda: query(prometheus, 'ALERTS{alertname="GpuAtRisk",alertstate="firing"}'),
            "GpuAtRisk firing",
        )
        assert {a["metric"]["UUID"] for a in firing} == {uuid}
        # hop 3: Alertmanager holds it
        am_alerts = wait_for(
            lambda: [
                a
                for a in am.get("/api/v2/alerts").json()
                if a["labels"]["alertname"] == "GpuAtRisk"
            ],
            "the alert in Alertmanager",
        )
        assert am_alerts[0]["labels"]["Hostname"] == "node001"
        # hop 4: the receiver decided, from Alertmanager
        status = wait_for(
            lambda: (
                _state(receiver, uuid) is GpuState.AT_RISK and receiver.service.engine.status(uuid)
            ),
            "the receiver's decision",
        )
        assert status.source == "alertmanager"
        # hop 5: Slurm no longer offers node001 to critical jobs
        wait_for(lambda: FEATURE not in slurm.node("node001")["ActiveFeatures"], "the Slurm re-tag")
        tagged = time.time()
        assert degrading.crossed is not None
        print(
            f"\nrisk crossed 0.7 -> node re-tagged in Slurm: {tagged - degrading.crossed:.1f} s "
            "(1 s scrape, evaluation and scoring intervals)"
        )
        assert FEATURE in slurm.node("node000")["ActiveFeatures"].split(",")
        [row] = receiver.service.audit.rows(hook="slurm")
        assert row.result.startswith("ok: ran scontrol update NodeName=node001")
    finally:
        for handle in (scorer, receiver):
            if handle is not None:
                handle.stop()
        slurm.stop()


def _state(handle: ServeHandle, uuid: str) -> GpuState | None:
    try:
        return handle.service.engine.status(uuid).state
    except Exception:
        return None
