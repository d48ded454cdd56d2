"""The facts of the known week (known_week.py), value by value, and of a simulated store."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from known_week import EXPECTED, SINCE, UNTIL

from gpuwarden.errors import InputError
from gpuwarden.reports import FACTS_VERSION, Facts, FactSources, build_facts, last_full_week
from gpuwarden.store import open_store


def test_period_and_version(facts):
    assert facts.version == FACTS_VERSION
    assert facts.period.since == "2025-11-24T00:00:00Z" and facts.period.hours == 168


def test_last_full_week_is_monday_to_monday():
    since, until = last_full_week(1_764_763_200.0)  # Wednesday 2025-12-03 12:00 UTC
    assert (since, until) == (SINCE, UNTIL)


def test_availability_counts_silent_and_unhealthy_hours(facts):
    a = facts.availability
    assert a.fleet_availability_pct == EXPECTED["availability"]
    assert a.fleet_downtime_h == EXPECTED["downtime_h"]
    nodes = {n.hostname: n.availability_pct for n in a.by_node}
    assert nodes == {"gpu-a01": EXPECTED["gpu-a01"], "gpu-b02": EXPECTED["gpu-b02"]}
    models = {m.model: m.downtime_h for m in a.by_model}
    assert models == {"H100-80GB": 12.0, "A100-80GB": 24.0}


def test_failures_lead_time_caught_and_missed(facts):
    f = facts.failures
    assert (f.failures, f.caught, f.missed, f.median_lead_time_h) == (2, 1, 1, 30.0)
    assert f.unwatched == 0 and all(i.watched for i in f.items)
    caught = next(i for i in f.items if i.caught)
    assert (caught.hostname, caught.gpu, caught.xid, caught.flag_cause) == (
        "gpu-a01",
        0,
        79,
        "model",
    )
    assert caught.flagged_date == "2025-11-25" and caught.date == "2025-11-27"


def test_risk_now_and_transitions(facts):
    assert (facts.risk.at_risk_gpus, facts.risk.unhealthy_gpus) == (1, 0)
    gpu = facts.risk.gpus[0]
    assert (gpu.hostname, gpu.gpu, gpu.risk, gpu.reasons) == (
        "gpu-b02",
        1,
        0.77,
        ["SBE rate rising"],
    )
    al = facts.alerts
    assert (al.transitions, al.to_at_risk, al.to_unhealthy, al.to_ok) == (4, 2, 1, 1)
    assert al.hard_signal_transitions == 1
    # the audit log's hook rows: slurm ok, kubernetes failed; Slack is no re-tag
    assert (al.retags_ok, al.retags_failed, al.retags_by_hook) == (
        1,
        1,
        {"slurm": 1, "kubernetes": 1},
    )


def test_risk_per_day_carries_each_gpus_state_forward(facts):
    # gpu-a01/0 at risk from day 2 18:00 to day 4 (unhealthy, then ok); gpu-b02/1 from day 7
    assert facts.risk.daily == [
        ("2025-11-24", 0, 0), ("2025-11-25", 1, 0), ("2025-11-26", 1, 0), ("2025-11-27", 0, 0),
        ("2025-11-28", 0, 0), ("2025-11-29", 0, 0), ("2025-11-30", 1, 0),
    ]  # fmt: skip


def test_xids_by_code_and_class(facts):
    x = facts.xids
    assert x.xids == 4
    assert {c.code: c.count for c in x.by_code} == {13: 2, 79: 1, 48: 1}
    assert x.by_class == {"application": 2, "hardware": 2}
    assert x.hard_signals == {"fatal_xid": 2}
    assert "fallen off the bus" in next(c.name for c in x.by_code if c.code == 79)


def test_utilisation_energy_and_co2(facts):
    u = facts.utilisation
    assert u.fleet_gpu_util_pct == EXPECTED["util"]
    assert {m.model: m.gpu_util_pct for m in u.by_model} == {"A100-80GB": 20.0, "H100-80GB": 80.0}
    assert u.fleet_memory_used_pct == 50.0
    e = facts.energy
    assert (e.energy_kwh, e.co2_kg, e.gpu_hours_measured) == (
        EXPECTED["energy_kwh"],
        EXPECTED["co2_kg"],
        648.0,
    )


def test_scheduler_queue_tenants_and_cost(facts):
    s = facts.scheduler
    assert (s.jobs_started, s.queue_wait_median_min, s.queue_wait_p95_min) == (2, 35.0, 57.5)
    assert (s.preemptions, s.gpu_hours, s.capacity_gpu_hours) == (1, 250.0, 672.0)
    tenants = {t.tenant: (t.gpu_hours, t.quota_used_pct, t.gpu_util_pct, t.memory_used_pct)
               for t in s.by_tenant}  # fmt: skip
    assert tenants == {"alice": (200.0, 29.8, 80.0, 50.0), "bob": (50.0, 14.9, 20.0, 50.0)}
    assert facts.cost.by_tenant == {"alice": 500.0, "bob": 125.0} and facts.cost.total == 625.0


def test_kubernetes_namespaces_as_tenants(facts):
    (ns,) = facts.namespaces
    assert (ns.tenant, ns.gpu_hours, ns.share_pct, ns.gpu_util_pct) == (
        "ml-train",
        198.0,
        100.0,
        80.0,
    )


def test_changes_against_the_week_before(facts):
    changes = {c.metric: (c.before, c.after) for c in facts.changes}
    assert changes["failures"] == (0.0, 2.0)
    assert changes["Xids"] == (5.0, 4.0)


def test_absent_sections_are_left_out_and_named(week):
    store = open_store(week[0])
    try:
        f = build_facts(store, SINCE, UNTIL, sources=FactSources(), now=UNTIL)
    finally:
        store.close()
    assert f.scheduler is None and f.cost is None and f.energy.co2_kg is None
    absent = {a.section for a in f.absent}
    assert {"scheduler", "co2", "re-tags", "capacity"} <= absent
    assert f.alerts.retags_ok is None  # missing, not zero


def test_facts_round_trip_as_json(facts):
    again = Facts.model_validate_json(facts.model_dump_json())
    assert again == facts
    assert json.loads(facts.model_dump_json())["version"] == FACTS_VERSION


def test_a_period_that_ends_before_it_starts_is_refused(week):
    store = open_store(week[0])
    try:
        with pytest.raises(InputError, match="must end after it starts"):
            build_facts(store, UNTIL, SINCE)
    finally:
        store.close()


def test_missing_scheduler_database_is_an_error(week):
    store = open_store(week[0])
    try:
        with pytest.raises(InputError, match="does not exist"):
            build_facts(store, SINCE, UNTIL, sources=FactSources(scheduler_db="/nonexistent.db"))
    finally:
        store.close()


def test_simulated_store_facts_agree_with_ground_truth(tmp_path):
    """A simulated fleet: every ground-truth failure of the period is in the facts, and every
    GPU that reported is counted."""
    from gpuwarden.demo import fleet_spec, simulate_into

    store = open_store(f"sqlite:///{tmp_path / 'sim.db'}")
    end = SINCE + 14 * 86400
    spec = fleet_spec(nodes=3, gpus_per_node=4, models="H100-80GB,A100-80GB", days=14, step_s=900,
                      seed=11, accel=120, end_ts=end)  # fmt: skip
    simulate_into(store, spec, progress=False)
    try:
        f = build_facts(store, end - 7 * 86400, end)
        truth = store.read_failures(start=end - 7 * 86400, end=end)
        assert f.failures.failures == len(truth) > 0
        assert f.failures.caught == 0  # no verdicts stored: nothing was flagged
        assert any(a.section == "verdicts" for a in f.absent)
        assert sum(f.inventory.gpus_by_model.values()) == f.inventory.gpus <= 12
        assert 0 < f.availability.fleet_availability_pct <= 100
    finally:
        store.close()


def test_inventory_added_replaced_and_missing():
    import pandas as pd

    from gpuwarden.reports._fleet import inventory

    day = 86400.0
    rows = [  # hostname, gpu, uuid, first_ts, last_ts
        ("n1", 0, "old", SINCE - 30 * day, SINCE + 2 * day),  # replaced on day 3 ...
        ("n1", 0, "new", SINCE + 3 * day, UNTIL - 60),  # ... by this board
        ("n1", 1, "quiet", SINCE - 30 * day, SINCE + 5 * day),  # silent since day 5: missing
        ("n2", 0, "fresh", SINCE + day, UNTIL - 60),  # a new slot: added
        ("n2", 1, "gone", SINCE - 60 * day, SINCE - 40 * day),  # long gone: not missing
    ]
    gpus = pd.DataFrame(rows, columns=["hostname", "gpu", "uuid", "first_ts", "last_ts"]).assign(
        model="H100"
    )
    inv = inventory(gpus, SINCE, UNTIL)
    assert [(r.old_uuid, r.new_uuid, r.date) for r in inv.replaced] == [
        ("old", "new", "2025-11-27")
    ]
    # with their days: the added board's first report, the missing one's last
    assert [(g.uuid, g.date) for g in inv.added] == [("fresh", "2025-11-25")]
    assert [(g.uuid, g.date) for g in inv.missing] == [("quiet", "2025-11-29")]
    assert inv.gpus == 3 and inv.slots == {"n1": [0, 1], "n2": [0]}


def test_a_tsdb_store_is_asked_for_the_gpus_of_both_weeks_and_their_lookback(week, sources):
    """A store that lists only its lookback's GPUs (``reach_back``: Prometheus,
    VictoriaMetrics) is asked to reach past the week before and two weeks of silence."""
    from gpuwarden.reports._fleet import LOOKBACK_S

    asked: list[float] = []
    store = open_store(week[0])
    store.reach_back = asked.append  # type: ignore[attr-defined]
    try:
        build_facts(store, SINCE, UNTIL, sources=sources, now=UNTIL + 3600)
        build_facts(store, SINCE, UNTIL, sources=sources, now=UNTIL + 3600, compare=False)
    finally:
        store.close()
    span = UNTIL - SINCE
    assert asked == [SINCE - span - LOOKBACK_S, SINCE - LOOKBACK_S]


def test_the_newest_verdicts_come_from_those_read_for_the_period(week):
    """Each GPU's newest verdict at the period's end is the newest of those in force at its
    start and those in it: one read of the store fewer (a whole lookback on a TSDB)."""
    from gpuwarden.reports.facts import _newest, _verdicts

    store = open_store(week[0])
    try:
        want = store.read_verdicts(end=UNTIL, latest=True)
        got = _newest(_verdicts(store, SINCE, UNTIL, None))
        before = store.read_verdicts(end=SINCE, latest=True)
    finally:
        store.close()
    assert len(want) and not before.empty

    def plain(frame: pd.DataFrame) -> list[list[str]]:
        held = frame["changed_from"].astype(object)
        return frame.assign(changed_from=held.where(held.notna(), "")).astype(str).values.tolist()

    assert plain(got) == plain(want)


def test_a_failure_with_no_verdict_before_it_was_not_watched_not_missed():
    """Verdicts backfilled for the last days only (as the demo does): a failure before them
    was neither caught nor missed, and the report says so."""

    from gpuwarden.reports._fleet import failures

    t = 1_763_942_400.0
    failed = pd.DataFrame(
        {
            "ts": [t + 3600.0, t + 20 * 86400.0],
            "hostname": ["n1", "n1"],
            "gpu": [0, 1],
            "uuid": ["GPU-early", "GPU-late"],
            "kind": ["hbm_uncorrectable", "hbm_uncorrectable"],
            "xid": [95, 95],
        }
    )
    verdicts = pd.DataFrame(
        {
            "ts": [t + 19 * 86400.0, t + 19 * 86400.0],
            "uuid": ["GPU-early", "GPU-late"],
            "state": ["ok", "ok"],
            "cause": ["model", "model"],
        }
    )
    got = failures(failed, verdicts, {})
    assert (got.failures, got.caught, got.missed, got.unwatched) == (2, 0, 1, 1)
    assert [i.watched for i in got.items] == [False, True]


def test_a_missed_failure_near_the_line_is_told_from_one_that_showed_little():
    """Both missed: one GPU's risk reached 0.31 under a line of 0.50 (near: a lower line or a
    model of the fleet's own might have flagged it), the other's never passed 0.05."""
    from gpuwarden.reports._fleet import failures

    t = 1_763_942_400.0
    failed = pd.DataFrame({"ts": [t + 5 * 86400.0] * 3, "hostname": ["n1"] * 3, "gpu": [0, 1, 2],
                           "uuid": ["GPU-near", "GPU-quiet", "GPU-flagged"],
                           "kind": ["pcie_degradation"] * 3, "xid": [79] * 3})  # fmt: skip
    hours = [t + h * 3600.0 for h in range(0, 96, 6)]
    rows = []
    for uuid, top in (("GPU-near", 0.31), ("GPU-quiet", 0.05), ("GPU-flagged", 0.8)):
        for k, ts in enumerate(hours):
            risk = top * (k + 1) / len(hours)
            state = "at-risk" if risk >= 0.5 else "ok"
            rows.append((ts, uuid, state, "model", risk, 0.5))
    verdicts = pd.DataFrame(rows, columns=["ts", "uuid", "state", "cause", "risk", "threshold"])
    got = failures(failed, verdicts, {})
    assert (got.failures, got.caught, got.missed, got.missed_near) == (3, 1, 2, 1)
    peak = {i.uuid: i.peak_risk for i in got.items}
    assert peak == {"GPU-near": 0.31, "GPU-quiet": 0.05, "GPU-flagged": 0.8}
    # verdicts without a risk (hard signals only) come near nothing
    blind = failures(failed, verdicts.assign(risk=float("nan")), {})
    assert blind.missed_near == 0 and {i.peak_risk for i in blind.items} == {None}


def test_devices_known_from_events_alone_are_neither_down_nor_missing(tmp_path):
    """A store of memory-error events (`ingest --memory-errors`) said 0% availability, 672 h of
    downtime and four GPUs missing: nothing was ever read of those devices."""
    from gpuwarden.collectors.memory_errors import ingest_memory_errors

    log = tmp_path / "hbm.csv"
    log.write_text(
        "Datacenter,Server,Name,Stack,SID,PcId,BankGroup,BankArray,Col,Row,Time,EccType\n"
        f"dc1,n1,DSA3,0x3,0x0,0x1,0x2,0x1,0x54,0x3e2b,{SINCE - 86400:.0f},CE\n"
        f"dc1,n1,DSA3,0x3,0x0,0x1,0x2,0x1,0x54,0x3e2c,{SINCE + 3600:.0f},CE\n"
        f"dc1,n2,DSA1,0x0,0x0,0x1,0x2,0x1,0x54,0x3e2b,{SINCE + 7200:.0f},UER\n"
    )
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    ingest_memory_errors(store, log)
    f = build_facts(store, SINCE, UNTIL, now=UNTIL + 3600)
    assert f.availability is None and f.inventory.gpus == 0 and not f.inventory.missing
    assert any(a.section == "availability" for a in f.absent)
    # the errors themselves are in the report: by type, the one before the period left out
    m = f.memory_errors
    assert m is not None and (m.errors, m.uncorrectable, m.devices) == (2, 1, 2)
    assert [(c.ecc, c.errors, c.devices) for c in m.by_type] == [("CE", 1, 1), ("UER", 1, 1)]
    from gpuwarden.reports.build import checker_index
    from gpuwarden.reports.claims import check
    from gpuwarden.reports.templates import summary

    said = [s.text for s in summary(f) if s.topic == "memory_errors"]
    assert said == [
        "The HBM error log holds 2 memory errors on 2 devices (1 CE, 1 UER); 1 was uncorrectable."
    ]
    assert check(said[0], checker_index(f)) == {}
    wrong = "The HBM error log holds 5 memory errors, 3 of them uncorrectable."
    assert check(wrong, checker_index(f)) != {}  # the claims checker reads these numbers
