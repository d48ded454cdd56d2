"""Real dcgm-exporter scrapes (tests/data/dcgm/real/, recorded with their sources in SOURCES.md
and SENTINELS.md there), read value by value through dcgm+http://: a Tesla T4's memory
temperature of 0 and NVIDIA's README sentinel 9223372036854775794 are missing and counted; every
other reading is kept as scraped."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_dcgm_blank_values import collect as collect_body

from gpuwarden.telemetry import Batch

REAL = Path(__file__).resolve().parents[1] / "data" / "dcgm" / "real"


def collect(name: str) -> Batch:
    return collect_body((REAL / name).read_text())


def test_t4_memory_temperature_0_is_missing_and_every_other_reading_kept() -> None:
    batch = collect("t4_gpuop_driver590_memtemp0.txt")
    assert batch.problems == ()
    (sample,) = batch.samples
    assert sample.gpu.model == "Tesla T4"
    assert sample.gpu.uuid == "GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a"
    assert dict(sample.values) == {
        "sm_clock_mhz": 660,
        "mem_clock_mhz": 5000,
        "gpu_temp_c": 74,
        "power_w": 68.244,
        "energy_mj": 15152422938,
        "pcie_replay_total": 0,
        "gpu_util_pct": 91,
        "mem_copy_util_pct": 73,
        "fb_free_mib": 9791,
        "fb_used_mib": 5120,
        "gr_engine_active": 0.156205,
        "tensor_active": 0.005822,
        "enc_util_pct": 0,  # dcgm-exporter 4.x default fields (lines 10-20 of the file)
        "dec_util_pct": 0,
        "fb_reserved_mib": 447,
        "dram_active": 0.092781,
        "pcie_tx_bytes_per_s": 4791810,
        "pcie_rx_bytes_per_s": 6935930,
    }
    assert [(r.gpu.uuid, r.field, r.reason, r.value) for r in batch.rejected] == [
        (sample.gpu.uuid, "mem_temp_c", "no_sensor", 0.0)
    ]


def test_another_t4_keeps_its_gpu_temperature() -> None:
    batch = collect("t4_rafay_driver580_temps.txt")
    (sample,) = batch.samples
    assert dict(sample.values) == {"gpu_temp_c": 24}
    assert [(r.field, r.reason) for r in batch.rejected] == [("mem_temp_c", "no_sensor")]


@pytest.mark.parametrize(
    "name", ["readme_quickstart_sentinel_int64.txt", "readme_k8s_empty_pod_labels_sentinel.txt"]
)
def test_readme_int64_not_supported_memory_temperature_is_missing(name: str) -> None:
    batch = collect(name)
    (sample,) = batch.samples
    assert sample.gpu.uuid == "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52" and sample.gpu.model == ""
    assert dict(sample.values) == {"sm_clock_mhz": 139, "mem_clock_mhz": 405}
    (rejected,) = batch.rejected
    # DCGM_INT64_NOT_SUPPORTED (9223372036854775794) parses to 2**63 as a float64
    assert (rejected.field, rejected.reason, rejected.value) == (
        "mem_temp_c",
        "sentinel",
        9223372036854775808.0,
    )


@pytest.mark.parametrize(
    "name, model",
    [
        ("l40s_driver595_full.txt", "NVIDIA L40S"),
        ("l4_kops_driver580_full.txt", "NVIDIA L4"),
        ("grid_a100_10c_vgpu_driver580.txt", "GRID A100-10C"),
    ],
)
def test_gddr_and_vgpu_boards_report_no_memory_temperature(name: str, model: str) -> None:
    batch = collect(name)
    (sample,) = batch.samples
    assert sample.gpu.model == model
    assert "mem_temp_c" not in sample.values and len(sample.values) >= 6
    assert [(r.field, r.reason, r.value) for r in batch.rejected] == [
        ("mem_temp_c", "no_sensor", 0.0)
    ]
