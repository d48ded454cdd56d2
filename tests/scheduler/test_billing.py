"""Billing: GPU-hours per job inside a window, shares and MIG instances counted fractionally."""

from __future__ import annotations

import csv
import io

import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import Job
from gpuwarden.scheduler.billing import (
    BillRow,
    UsageInterval,
    billed_gpu_milli,
    gpu_hours,
    tenant_totals,
    to_csv,
    write_csv,
)

H = 3600.0


def test_quarter_gpu_for_two_hours_is_half_a_gpu_hour() -> None:
    job = Job("nb", tenant="lab", gpu_milli=250)
    iv = UsageInterval("nb", "lab", "notebook", billed_gpu_milli(job), 1000.0, 1000.0 + 2 * H)
    assert gpu_hours([iv]) == [BillRow("lab", "nb", "notebook", 0.5)]


def test_mig_3g_for_seven_hours_is_three_gpu_hours() -> None:
    job = Job("m", tenant="lab", mig_profile="3g.40gb")
    assert job.total_gpu_milli == 429  # rounded for quotas ...
    assert billed_gpu_milli(job) == pytest.approx(3000 / 7)  # ... exact for bills
    (row,) = gpu_hours([UsageInterval("m", "lab", "m", billed_gpu_milli(job), 0.0, 7 * H)])
    assert row.gpu_hours == 3.0


def test_gang_of_whole_gpus_counts_every_gpu() -> None:
    job = Job("g", tasks=2, gpus_per_task=4)
    (row,) = gpu_hours([UsageInterval("g", "t", "g", billed_gpu_milli(job), 0.0, 1.5 * H)])
    assert row.gpu_hours == 12.0


def test_intervals_are_clipped_to_the_window() -> None:
    ivs = [
        UsageInterval("a", "t", "a", 1000, 0.0, 10 * H),  # 2 h inside [4 h, 6 h)
        UsageInterval("b", "t", "b", 500, 5 * H, 8 * H),  # 1 h inside, half a GPU
        UsageInterval("c", "t", "c", 1000, 6 * H, 7 * H),  # starts at `until`: nothing
        UsageInterval("d", "t", "d", 1000, 1 * H, 4 * H),  # ends at `since`: nothing
    ]
    rows = gpu_hours(ivs, since=4 * H, until=6 * H)
    assert [(r.job_id, r.gpu_hours) for r in rows] == [("a", 2.0), ("b", 0.5)]


def test_open_interval_counts_up_to_now() -> None:
    ivs = [UsageInterval("run", "t", "r", 1000, 0.0, None)]
    assert gpu_hours(ivs, now=3 * H)[0].gpu_hours == 3.0
    assert gpu_hours(ivs, until=2 * H, now=3 * H)[0].gpu_hours == 2.0  # window ends first
    assert gpu_hours(ivs, since=4 * H, now=3 * H) == []  # window after now: nothing yet
    with pytest.raises(InputError, match="still open; pass now"):
        gpu_hours(ivs)


def test_attempts_of_one_job_add_up_and_tenants_total() -> None:
    ivs = [
        UsageInterval("j1", "a", "train", 2000, 0.0, 1 * H),  # attempt 1, preempted
        UsageInterval("j1", "a", "train", 2000, 2 * H, 3.5 * H),  # attempt 2
        UsageInterval("j2", "a", "eval", 100, 0.0, 10 * H),
        UsageInterval("j3", "b", "serve", 1000, 0.0, 0.25 * H),
    ]
    rows = gpu_hours(ivs)
    assert rows == [
        BillRow("a", "j1", "train", 5.0),
        BillRow("a", "j2", "eval", 1.0),
        BillRow("b", "j3", "serve", 0.25),
    ]
    assert tenant_totals(rows) == {"a": 6.0, "b": 0.25}


def test_csv_has_the_contract_header(tmp_path) -> None:
    rows = [BillRow("a", "j1", "train, big", 5.0), BillRow("b", "j3", "serve", 0.25)]
    path = tmp_path / "bill.csv"
    write_csv(rows, path)
    parsed = list(csv.DictReader(path.open()))
    assert list(parsed[0]) == ["tenant", "job_id", "name", "gpu_hours"]
    assert parsed[0]["name"] == "train, big" and float(parsed[1]["gpu_hours"]) == 0.25
    assert to_csv(rows) == path.read_text()
    buf = io.StringIO()
    write_csv([], buf)
    assert buf.getvalue() == "tenant,job_id,name,gpu_hours\n"


def test_bad_intervals_and_windows_are_refused() -> None:
    with pytest.raises(InputError, match="ends before it starts"):
        UsageInterval("x", "t", "x", 1000, 10.0, 5.0)
    with pytest.raises(InputError, match="start_s"):
        UsageInterval("x", "t", "x", 1000, float("nan"), None)
    with pytest.raises(InputError, match="window starts after it ends"):
        gpu_hours([], since=10.0, until=5.0)
