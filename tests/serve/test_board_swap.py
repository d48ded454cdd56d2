"""A board replaced in its slot: the loop marks the old board unhealthy once, turns the slot ok
when the new board reports, and stays there. The scorer still has the old board's last day of
samples and the hard signals that got it replaced; neither may be taken for the slot again."""

from __future__ import annotations

from gpuwarden.alerts.alertmanager import AmPayload
from gpuwarden.alerts.base import RiskAssessment
from gpuwarden.alerts.decision import DecisionEngine
from gpuwarden.alerts.hard_signals import HardSignalAssessor
from gpuwarden.health import GpuState
from gpuwarden.serve.assessors import default_assessor
from gpuwarden.serve.service import REPLACED, RiskService
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Batch, Event, GpuId, Sample

T0 = 1_767_225_600.0  # 2026-01-01
STEP = 300.0
OLD = GpuId("n1", 1, "GPU-old", model="H100-80GB")
NEW = GpuId("n1", 1, "GPU-new", model="H100-80GB")
PEERS = [GpuId(h, i, f"GPU-{h}-{i}", model="H100-80GB") for h in ("n1", "n2") for i in (0, 1)]
FAILED, INSTALLED = T0 + 3 * 3600, T0 + 3.5 * 3600  # the old board's DBE, the new board
END = T0 + 10 * 3600


def _store() -> SqliteStore:
    store = SqliteStore(":memory:")
    ts = T0
    while ts < END:
        gpus = [g for g in PEERS if g.uuid != "GPU-n1-1"]
        gpus.append(OLD if ts <= FAILED else NEW)
        if FAILED < ts < INSTALLED:
            gpus.pop()  # the slot is empty while the board is swapped
        samples = tuple(
            Sample(
                ts,
                g,
                {
                    "gpu_temp_c": 50.0,
                    "mem_temp_c": 60.0,
                    "ecc_dbe_volatile_total": 2.0 if g is OLD and ts >= FAILED else 0.0,
                    "ecc_sbe_volatile_total": 0.0,
                    # the old board's link ran at half width for hours: at-risk by the link rule
                    "pcie_link_width": 8.0 if g is OLD else 16.0,
                    "pcie_link_width_max": 16.0,
                },
            )
            for g in gpus
        )
        store.write_batch(Batch(ts, samples))
        ts += STEP
    store.write_events([Event(FAILED, OLD, "xid", 48, "double-bit ECC error")])
    return store


def _service(store: SqliteStore, assess, clock: list[float]) -> RiskService:
    """The loop over ``store`` at ``clock[0]``, at-risk from 0.5, storing no verdicts."""
    return RiskService(
        store,
        assess=assess,
        engine=DecisionEngine(enter_at=0.5, exit_below=0.5),
        interval_s=1800,
        clock=lambda: clock[0],
        verdicts=None,
    )


def _slot_changes(assess) -> list[tuple[str, GpuState, GpuState, str]]:
    store = _store()
    clock = [T0]
    service = _service(store, assess, clock)
    seen = []
    t = FAILED - 1800
    while t <= END:
        clock[0] = t
        seen += [
            (c.gpu.uuid, c.old, c.new, c.source)
            for c in service.tick(t)
            if (c.gpu.hostname, c.gpu.index) == ("n1", 1)
        ]
        t += 1800
    store.close()
    return seen


def test_the_old_board_is_unhealthy_once_and_the_new_one_keeps_the_slot():
    # the live default's assessor, with a lookback as long as the rounds are apart
    changes = _slot_changes(default_assessor(lookback_s=2 * 1800))
    assert changes == [
        ("GPU-old", GpuState.OK, GpuState.AT_RISK, "model"),
        ("GPU-old", GpuState.AT_RISK, GpuState.UNHEALTHY, "model"),
        ("GPU-new", GpuState.UNHEALTHY, GpuState.OK, "replaced"),
    ], changes


def test_hard_signals_over_a_long_lookback_name_only_the_slots_current_board():
    """A lookback of four hours still holds the old board's double-bit error and Xid 48 after
    the new board reports: the old board is left out once its successor reports."""
    store = _store()
    hard = HardSignalAssessor(lookback_s=4 * 3600)
    before = {a.gpu.uuid: a for a in hard(store, FAILED + 600)}
    assert before["GPU-old"].hard_signal
    after = {a.gpu.uuid: a for a in hard(store, INSTALLED + 1800)}
    assert "GPU-old" not in after and not after["GPU-new"].hard_signal
    store.close()


def _own_scorer(store, now):
    """A scorer of one's own that knows nothing of swaps: it scores every board it has samples
    of in the last day, the old one still at its last risk."""
    out = [RiskAssessment(OLD, now, risk=0.9, reasons=("my rule",))]
    if now >= INSTALLED:
        out.append(RiskAssessment(NEW, now, risk=0.1))
    return out


def test_an_own_scorer_naming_the_old_board_does_not_flap_the_slot():
    changes = _slot_changes(_own_scorer)
    assert changes == [
        ("GPU-old", GpuState.OK, GpuState.AT_RISK, "model"),
        ("GPU-new", GpuState.AT_RISK, GpuState.OK, "replaced"),
    ], changes


def test_an_alert_on_the_old_board_after_the_swap_changes_nothing():
    """Alertmanager resolves (or keeps firing) an alert labelled with the old board's UUID
    after the new board reports in its slot: the slot stays the new board's."""
    store = _store()
    service = _service(store, None, [END])
    service.engine.assess(RiskAssessment(NEW, END, risk=0.1))

    def alert(uuid: str, status: str) -> dict:
        labels = {"alertname": "GpuAtRisk", "Hostname": "n1", "gpu": "1", "UUID": uuid}
        return {"status": status, "labels": labels, "annotations": {},
                "startsAt": "2026-01-01T02:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                "fingerprint": f"fp-{uuid}-{status}"}  # fmt: skip

    for status in ("firing", "resolved"):
        body = {"version": "4", "status": status, "alerts": [alert("GPU-old", status)]}
        got = service.receive_alerts(AmPayload.model_validate(body))
        assert got["alerts"][0]["outcome"] == f"ignored: {REPLACED}", got
    assert service.engine.slot_uuids()[("n1", 1)] == "GPU-new"
    assert service.engine.status("GPU-new").state is GpuState.OK
    # the new board's own alert is applied
    body = {"version": "4", "status": "firing", "alerts": [alert("GPU-new", "firing")]}
    got = service.receive_alerts(AmPayload.model_validate(body))
    assert got["alerts"][0]["outcome"] == "applied: ok -> at-risk", got
    store.close()
