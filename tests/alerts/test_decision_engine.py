"""The decision state machine: thresholds, hysteresis, hard signals, alerts, people, new boards."""

import math

import pytest

from gpuwarden.alerts.base import RiskAssessment
from gpuwarden.alerts.decision import DecisionEngine
from gpuwarden.errors import ConfigError, InputError
from gpuwarden.health import GpuState
from gpuwarden.telemetry import GpuId

GPU = GpuId("node1", 3, "GPU-aaaa")
H = 3600.0


def score(engine, ts, risk, **kw):
    return engine.assess(RiskAssessment(GPU, ts, risk, **kw))


def state(engine, uuid="GPU-aaaa"):
    return engine.status(uuid).state


def test_at_risk_from_enter_threshold_inclusive():
    e = DecisionEngine()
    assert score(e, 0, 0.69) == []
    assert state(e) is GpuState.OK
    [t] = score(e, 60, 0.7, reasons=("SBE rate rising",), action="move critical work")
    assert (t.old, t.new, t.source, t.risk) == (GpuState.OK, GpuState.AT_RISK, "model", 0.7)
    assert t.reasons == ("SBE rate rising",) and t.action == "move critical work"


def test_oscillating_score_does_not_flap():
    e = DecisionEngine()
    changes = []
    # a score swinging between 0.35 and 0.85 with a 2-hour period, every minute for 3 days:
    # it dips below 0.5 for ~40 minutes each cycle, never for 24 h
    for k in range(3 * 24 * 60):
        ts = k * 60.0
        risk = 0.6 + 0.25 * math.sin(2 * math.pi * ts / (2 * H))
        changes += score(e, ts, risk) + e.tick(ts)
    assert [(c.old, c.new) for c in changes] == [(GpuState.OK, GpuState.AT_RISK)]
    # then it stays low: ok exactly once, no earlier than 24 h after it went below 0.5
    low_from = 3 * 24 * H
    for k in range(26 * 60):
        ts = low_from + k * 60.0
        changes += score(e, ts, 0.2) + e.tick(ts)
    assert [(c.old, c.new) for c in changes][1:] == [(GpuState.AT_RISK, GpuState.OK)]
    assert changes[-1].source == "hold" and changes[-1].ts == low_from + 24 * H


def test_a_score_back_above_exit_restarts_the_hold():
    e = DecisionEngine(hold_s=10 * H)
    score(e, 0, 0.9)
    score(e, 1 * H, 0.3)
    assert e.tick(10.5 * H) == []  # 9.5 h below: not yet
    assert state(e) is GpuState.AT_RISK
    score(e, 10.6 * H, 0.55)  # between the bounds: keeps at-risk and resets the clock
    score(e, 10.7 * H, 0.3)
    assert e.tick(20.6 * H) == []
    [t] = e.tick(20.7 * H)
    assert t.new is GpuState.OK


def test_unknown_score_is_no_evidence():
    e = DecisionEngine(hold_s=H)
    score(e, 0, 0.9)
    score(e, 60, math.nan)  # NaN does not start the hold
    assert e.tick(2 * H) == []
    assert state(e) is GpuState.AT_RISK
    assert math.isnan(e.status("GPU-aaaa").risk)
    score(e, 2 * H, 0.1)  # now it does
    score(e, 2.5 * H, math.nan)  # and NaN does not reset it
    [t] = e.tick(3 * H)
    assert t.new is GpuState.OK


def test_hard_signal_is_immediate_and_sticky():
    e = DecisionEngine(hold_s=H)
    score(e, 0, 0.1)
    [t] = score(e, 60, math.nan, hard_signal="Xid 79 (GPU has fallen off the bus)", action="RMA")
    assert (t.old, t.new) == (GpuState.OK, GpuState.UNHEALTHY)
    assert t.reasons[0] == "Xid 79 (GPU has fallen off the bus)" and t.action == "RMA"
    assert score(e, 120, math.nan, hard_signal="Xid 79 (GPU has fallen off the bus)") == []
    for k in range(1, 50):
        assert score(e, k * H, 0.01) == [] and e.tick(k * H) == []
    assert state(e) is GpuState.UNHEALTHY


