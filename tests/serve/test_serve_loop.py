"""The in-process risk loop: assess -> decide -> act within one interval, no flapping, hard
signals from the store, retries, the circuit breaker (log, Slack, audit), restarts."""

import logging
import math

from fake_slack import FakeSlack
from serve_helpers import RecordingNotifier, RecordingTagger

from gpuwarden.alerts.audit import AuditLog
from gpuwarden.alerts.base import RiskAssessment
from gpuwarden.alerts.slack import SlackNotifier
from gpuwarden.health import GpuState
from gpuwarden.scheduler import NodeSpec, Scheduler
from gpuwarden.scheduler_hooks.bundled import BundledTagger, SchedulerTarget
from gpuwarden.serve.assessors import default_assessor
from gpuwarden.serve.service import RiskService
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Event, GpuId

INTERVAL = 60.0
GPUS = [GpuId(f"n{n}", g, f"GPU-n{n}-{g}") for n in range(1, 3) for g in range(2)]


class ScriptedAssessor:
    """Risk per GPU from a function of time: what a model would say."""

    def __init__(self, risk_of):
        self.risk_of = risk_of

    def __call__(self, store, at):
        return [
            RiskAssessment(g, at, self.risk_of(g, at), reasons=(f"r={self.risk_of(g, at):.2f}",))
            for g in GPUS
        ]


def service(clock, assess, taggers=(), notifiers=(), **kw):
    return RiskService(
        SqliteStore(":memory:"),
        assess=assess,
        taggers=taggers,
        notifiers=notifiers,
        interval_s=INTERVAL,
        clock=clock,
        **kw,
    )


def test_crossing_is_retagged_in_the_same_interval_in_the_bundled_scheduler(clock):
    sched = Scheduler([NodeSpec.uniform(n, 16000, 65536, 2, "H100-80GB") for n in ("n1", "n2")])
    target = SchedulerTarget(sched)
    start = clock.now
    # GPU n2/1 degrades: +0.1 per interval from 0.3; the others stay at 0.05
    degrading = ScriptedAssessor(
        lambda g, at: (
            min(1.0, 0.3 + 0.1 * (at - start) / INTERVAL) if g.uuid == "GPU-n2-1" else 0.05
        )
    )
    svc = service(clock, degrading, [BundledTagger(target)])
    crossed_at = None
    for _ in range(8):
        changes = svc.tick()
        if changes:
            crossed_at = clock.now
            # the very tick whose score crossed 0.7 has already re-tagged the GPU
            assert target.gpu_health("n2", 1) == "at-risk"
            break
        assert target.gpu_health("n2", 1) == "ok"
        clock.now += INTERVAL
    assert crossed_at == start + 4 * INTERVAL  # 0.3 + 4 x 0.1 = 0.7
    [t] = changes
    assert (t.gpu.uuid, t.new, t.reasons) == ("GPU-n2-1", GpuState.AT_RISK, ("r=0.70",))
    rows = svc.audit.rows()
    assert [(r.hook, r.result.split(":")[0]) for r in rows] == [
        ("bundled", "ok"),
        (None, "decided"),
    ]
    assert target.gpu_health("n2", 0) == "ok" and target.gpu_health("n1", 1) == "ok"


def test_an_oscillating_score_does_not_flap_the_tag(clock):
    start = clock.now
    swinging = ScriptedAssessor(
        lambda g, at: (
            0.6 + 0.25 * math.sin(2 * math.pi * (at - start) / 7200)
            if g.uuid == "GPU-n1-0"
            else 0.1
        )
    )
    tagger = RecordingTagger()
    svc = service(clock, swinging, [tagger])
    for _ in range(2 * 24 * 60):  # two days, a tick a minute
        svc.tick()
        clock.now += INTERVAL
    assert tagger.changes == [("n1", GpuState.AT_RISK)]
    assert svc.counters.decisions == {("ok", "at-risk", "model"): 1}


def test_hard_signals_from_the_store_make_a_gpu_unhealthy_at_once(clock):
    store = SqliteStore(":memory:")
    tagger = RecordingTagger()
    svc = RiskService(store, assess=default_assessor(), taggers=[tagger], clock=clock)
    store.write_events([Event(clock.now - 5, GPUS[3], "xid", 79, "fell off the bus")])
    [t] = svc.tick()
    assert (t.gpu.uuid, t.old, t.new) == ("GPU-n2-1", GpuState.OK, GpuState.UNHEALTHY)
    assert t.reasons[0] == "Xid 79 (GPU has fallen off the bus)" and "reseat" in t.action
    assert tagger.nodes == {"n2": GpuState.UNHEALTHY}


