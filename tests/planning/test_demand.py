"""Demand history from the scheduler's database and the openb trace, hour by hour."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuwarden.errors import InputError
from gpuwarden.planning.demand import (
    DemandRecord,
    hourly_demand,
    monthly_growth,
    openb_window,
    queue_wait_hourly,
    records_from_openb,
    records_from_scheduler,
    spec_gpus,
    waiting,
)
from gpuwarden.scheduler.state import JobRow, NodeRow, SchedulerDB

OPENB = Path(__file__).resolve().parents[1] / "data" / "openb" / "openb_pod_list_default.csv"
H = 3600.0


def test_hours_hold_the_gpu_hours_requested_in_them():
    records = [
        DemandRecord("a", "H100", 4, submitted_s=0, started_s=0, ended_s=2 * H),
        DemandRecord("b", "H100", 0.25, submitted_s=0.5 * H, started_s=H, ended_s=H),
        DemandRecord("b", "A100", 2, submitted_s=1.5 * H, started_s=None, ended_s=3 * H),
    ]
    frame = hourly_demand(records, by=("gpu_model",))
    assert list(frame.columns) == ["A100", "H100"]
    assert frame["H100"].tolist() == pytest.approx([4.125, 4.0, 0.0])
    assert frame["A100"].tolist() == pytest.approx([0.0, 1.0, 2.0])
    by_both = hourly_demand(records, by=("gpu_model", "tenant"))
    assert set(by_both.columns) == {"A100/b", "H100/a", "H100/b"}
    total = hourly_demand(records, by=())
    assert total["all"].sum() == pytest.approx(4 * 2 + 0.125 + 2 * 1.5)


def test_running_job_counts_until_now():
    frame = hourly_demand([DemandRecord("a", "H100", 1, 0, 0, None)], now_s=1.5 * H)
    assert frame["H100"].tolist() == pytest.approx([1.0, 0.5])


def test_bad_grouping_and_empty_input():
    with pytest.raises(InputError, match="cannot group"):
        hourly_demand([DemandRecord("a", "H100", 1, 0, 0, H)], by=("node",))
    with pytest.raises(InputError, match="no jobs"):
        hourly_demand([])


def test_queue_wait_is_missing_where_nothing_started():
    waits = queue_wait_hourly(
        [
            DemandRecord("a", "H100", 1, submitted_s=0, started_s=600, ended_s=H),
            DemandRecord("a", "H100", 1, submitted_s=0, started_s=1200, ended_s=H),
            DemandRecord("a", "H100", 1, submitted_s=H, started_s=3 * H, ended_s=4 * H),
            DemandRecord("a", "H100", 1, submitted_s=H, started_s=None, ended_s=None),
        ]
    )
    assert waits.iloc[0] == pytest.approx(900)
    assert np.isnan(waits.iloc[1]) and np.isnan(waits.iloc[2])
    assert waits.iloc[3] == pytest.approx(2 * H)


def test_monthly_growth_of_a_growing_series():
    hours = np.arange(6 * 30 * 24)
    grown = pd.Series(100 * 1.05 ** (hours / (30 * 24)))
    assert monthly_growth(grown) == pytest.approx(0.05, abs=0.002)
    assert monthly_growth(grown.iloc[: 40 * 24]) is None  # one whole month: not measurable
    assert monthly_growth(pd.Series(np.zeros(90 * 24))) is None


def test_spec_gpus():
    assert spec_gpus({"tasks": 2, "gpus_per_task": 4, "gpu_milli": 1000}) == 8
    assert spec_gpus({"tasks": 1, "gpus_per_task": 1, "gpu_milli": 250}) == 0.25
    assert spec_gpus({"tasks": 1, "mig_profile": "3g.40gb"}) == pytest.approx(3 / 7)
    assert spec_gpus({"tasks": 1, "gpus_per_task": 0}) == 0


def _job(job_id, tenant, spec, submitted, started=None, ended=None, placement=None):
    return JobRow(job_id, 0, tenant, job_id, spec, "succeeded" if ended else "queued", 0, None,
                  submitted, submitted, started, ended, placement=placement)  # fmt: skip


def test_records_from_a_real_scheduler_database(tmp_path):
    db = SchedulerDB(tmp_path / "s.db")
    db.upsert_node(NodeRow("n1", 64000, 1 << 18, [{"index": 0, "model": "H100"}], None, 0))
    base = {"tasks": 1, "gpus_per_task": 2, "gpu_milli": 1000, "gpu_models": []}
    db.insert_job(_job("j1", "ml", base, 0.0, 60.0, 2 * H, [{"node": "n1", "gpus": [0, 1]}]))
    db.insert_job(_job("j2", "web", {**base, "gpu_models": ["A100"]}, 100.0))
    db.insert_job(_job("j3", "ml", {**base, "gpus_per_task": 0}, 0.0, 0.0, H))
    db.close()
    records = records_from_scheduler(tmp_path / "s.db")
    assert [(r.tenant, r.gpu_model, r.gpus, r.started_s) for r in records] == [
        ("ml", "H100", 2.0, 60.0),
        ("web", "A100", 2.0, None),
    ]
    with pytest.raises(InputError, match="no such scheduler database"):
        records_from_scheduler(tmp_path / "missing.db")


def test_openb_trace_gives_34_days_of_demand():
    records = records_from_openb(OPENB)
    lo, hi = openb_window(records)
    assert 33 < (hi - lo) / 86400 < 35
    # pods the trace scheduled start at their scheduled_time, pending ones never
    assert any(r.started_s is None for r in records)
    assert all(r.started_s is None or r.started_s >= r.submitted_s for r in records)
    frame = hourly_demand(records, by=(), start_s=lo, end_s=hi)
    assert 20 < frame["all"].min() and frame["all"].max() < 80


def test_hours_match_a_brute_force_count_on_random_jobs():
    rng = np.random.default_rng(7)
    records = []
    for _ in range(200):
        start = float(rng.uniform(-5 * H, 30 * H))
        records.append(DemandRecord("t", "H100", float(rng.choice([0.25, 1, 8])), start, start,
                                    start + float(rng.uniform(0, 10 * H))))  # fmt: skip
    frame = hourly_demand(records, by=(), start_s=0, end_s=24 * H)
    brute = [
        sum(
            r.gpus * max(0.0, min(r.ended_s, (h + 1) * H) - max(r.submitted_s, h * H)) / H
            for r in records
        )  # fmt: skip
        for h in range(24)
    ]
    assert frame["all"].tolist() == pytest.approx(brute)


def test_waiting_gpu_hours_are_the_unmet_demand():
    records = [
        DemandRecord("a", "H100", 2, submitted_s=0, started_s=0.5 * H, ended_s=3 * H),
        DemandRecord("a", "H100", 1, submitted_s=H, started_s=None, ended_s=2.5 * H),
        DemandRecord("a", "H100", 4, submitted_s=0, started_s=0, ended_s=H),
    ]
    queued = hourly_demand(waiting(records), by=(), start_s=0, end_s=3 * H)
    assert queued["all"].tolist() == pytest.approx([1.0, 1.0, 0.5])
