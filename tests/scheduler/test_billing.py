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


def test_a_share_that_reserves_most_of_a_gpus_memory_bills_its_memory_share() -> None:
    """Dominant share: 100 milli of compute with 60,000 MiB of an 81,920 MiB GPU keeps others
    off 73 % of it and bills that, not 10 %."""
    job = Job("kv", gpu_milli=100, gpu_memory_mib=60_000)
    assert billed_gpu_milli(job, [81_920]) == pytest.approx(1000 * 60_000 / 81_920)
    assert billed_gpu_milli(job, [163_840]) == pytest.approx(366.2, abs=0.1)  # a bigger GPU
    assert billed_gpu_milli(job) == 100.0  # GPU memory unknown: compute only
    assert billed_gpu_milli(job, [None]) == 100.0
    assert billed_gpu_milli(job, [float("nan")]) == 100.0
    assert billed_gpu_milli(job, [40_960]) == 1000.0  # never more than the whole GPU
    # compute the larger share: compute
    assert billed_gpu_milli(Job("c", gpu_milli=500, gpu_memory_mib=8192), [81_920]) == 500.0
    # a gang of shares on GPUs of different sizes: each task against its own GPU
    gang = Job("g", tasks=2, gpu_milli=100, gpu_memory_mib=40_960)
    assert billed_gpu_milli(gang, [81_920, 40_960]) == pytest.approx(500 + 1000)


def test_whole_gpu_mig_and_undeclared_memory_bill_as_before() -> None:
    assert billed_gpu_milli(Job("w", gpus_per_task=2, gpu_memory_mib=60_000), [81_920]) == 2000
    assert billed_gpu_milli(Job("m", mig_profile="1g.10gb", gpu_memory_mib=9000), [81_920]) == (
        pytest.approx(1000 / 7)
    )
    assert billed_gpu_milli(Job("s", gpu_milli=250), [81_920]) == 250.0  # its share of memory


def test_the_service_bills_a_memory_heavy_share_by_its_memory(svc, clock) -> None:
    from service_helpers import A, PlayAgent, submit

    agent = PlayAgent(svc)  # H100s of 81,920 MiB
    heavy = submit(svc, gpu_milli=100, gpu_memory_mib=60_000)
    light = submit(svc, gpu_milli=100)
    agent.sync()  # ordered started
    agent.sync()  # reported running: billed from here
    clock.t += H
    agent.exit((heavy, 1, 0), 0)
    agent.exit((light, 1, 0), 0)
    agent.sync()
    bills = {r.job_id: r.gpu_hours for r in svc.billing(A, 0, clock.t)}
    assert bills == {heavy: pytest.approx(60_000 / 81_920, abs=1e-6), light: pytest.approx(0.1)}
    # the GPU quota still counts compute; the memory is in the GPU-memory quota's count
    assert svc.quota_rows(A)[0]["used_gpus"] == 0


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