def test_a_failed_backend_is_retried_and_audited_once_per_result(clock):
    tagger = RecordingTagger()
    tagger.fail_next = 3
    svc = service(
        clock, ScriptedAssessor(lambda g, at: 0.9 if g.uuid == "GPU-n1-0" else 0.1), [tagger]
    )
    for _ in range(5):
        svc.tick()
        clock.now += INTERVAL
    assert tagger.nodes == {"n1": GpuState.AT_RISK}
    hook_rows = [r.result for r in reversed(svc.audit.rows(hook="recording"))]
    assert hook_rows == ["failed: HookError: backend unreachable", "ok: n1 -> at-risk"]
    assert svc.counters.hook_results[("recording", "failed")] == 3


def test_the_breaker_stops_a_mass_retag_and_says_so_everywhere(clock, caplog):
    caplog.set_level(logging.WARNING, logger="gpuwarden.serve")
    fleet = [GpuId(f"r1-n{n:02d}", 0, f"GPU-{n}") for n in range(30)]

    def bad_model(store, at):  # a broken model: everything at risk
        return [RiskAssessment(g, at, 0.99, reasons=("bad model",)) for g in fleet]

    slack = FakeSlack()
    try:
        notifier = SlackNotifier(slack.url, group_wait_s=0, backoff_s=0.01)
        tagger = RecordingTagger()
        svc = service(clock, bad_model, [tagger], [notifier], breaker_share=0.1)
        changes = svc.tick()
        assert len(changes) == 30
        assert len(tagger.changes) == 3  # 10% of 30 nodes
        # the audit table says which re-tags were refused and why
        blocked = [
            r
            for r in svc.audit.rows(limit=1000, hook="recording")
            if r.result.startswith("blocked")
        ]
        assert len(blocked) == 27
        assert "circuit breaker open: 3 nodes already re-tagged by recording" in blocked[0].result
        # the log says so once per held node, and people hear it in one Slack message
        warnings = [
            r.getMessage() for r in caplog.records if "circuit breaker open" in r.getMessage()
        ]
        assert len(warnings) == 27
        assert svc.flush_notifiers() == 1
        [msg] = slack.messages
        assert "30 GPUs changed state (30 at-risk)" in msg["text"]
        assert "circuit breaker refused 27 re-tags" in msg["text"]
        # held re-tags are not applied behind people's backs, even after the window
        clock.now += 7200
        svc.tick()
        assert len(tagger.changes) == 3 and len(svc.actor.held) == 27
        released = svc.release_held("dana")
        assert len(released) == 27 and all(
            h.result.startswith("released by dana: ok") for h in released
        )
        assert len(tagger.nodes) == 30 and not svc.actor.held
    finally:
        slack.close()


def test_restart_restores_states_and_resyncs_backends(clock, tmp_path):
    audit_path = tmp_path / "audit.db"
    tagger = RecordingTagger()
    svc = service(
        clock,
        ScriptedAssessor(lambda g, at: 0.95 if g.uuid == "GPU-n2-0" else 0.1),
        [tagger],
        audit=AuditLog(audit_path),
    )
    svc.tick()
    svc.audit.close()
    # a new process, and a backend that lost its tags (say slurmctld restarted)
    fresh = RecordingTagger()
    again = service(clock, None, [fresh], audit=AuditLog(audit_path))
    outcomes = again.restore()
    assert again.engine.status("GPU-n2-0").state is GpuState.AT_RISK
    assert fresh.nodes == {"n2": GpuState.AT_RISK}
    assert [(o.hostname, o.result.split(":")[0]) for o in outcomes] == [("n2", "ok")]
    assert again.audit.rows(limit=1)[0].source == "resync"


def test_a_failing_assessor_is_counted_and_reported(clock):
    def broken(store, at):
        raise RuntimeError("model file missing")

    notifier = RecordingNotifier()
    svc = service(clock, broken, notifiers=[notifier])
    assert svc.tick() == []
    assert svc.counters.assess_errors == 1
    assert svc.health() == (False, "assess failing: RuntimeError: model file missing")


def test_the_breaker_counts_the_fleet_from_the_store_or_is_told(clock):
    from gpuwarden.telemetry import Batch, Sample

    store = SqliteStore(":memory:")
    hosts = [GpuId(f"h{n:02d}", 0, f"GPU-h{n}") for n in range(20)]
    store.write_batch(
        Batch(clock.now, tuple(Sample(clock.now, g, {"gpu_temp_c": 40.0}) for g in hosts))
    )
    receiver = RiskService(store, taggers=[RecordingTagger()], clock=clock)  # no scorer
    receiver.tick()
    assert receiver.fleet_size() == 20 and receiver.taggers[0].limit() == 2
    told = RiskService(store, taggers=[RecordingTagger()], fleet_nodes=500, clock=clock)
    told.tick()
    assert told.taggers[0].limit() == 50