def test_manual_override_is_pinned_and_recorded_as_a_person():
    e = DecisionEngine(manual_hold_s=2 * H)
    score(e, 0, 0.95)
    t = e.override("GPU-aaaa", "ok", reason="reseated the board", actor="alice", ts=10)
    assert (t.old, t.new, t.source, t.actor) == (
        GpuState.AT_RISK,
        GpuState.OK,
        "manual",
        "alice",
    )
    assert t.reasons == ("reseated the board",)
    assert score(e, 60, 0.95) == [] and e.tick(H) == []  # the person's decision holds
    assert e.status("GPU-aaaa").pinned_until == 10 + 2 * H
    [t] = e.tick(10 + 2 * H)  # pin expired while the score is still high
    assert (t.new, t.source) == (GpuState.AT_RISK, "model")


def test_only_a_hard_signal_newer_than_the_override_breaks_it():
    e = DecisionEngine()
    score(e, 0, math.nan, hard_signal="DBE", hard_signal_ts=0)
    e.override("GPU-aaaa", GpuState.OK, reason="GPU reset, DBE cleared", actor="bob", ts=100)
    # the assessor still sees the old DBE in its lookback window: already judged by bob
    assert score(e, 200, math.nan, hard_signal="DBE", hard_signal_ts=0) == []
    [t] = score(e, 300, math.nan, hard_signal="Xid 48", hard_signal_ts=290)
    assert t.new is GpuState.UNHEALTHY


def test_override_checks_its_input():
    e = DecisionEngine()
    score(e, 0, 0.1)
    with pytest.raises(InputError, match="no GPU"):
        e.override("GPU-nope", "ok", reason="x", actor="a", ts=1)
    with pytest.raises(InputError, match="state must be"):
        e.override("GPU-aaaa", "broken", reason="x", actor="a", ts=1)
    with pytest.raises(InputError, match="reason"):
        e.override("GPU-aaaa", "ok", reason="  ", actor="a", ts=1)


def test_new_board_in_the_slot_starts_ok():
    e = DecisionEngine()
    score(e, 0, math.nan, hard_signal="row remap failure")
    new = GpuId("node1", 3, "GPU-bbbb")
    [t] = e.assess(RiskAssessment(new, 500, 0.1))
    assert (t.old, t.new, t.source) == (GpuState.UNHEALTHY, GpuState.OK, "replaced")
    assert "GPU-aaaa -> GPU-bbbb" in t.reasons[0]
    assert [s.gpu.uuid for s in e.statuses()] == ["GPU-bbbb"]


def test_a_gpu_renumbered_at_a_boot_keeps_its_state():
    """GPU 3 falls off the bus; at the next boot the GPUs after it report one index lower. The
    at-risk GPU 4 and the unhealthy GPU 5 keep their states at 3 and 4, in either order of
    reports; a fresh start would have cleared the double-bit error's sticky unhealthy."""
    for order in (1, -1):
        e = DecisionEngine()
        dead, risky, dbe, quiet = (GpuId("n1", i, f"GPU-{i}") for i in (3, 4, 5, 6))
        e.assess(RiskAssessment(dead, 0, math.nan, hard_signal="fallen off the bus"))
        e.assess(RiskAssessment(risky, 0, 0.9))
        e.assess(RiskAssessment(dbe, 0, math.nan, hard_signal="double-bit ECC error"))
        e.assess(RiskAssessment(quiet, 0, 0.1))
        after = [GpuId("n1", g.index - 1, g.uuid) for g in (risky, dbe, quiet)]
        changes = []
        for g in after[::order]:  # the boot: one report each, risk 0.6 (between the lines)
            changes += e.assess(RiskAssessment(g, 600, 0.6 if g.uuid != "GPU-5" else math.nan))
        states = {s.gpu.index: (s.gpu.uuid, s.state) for s in e.statuses()}
        assert states == {
            3: ("GPU-4", GpuState.AT_RISK),
            4: ("GPU-5", GpuState.UNHEALTHY),
            5: ("GPU-6", GpuState.OK),
        }, (order, states)
        assert {t.source for t in changes} == {"moved"}
        assert any("GPU-4 now reports as index 3 (was 4)" in t.reasons[0] for t in changes)
        assert e.tick(600 + 25 * H) == []  # 0.6 holds at-risk; unhealthy is sticky


def test_a_board_back_in_the_slot_it_left_starts_as_a_new_one():
    e = DecisionEngine()
    score(e, 0, math.nan, hard_signal="row remap failure")
    new = GpuId("node1", 3, "GPU-bbbb")
    e.assess(RiskAssessment(new, 500, 0.1))
    assert e.assess(RiskAssessment(GPU, 900, 0.1)) == []  # the old board, reseated
    assert [(s.gpu.uuid, s.state, s.source) for s in e.statuses()] == [
        ("GPU-aaaa", GpuState.OK, "replaced")
    ]


