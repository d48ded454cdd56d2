"""Queue wait on a real scheduler history (the bundled service, driven by a clock we move):
measured per GPU model, and forecast by replaying the demand forecast through the scheduler."""

from __future__ import annotations

import time

import numpy as np
import pytest
from click.testing import CliRunner
from scheduler_history import run_history  # this directory's helper, imported by path

from gpuwarden.cli import main
from gpuwarden.errors import InputError
from gpuwarden.planning.capacity import WeekNeed, should_scale
from gpuwarden.planning.demand import records_from_scheduler, scheduler_demand
from gpuwarden.planning.forecast import forecast
from gpuwarden.planning.queuewait import (
    FleetHistory,
    QueueEvidence,
    WaitStats,
    forecast_waits,
    gpus_for_wait,
    measured_waits,
)
from gpuwarden.scheduler.state import SchedulerDB

MODEL = "H100-80GB"
#: The history ends at 09:00 UTC, the last one before now. Its jobs come three times as often
#: from 08:00 to 20:00 as at night, so what the next week's replay waits depends on the hour it
#: starts: ending at 15:00-03:00 UTC the replayed p90 wait was 0-0.25 h, at 06:00-12:00 1-2 h
#: (measured); a fixed hour keeps the tests from depending on when they run.
END = (time.time() - 9 * 3600) // 86400 * 86400 + 9 * 3600


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """Nine days on 2 nodes of 4 GPUs, more jobs by day than the fleet holds."""
    path = tmp_path_factory.mktemp("busy") / "s.db"
    end = run_history(path, days=9, end_s=END)
    _, frame = scheduler_demand(path, now_s=end)
    history = FleetHistory.from_db(path, frame.index[-1].timestamp() + 3600)
    return path, end, frame, history


def test_measured_waits_are_the_services_own(busy):
    path, end, _, _ = busy
    since = end - 2 * 86400
    by_model = measured_waits(records_from_scheduler(path), since_s=since, until_s=end)
    # a job never placed has no model yet (``any``); the rest ran on the H100 nodes
    assert set(by_model) <= {MODEL, "any"}
    unplaced = by_model["any"].jobs if "any" in by_model else 0
    got = by_model[MODEL]
    db = SchedulerDB(path)
    rows = [j for j in db.jobs() if since <= j.submitted_at < end]
    db.close()
    waits = [((j.started_at if j.started_at is not None else end) - j.submitted_at) / 3600
             for j in rows]  # fmt: skip
    assert got.jobs + unplaced == len(rows) > 50
    placed = [w for j, w in zip(rows, waits, strict=True) if j.placement]
    assert got.waiting == sum(j.started_at is None for j in rows if j.placement)
    assert got.p50_h == pytest.approx(np.quantile(placed, 0.5))
    assert got.p90_h == pytest.approx(np.quantile(placed, 0.9)) and got.p90_h > 1  # it is busy
    assert ">=" in str(got) if got.waiting else "still waiting" not in str(got)


def test_wait_window_must_not_be_empty(busy):
    with pytest.raises(InputError, match="empty"):
        measured_waits([], since_s=10, until_s=10)


def test_replayed_forecast_waits_fall_with_more_gpus(busy):
    _, _, frame, history = busy
    fc = {MODEL: forecast(frame[MODEL], 168).mean}
    past = {MODEL: frame[MODEL]}
    now = forecast_waits(history, fc, past, 168)[MODEL]
    more = forecast_waits(history, fc, past, 168, extra_nodes={MODEL: 2})[MODEL]
    assert now.jobs > 100 and now.p90_h > 1.0
    assert more.p90_h < now.p90_h
    evidence = gpus_for_wait(history, fc, past, 168, MODEL, max_p90_h=1.0)
    assert evidence.now == now and evidence.add_gpus and evidence.add_gpus % 4 == 0
    assert evidence.then is not None and evidence.then.p90_h <= 1.0
    one_less = forecast_waits(history, fc, past, 168,
                              extra_nodes={MODEL: evidence.add_gpus // 4 - 1})[MODEL]  # fmt: skip
    assert one_less.p90_h > 1.0 or one_less.waiting  # the fewest whole nodes
    assert f"queue wait says add {evidence.add_gpus} GPUs" in evidence.sentence()


def test_a_quiet_fleet_holds(tmp_path):
    path = tmp_path / "s.db"
    end = run_history(path, days=4, nodes=6, jobs_per_hour=1.0, seed=3)
    _, frame = scheduler_demand(path, now_s=end)
    history = FleetHistory.from_db(path, frame.index[-1].timestamp() + 3600)
    fc = {MODEL: forecast(frame[MODEL], 48).mean}
    evidence = gpus_for_wait(history, fc, {MODEL: frame[MODEL]}, 48, MODEL, max_p90_h=1.0)
    assert evidence.add_gpus == 0 and evidence.now.p90_h <= 1.0
    assert evidence.sentence().startswith("queue wait holds")


def _needs(gpus: float) -> list[WeekNeed]:
    import datetime as dt

    return [WeekNeed(0, dt.date(2027, 1, 4), gpus, 0.0, gpus)]


def test_queue_wait_turns_a_release_into_an_add_now():
    waits = WaitStats(MODEL, 120, 0.5, 3.0)
    after = WaitStats(MODEL, 120, 0.0, 0.5)
    queue = QueueEvidence(168, 1.0, waits, 8, after)
    d = should_scale(_needs(4.0), 16, MODEL, lead_weeks=4, queue=queue)
    assert (d.action, d.gpus, d.in_weeks) == ("add", 8, 0)
    assert "queue wait says add 8 GPUs" in d.reason and "forecast p90 wait 3.0 h" in d.reason
    plain = should_scale(_needs(4.0), 16, MODEL)
    assert plain.action == "release"
    holds = QueueEvidence(168, 1.0, after, 0, after)
    assert should_scale(_needs(4.0), 16, MODEL, queue=holds).action == "release"
    stuck = QueueEvidence(168, 1.0, waits, None)
    d = should_scale(_needs(4.0), 16, MODEL, queue=stuck)
    assert d.action == "hold" and "even with 64 more nodes" in d.reason
    # the plan's larger add wins over the queue's
    d = should_scale(_needs(40.0), 16, MODEL, queue=queue)
    assert d.action == "add" and d.gpus == 24


def test_plan_commands_report_queue_wait_from_a_scheduler_database(busy, monkeypatch):
    path, end = str(busy[0]), busy[1]
    monkeypatch.setattr(time, "time", lambda: end)  # the commands plan from the history's end
    r = CliRunner().invoke(main, ["plan", "forecast", "--db", path, "--hours", "24",
                                  "--no-progress"], catch_exceptions=False)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert f"measured, jobs submitted in the last 7 days: {MODEL}: p50" in r.output
    assert "forecast, jobs arriving in the next 24 h (replayed on 2 nodes)" in r.output
    r = CliRunner().invoke(main, ["plan", "should-scale", "--db", path, "--current",
                                  f"{MODEL}=8", "--current", "any=0", "--weeks", "2"],
                           catch_exceptions=False)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert f"{MODEL}: add" in r.output and "queue wait says add" in r.output


def test_openb_has_measured_waits_and_says_the_replay_needs_a_database():
    from test_plan_cli import OPENB

    r = CliRunner().invoke(main, ["plan", "forecast", "--openb", OPENB, "--hours", "24",
                                  "--no-progress"], catch_exceptions=False)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "measured, jobs submitted in the last 7 days: any: p50" in r.output
    assert "replaying the forecast needs the scheduler database (--db)" in r.output
