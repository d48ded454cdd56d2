"""One verdict path: what serve decides is what the dashboard shows.

serve runs over a simulated fleet's store with a scorer we script, then the dashboard's data
layer reads the same store. For every GPU both give the same state, while a hysteresis hold and
a person's override are active, and the stored verdicts say why each GPU is in its state.
"""

from __future__ import annotations

import math

from serve_helpers import Clock, RecordingTagger

from gpuwarden.alerts.audit import AuditLog
from gpuwarden.alerts.decision import DecisionEngine
from gpuwarden.collectors import open_collector
from gpuwarden.dashboard import data
from gpuwarden.health import GpuState, Reason, RiskAssessment
from gpuwarden.serve.service import RiskService
from gpuwarden.store.sqlite import SqliteStore

START = 1_767_225_600.0  # 2026-01-01
STEP = 60.0


def _fleet_store(tmp_path, steps: int = 5) -> tuple[SqliteStore, list]:
    store = SqliteStore(tmp_path / "demo.db")
    sim = open_collector(f"sim://?nodes=2&gpus=4&seed=3&start={START:.0f}&step={STEP:.0f}")
    try:
        for _ in range(steps):
            batch = sim.collect()
            store.write_batch(batch)
    finally:
        sim.close()
    gpus = [s.gpu for s in batch.samples]
    return store, gpus


class Scripted:
    """A scorer whose risks the test sets per GPU (uuid -> risk; NaN for the rest)."""

    def __init__(self, gpus) -> None:
        self.gpus = gpus
        self.risk: dict[str, float] = {}
        self.hard: dict[str, str] = {}

    def __call__(self, store, at):
        out = []
        for g in self.gpus:
            why = (Reason("single-bit errors 40/day", {"sbe_per_day_24h": 40.0}),)
            out.append(
                RiskAssessment(
                    g,
                    at,
                    self.risk.get(g.uuid, 0.1),
                    hard_signal=self.hard.get(g.uuid),
                    hard_signal_ts=at if g.uuid in self.hard else None,
                    reasons=why if self.risk.get(g.uuid, 0) >= 0.3 else (),
                )
            )
        return out


def _dashboard_states(store, at: float, stale_s: float = 600.0) -> dict[str, str]:
    states = data.fleet_states(store, at, stale_s=stale_s)
    return dict(zip(states["uuid"], states["state"], strict=True))


def _serve_states(service: RiskService) -> dict[str, str]:
    return {s.gpu.uuid: str(s.state) for s in service.engine.statuses()}


def test_serve_and_the_dashboard_agree_through_holds_and_overrides(tmp_path):
    store, gpus = _fleet_store(tmp_path)
    a, b, c = gpus[0].uuid, gpus[1].uuid, gpus[5].uuid
    clock = Clock(START + 5 * STEP)
    scorer = Scripted(gpus)
    service = RiskService(
        store,
        assess=scorer,
        engine=DecisionEngine(enter_at=0.7, exit_below=0.5, hold_s=3600.0),
        audit=AuditLog(),
        taggers=[RecordingTagger()],
        clock=clock,
        fleet_nodes=100,  # the circuit breaker is not under test
    )
    assert data.stored_verdicts(store, clock.now).empty  # nothing stored before serve runs

    scorer.risk[a] = 0.9
    scorer.hard[b] = "Xid 79 (GPU has fallen off the bus)"
    service.tick()
    clock.now += STEP
    scorer.risk[a] = 0.6  # below the line, above exit_below: the hold keeps it at risk
    service.tick()
    service.override(c, "at-risk", reason="fan noise reported by the DC team", actor="ana")
    clock.now += STEP
    service.tick()

    served = _serve_states(service)
    shown = _dashboard_states(store, clock.now)
    assert served[a] == "at-risk" and served[b] == "unhealthy" and served[c] == "at-risk"
    assert set(shown) == set(served) and shown == served

    latest = store.read_verdicts(latest=True).set_index("uuid")
    assert latest.loc[a, "cause"] == "hysteresis" and math.isclose(latest.loc[a, "risk"], 0.6)
    assert latest.loc[b, "cause"] == "hard-signal"
    assert latest.loc[c, "cause"] == "override"
    assert latest.loc[a, "reasons"][0].features == {"sbe_per_day_24h": 40.0}
    assert {latest.loc[u, "threshold"] for u in (a, b, c)} == {0.7}

    # the score stays low for the hold: ok again in both, and the transition is stored
    scorer.risk[a] = 0.2
    service.tick()
    clock.now += 3600.0
    service.tick()
    # (the simulated collector stopped an hour ago: without a longer stale_s all are missing)
    served, shown = _serve_states(service), _dashboard_states(store, clock.now, 2 * 3600.0)
    assert served[a] == "ok" and shown == served
    turned = store.read_verdicts(uuids=[a])
    assert list(turned["changed_from"].dropna()) == [GpuState.OK, GpuState.AT_RISK]


def test_unchanged_verdicts_are_written_once_an_hour(tmp_path):
    store, gpus = _fleet_store(tmp_path, steps=2)
    clock = Clock(START + 2 * STEP)
    service = RiskService(store, assess=Scripted(gpus), audit=AuditLog(), clock=clock)
    for _ in range(30):
        service.tick()
        clock.now += STEP
    assert len(store.read_verdicts()) == len(gpus)  # steady: one row each
    clock.now += 3600.0
    service.tick()
    assert len(store.read_verdicts()) == 2 * len(gpus)