def test_alerts_drive_the_same_path_and_repeat_harmlessly():
    e = DecisionEngine(hold_s=H)
    kw = dict(key="fp1", name="GpuAtRisk", effect=GpuState.AT_RISK, reasons=("risk 0.81",))
    [t] = e.alert(GPU, firing=True, ts=0, **kw)
    assert (t.new, t.source) == (GpuState.AT_RISK, "alertmanager")
    assert e.alert(GPU, firing=True, ts=5, **kw) == []
    assert e.status("GPU-aaaa").firing == ("GpuAtRisk",)
    assert e.alert(GPU, firing=False, ts=60, **kw) == []
    assert e.alert(GPU, firing=False, ts=70, **kw) == []  # resolved twice: one thing
    assert e.tick(60 + H - 1) == []
    [t] = e.tick(60 + H)
    assert t.new is GpuState.OK
    [t] = e.alert(
        GPU, key="fp2", name="GpuFatalXid", effect=GpuState.UNHEALTHY, firing=True, ts=2 * H
    )
    assert t.new is GpuState.UNHEALTHY and t.reasons == ("alert GpuFatalXid is firing",)


def test_engine_reports_nodes_and_restores():
    e = DecisionEngine()
    e.restore(GPU, GpuState.AT_RISK, since=5, source="model")
    e.assess(RiskAssessment(GpuId("node1", 0, "GPU-0"), 10, 0.1))
    assert e.node_states("node1") == {0: GpuState.OK, 3: GpuState.AT_RISK}
    assert e.nodes() == ["node1"]


def test_a_persons_decision_restored_after_a_restart_stays_pinned():
    # before: restored without its pin, an override to at-risk of a GPU the model scores low
    # went back to ok one hold after the restart, though the person's 24 h had not passed
    e = DecisionEngine(hold_s=60, manual_hold_s=H)
    e.restore(GPU, GpuState.AT_RISK, since=100, source="manual")
    assert e.status("GPU-aaaa").pinned_until == 100 + H
    for ts in range(200, int(100 + H), 60):
        assert score(e, ts, 0.05) == [] and e.tick(ts) == []
    assert state(e) is GpuState.AT_RISK
    [t] = e.tick(100 + H)  # the pin ends when the person's hold ends, then the hold decides
    assert (t.old, t.new) == (GpuState.AT_RISK, GpuState.OK)
    # the scorer's own decisions come back unpinned, as before
    e.restore(GPU, GpuState.AT_RISK, since=100, source="manual")
    e.restore(GPU, GpuState.AT_RISK, since=200, source="model")
    assert e.status("GPU-aaaa").pinned_until is None


@pytest.mark.parametrize(
    "kw", [dict(enter_at=0.4, exit_below=0.5), dict(enter_at=1.5), dict(hold_s=-1)]
)
def test_bad_thresholds_are_refused(kw):
    with pytest.raises(ConfigError):
        DecisionEngine(**kw)


def test_node_uuids_name_each_gpu_of_a_host_for_the_taggers():
    e = DecisionEngine()
    score(e, 0, 0.9)
    e.assess(RiskAssessment(GpuId("node1", 5, "GPU-bbbb"), 0, 0.1))
    e.assess(RiskAssessment(GpuId("node2", 0, "GPU-cccc"), 0, 0.1))
    assert e.node_uuids("node1") == {3: "GPU-aaaa", 5: "GPU-bbbb"}
    assert e.node_states("node1") == {3: GpuState.AT_RISK, 5: GpuState.OK}
    assert e.node_uuids("node9") == {}


def test_a_link_rule_holds_at_risk_at_a_low_risk_until_it_ends_and_the_hold_passes():
    e = DecisionEngine()
    [t] = score(e, 0, 0.03, rule="pcie_link_degraded", reasons=("PCIe link running at x8",))
    assert (t.new, t.source, t.reasons) == (GpuState.AT_RISK, "model", ("PCIe link running at x8",))
    for k in range(1, 48):  # two days of a low risk under the rule: stays at-risk
        assert score(e, k * H, 0.03, rule="pcie_link_degraded") == []
    assert state(e) is GpuState.AT_RISK
    score(e, 48 * H, 0.03)  # the link is back to full width: the hold starts
    assert state(e) is GpuState.AT_RISK
    [t] = score(e, 72 * H, 0.03)
    assert t.new is GpuState.OK and t.source == "hold"
