"""Real nvidia-smi ``--query-gpu=<~230 fields> --format=csv`` captures (tests/data/smi/real/,
sources in SOURCES.md there), read value by value through ``smi_csv.read_query_csv``: the header's
units and the values' units are stripped, ``[N/A]`` and ``N/A`` are absent, the sample time is
the row's ``timestamp`` (taken as UTC), and the driver version is the node's."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuwarden.collectors.smi_csv import read_query_csv
from gpuwarden.telemetry import FIELDS, Batch, GpuId, NodeInfo

REAL = Path(__file__).resolve().parents[1] / "data" / "smi" / "real"
MASKED = "GPU-00000000-0000-0000-0000-000000000000"  # the capture tool masks UUIDs
SMI_FIELDS = {f.name for f in FIELDS if f.smi}


def read(name: str) -> Batch:
    with (REAL / name).open(newline="") as fh:  # the Windows capture keeps its line endings
        return read_query_csv(fh.read(), hostname="node7")


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


#: file -> (time, identity, driver, every catalogue field read); the rest are absent.
EXPECTED: dict[str, tuple[str, GpuId, str, dict[str, float]]] = {
    "h100_sxm_r590_query_gpu_all_load.csv": (
        "2026-07-14T08:12:53.353",
        GpuId("node7", 0, MASKED, "00000000:00:09.0", "NVIDIA H100 80GB HBM3"),
        "590.48.01",
        {
            "gpu_temp_c": 59, "mem_temp_c": 54, "power_w": 631.95, "power_limit_w": 700.0,
            "sm_clock_mhz": 1980, "mem_clock_mhz": 2619,
            "gpu_util_pct": 100, "mem_copy_util_pct": 11,
            "fb_used_mib": 19818, "fb_free_mib": 61263, "fb_total_mib": 81559,
            "ecc_sbe_volatile_total": 0, "ecc_dbe_volatile_total": 0,
            "ecc_sbe_aggregate_total": 0, "ecc_dbe_aggregate_total": 0,
            "remapped_rows_correctable": 0, "remapped_rows_uncorrectable": 0,
            "remapped_rows_pending": 0, "remapped_rows_failure": 0,  # "No"
            "pcie_link_gen": 5, "pcie_link_gen_max": 5,
            "pcie_link_width": 16, "pcie_link_width_max": 16,
            "clock_event_reasons": 0,  # 0x0000000000000000
        },
    ),
    "h100_mig_r590_query_gpu_all_load.csv": (
        "2026-07-14T09:00:44.579",
        GpuId("node7", 0, MASKED, "00000000:00:09.0", "NVIDIA H100 80GB HBM3"),
        "590.48.01",
        {
            "gpu_temp_c": 53, "mem_temp_c": 59, "power_w": 433.78, "power_limit_w": 700.0,
            "sm_clock_mhz": 1980, "mem_clock_mhz": 2619,
            "fb_used_mib": 11125, "fb_free_mib": 69956, "fb_total_mib": 81559,
            "ecc_sbe_volatile_total": 0, "ecc_dbe_volatile_total": 0,
            "ecc_sbe_aggregate_total": 0, "ecc_dbe_aggregate_total": 0,
            "pcie_link_gen": 5, "pcie_link_gen_max": 5,
            "pcie_link_width": 16, "pcie_link_width_max": 16,
            "clock_event_reasons": 0,
        },
    ),
    "rtx4080s_r595_query_gpu_all_idle.csv": (
        "2026-06-26T11:59:44.226",
        GpuId("node7", 0, MASKED, "00000000:01:00.0", "NVIDIA GeForce RTX 4080 SUPER"),
        "595.71.05",
        {
            "gpu_temp_c": 43, "power_w": 26.2, "power_limit_w": 320.0,
            "sm_clock_mhz": 210, "mem_clock_mhz": 405,
            "gpu_util_pct": 0, "mem_copy_util_pct": 23,
            "fb_used_mib": 596, "fb_free_mib": 15348, "fb_total_mib": 16376,
            "pcie_link_gen": 1, "pcie_link_gen_max": 4,  # idle: the link trains down
            "pcie_link_width": 16, "pcie_link_width_max": 16,
            "clock_event_reasons": 1,  # 0x...01: GPU idle
        },
    ),
    "rtx2080s_win_r610_query_gpu_all_idle.csv": (
        "2026-06-24T10:17:41.589",
        GpuId("node7", 0, MASKED, "00000000:0C:00.0", "NVIDIA GeForce RTX 2080 SUPER"),
        "610.62",
        {
            "gpu_temp_c": 40, "power_w": 39.25, "power_limit_w": 250.0,
            "sm_clock_mhz": 300, "mem_clock_mhz": 405,
            "gpu_util_pct": 0, "mem_copy_util_pct": 10,
            "fb_used_mib": 797, "fb_free_mib": 7191, "fb_total_mib": 8192,
            "pcie_link_gen": 3, "pcie_link_gen_max": 3,
            "pcie_link_width": 16, "pcie_link_width_max": 16,
            "clock_event_reasons": 1,
        },
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_catalogue_field_of_a_real_capture_reads_as_captured(name: str) -> None:
    when, gpu, driver, values = EXPECTED[name]
    batch = read(name)
    assert batch.problems == ()
    assert batch.rejected == ()
    (sample,) = batch.samples
    assert sample.gpu == gpu
    assert sample.ts == pytest.approx(utc(when))
    assert dict(sample.values) == pytest.approx(values)
    assert batch.nodes == (NodeInfo(sample.ts, "node7", driver_version=driver),)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fields_the_capture_has_as_na_are_absent(name: str) -> None:
    (sample,) = read(name).samples
    absent = SMI_FIELDS - set(sample.values)
    assert absent == SMI_FIELDS - set(EXPECTED[name][3])
    # every catalogue field the consumer boards do not have reads [N/A] or N/A in the file
    assert "retired_pages_sbe" in absent and "retired_pages_pending" in absent


def test_mig_masks_utilisation_and_remapped_rows_while_temperatures_stay() -> None:
    (sample,) = read("h100_mig_r590_query_gpu_all_load.csv").samples
    for name in (
        "gpu_util_pct",
        "mem_copy_util_pct",
        "remapped_rows_correctable",
        "remapped_rows_uncorrectable",
        "remapped_rows_pending",
        "remapped_rows_failure",
    ):
        assert name not in sample.values, name
    assert sample.values["gpu_temp_c"] == 53
    assert sample.values["mem_temp_c"] == 59


def test_consumer_boards_have_no_ecc_remapping_or_memory_temperature() -> None:
    for name in (
        "rtx4080s_r595_query_gpu_all_idle.csv",
        "rtx2080s_win_r610_query_gpu_all_idle.csv",
    ):
        (sample,) = read(name).samples
        assert not {n for n in sample.values if n.startswith(("ecc_", "remapped_", "retired_"))}
        assert "mem_temp_c" not in sample.values  # "N/A" without brackets


# ---- nvidia-smi -q ----------------------------------------------------------------------------

from gpuwarden.collectors.smi_text import read_query_text  # noqa: E402

ECC0 = {
    "ecc_sbe_volatile_total": 0, "ecc_dbe_volatile_total": 0,
    "ecc_sbe_aggregate_total": 0, "ecc_dbe_aggregate_total": 0,
}  # fmt: skip
REMAP0 = {
    "remapped_rows_correctable": 0, "remapped_rows_uncorrectable": 0,
    "remapped_rows_pending": 0, "remapped_rows_failure": 0,  # Pending / Failure: "No"
}  # fmt: skip

#: file -> (Timestamp, identity, driver, CUDA, every catalogue field read); the rest absent.
EXPECTED_Q: dict[str, tuple[str, GpuId, str, str, dict[str, float]]] = {
    "h100_sxm_r590_q_load.txt": (
        "2026-07-14T08:12:53",
        GpuId("node7", 0, MASKED, "00000000:00:09.0", "NVIDIA H100 80GB HBM3"),
        "590.48.01", "13.1",
        {
            "gpu_temp_c": 59, "mem_temp_c": 55, "power_w": 629.45, "power_limit_w": 700.0,
            "sm_clock_mhz": 1980, "mem_clock_mhz": 2619,
            "gpu_util_pct": 100, "mem_copy_util_pct": 11,
            "fb_total_mib": 81559, "fb_used_mib": 19818, "fb_free_mib": 61263,
            **ECC0, **REMAP0,  # Retired Pages: N/A (H100 remaps rows instead)
            "pcie_link_gen": 5, "pcie_link_gen_max": 5,
            "pcie_link_width": 16, "pcie_link_width_max": 16,
            "pcie_replay_total": 9,  # PCI / Replays Since Reset
            "clock_event_reasons": 0,  # Clocks Event Reasons: every line Not Active
            "power_violation_us": 0,  # Clocks Event Reasons Counters / SW Power Capping
        },
    ),
    "h100_mig_r590_q_load.txt": (
        "2026-07-14T09:00:44",
        GpuId("node7", 0, MASKED, "00000000:00:09.0", "NVIDIA H100 80GB HBM3"),
        "590.48.01", "13.1",
        {
            "gpu_temp_c": 53, "mem_temp_c": 58, "power_w": 432.21, "power_limit_w": 700.0,
            "sm_clock_mhz": 1980, "mem_clock_mhz": 2619,
            "fb_total_mib": 81559, "fb_used_mib": 11125, "fb_free_mib": 69956,
            **ECC0,  # Utilization N/A and "Remapped Rows : N/A" under MIG
            "pcie_link_gen": 5, "pcie_link_gen_max": 5,
            "pcie_link_width": 16, "pcie_link_width_max": 16,
            "pcie_replay_total": 9,
            "clock_event_reasons": 0,
            "power_violation_us": 0,
        },
    ),
    "l40s_r595_q_load.txt": (
        "2026-07-03T08:33:53",
        GpuId("node7", 0, MASKED, "00000000:01:00.0", "NVIDIA L40S"),
        "595.80", "13.2",
        {
            "gpu_temp_c": 54, "power_w": 110.24, "power_limit_w": 350.0,  # GDDR6: no mem temp
            "sm_clock_mhz": 2520, "mem_clock_mhz": 9001,
            "gpu_util_pct": 9, "mem_copy_util_pct": 2,
            "fb_total_mib": 46068, "fb_used_mib": 1235, "fb_free_mib": 44225,
            **ECC0, **REMAP0,
            "pcie_link_gen": 4, "pcie_link_gen_max": 4,
            "pcie_link_width": 16, "pcie_link_width_max": 16,
            "pcie_replay_total": 0,
            "clock_event_reasons": 0,
            "power_violation_us": 204_642_816,  # held at its power cap for 205 s
        },
    ),
    "rtx4080s_r595_q_idle.txt": (
        "2026-06-26T11:59:44",
        GpuId("node7", 0, MASKED, "00000000:01:00.0", "NVIDIA GeForce RTX 4080 SUPER"),
        "595.71.05", "13.2",
        {
            "gpu_temp_c": 43, "power_w": 25.92, "power_limit_w": 320.0,
            "sm_clock_mhz": 210, "mem_clock_mhz": 405,
            "gpu_util_pct": 0, "mem_copy_util_pct": 23,
            "fb_total_mib": 16376, "fb_used_mib": 596, "fb_free_mib": 15348,
            "pcie_link_gen": 1, "pcie_link_gen_max": 4,  # ECC, remapping: N/A
            "pcie_link_width": 16, "pcie_link_width_max": 16,
            "pcie_replay_total": 0,
            "clock_event_reasons": 1,  # Idle: Active
            "power_violation_us": 0,
        },
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXPECTED_Q))
def test_every_field_of_a_real_q_capture_reads_as_captured(name: str) -> None:
    when, gpu, driver, cuda, values = EXPECTED_Q[name]
    batch = read_query_text((REAL / name).read_text(), hostname="node7")
    assert batch.problems == () and batch.rejected == ()
    (sample,) = batch.samples  # a MIG Device block's own memory and ECC are not the GPU's
    assert sample.gpu == gpu
    assert sample.ts == utc(when)
    assert dict(sample.values) == pytest.approx(values)
    assert batch.nodes == (NodeInfo(sample.ts, "node7", driver, cuda),)


def test_q_and_query_gpu_of_the_same_moment_agree_where_both_read() -> None:
    (q,) = read_query_text((REAL / "rtx4080s_r595_q_idle.txt").read_text(), hostname="n").samples
    (c,) = read("rtx4080s_r595_query_gpu_all_idle.csv").samples
    same = set(q.values) & set(c.values) - {"power_w"}  # -q's average vs a later instant
    assert same and {k: q.values[k] for k in same} == {k: c.values[k] for k in same}
    # -q's Clocks Event Reasons lines give the mask the query's column has (0x1: idle)
    assert "clock_event_reasons" in same and q.values["clock_event_reasons"] == 1
