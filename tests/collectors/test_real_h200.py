"""One real NVIDIA H200 (a cloud VM, driver 580.159.04), read on 2026-12-04 by
tests/collectors/nvml_device_check.py: what nvml:// read there (h200_vm_1gpu_read.json), the
node as record_nvml.py recorded it right after (h200_vm_1gpu_{idle,load}.json), and nvidia-smi's
answers to smi:// and to ``nvidia-smi -q`` (tests/data/smi/real/h200_vm_r580_*).

The fake replaying the recording must read the fields the real GPU gave, no more and no fewer,
and smi:// and ``nvidia-smi -q`` must agree with nvml:// on the same GPU at the same moment.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from fake_nvml import DATA, FakeNvml, load_fixture

from gpuwarden.collectors.nvml import NvmlCollector
from gpuwarden.collectors.smi import SmiCollector, SmiOutput
from gpuwarden.collectors.smi_text import read_query_text
from gpuwarden.telemetry import Batch

SMI = Path(__file__).resolve().parents[1] / "data" / "smi" / "real"
READ: dict[str, dict[str, float]] = json.loads((DATA / "h200_vm_1gpu_read.json").read_text())

#: Fields that cannot move between reads a second apart: identity of the board, its memory size,
#: its error counters and link. Equal in every source.
STEADY = (
    "fb_total_mib", "power_limit_w", "pcie_link_gen", "pcie_link_gen_max", "pcie_link_width",
    "pcie_link_width_max", "ecc_sbe_volatile_total", "ecc_dbe_volatile_total",
    "ecc_sbe_aggregate_total", "ecc_dbe_aggregate_total", "remapped_rows_correctable",
    "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure",
)  # fmt: skip
#: How far an idle GPU's gauges may move in the second between two sources' reads.
DRIFT = {"gpu_temp_c": 1.0, "mem_temp_c": 1.0, "power_w": 1.0, "sm_clock_mhz": 0.0,
         "mem_clock_mhz": 0.0, "gpu_util_pct": 0.0, "fb_free_mib": 1.0, "fb_used_mib": 1.0}  # fmt: skip
#: What ``nvidia-smi --query-gpu`` has no column for (nvml:// reads them on this GPU).
NVML_ONLY = {"energy_mj", "gr_engine_active", "tensor_active", "pcie_replay_total",
             "power_violation_us", "thermal_violation_us"}  # fmt: skip


def replay(phase: str) -> dict[str, float]:
    fake = FakeNvml(f"h200_vm_1gpu_{phase}.json")
    collector = NvmlCollector(nvml=fake, hostname="vm", clock=iter([0.0, 2.0]).__next__)
    collector.collect()  # GPM ratios come from the second read
    fake.advance()
    batch = collector.collect()
    assert not batch.problems
    (sample,) = batch.samples
    return dict(sample.values)


def agree(got: dict[str, float], want: dict[str, float], drift: dict[str, float]) -> dict:
    """The fields both read that differ by more than ``drift`` allows (STEADY: not at all)."""
    return {
        name: (got[name], want[name])
        for name in sorted(set(got) & set(want))
        if name in (*STEADY, *drift) and abs(got[name] - want[name]) > drift.get(name, 0.0)
    }


@pytest.mark.parametrize("phase", ["idle", "load"])
def test_the_recording_replays_the_fields_the_real_gpu_gave(phase):
    got, want = replay(phase), READ[phase]
    assert set(got) == set(want)
    assert agree(got, want, {}) == {}


def test_nvlink_and_retired_pages_the_vm_does_not_offer_stay_absent():
    fixture = load_fixture("h200_vm_1gpu_idle.json")
    (dev,) = fixture["devices"]
    assert dev["nvlink"] == dev["retired_pages"] == "NOT_SUPPORTED"
    got = replay("idle")
    assert not {name for name in got if name.startswith(("nvlink_", "retired_pages"))}


def test_under_load_the_real_gpu_read_busy_power_capped_and_gpm_active():
    idle, load = READ["idle"], READ["load"]
    assert load["gpu_util_pct"] >= 90 and idle["gpu_util_pct"] == 0
    assert load["power_w"] > 0.95 * load["power_limit_w"] > 8 * idle["power_w"]
    assert int(load["clock_event_reasons"]) & 0x4  # SW power cap, as nvidia-smi -q shows it
    assert load["gr_engine_active"] > 0.9 and load["tensor_active"] > 0.5
    assert idle["gr_engine_active"] == idle["tensor_active"] == 0.0
    assert load["energy_mj"] > idle["energy_mj"]
    replayed = replay("load")
    fixture = load_fixture("h200_vm_1gpu_load.json")["devices"][0]
    assert replayed["gr_engine_active"] == pytest.approx(fixture["gpm"]["graphics_util_pct"] / 100)
    assert replayed["tensor_active"] == pytest.approx(fixture["gpm"]["any_tensor_util_pct"] / 100)


def test_nvidia_smi_q_of_the_same_gpu_agrees_with_nvml():
    batch = read_query_text((SMI / "h200_vm_r580_q_idle.txt").read_text(), hostname="vm")
    assert not batch.problems
    (sample,) = batch.samples
    assert sample.gpu.uuid == "GPU-c09b4f48-3213-a47a-d885-f667d41479fa"
    assert sample.gpu.model == "NVIDIA H200"
    got = dict(sample.values)
    assert len(set(got) & set(READ["idle"])) >= 20
    assert agree(got, READ["idle"], DRIFT) == {}


def smi_runner(argv: Sequence[str], timeout_s: float) -> SmiOutput:
    if any(a.startswith("--query-gpu=") for a in argv):
        return SmiOutput(0, (SMI / "h200_vm_r580_smi_collector_idle.csv").read_text(), "")
    return SmiOutput(0, (SMI / "h200_vm_r580_q_idle.txt").read_text(), "")  # -q -d COMPUTE


def test_smi_collector_on_the_same_gpu_reads_what_nvml_read_but_its_missing_columns():
    # no -q -x capture of this GPU: the query alone (test_smi.py adds -q -x's fields)
    batch: Batch = SmiCollector(run=smi_runner, hostname="vm", xml_every=0).collect()
    assert not batch.problems
    (sample,) = batch.samples
    got = dict(sample.values)
    assert set(got) == set(READ["idle"]) - NVML_ONLY
    assert agree(got, READ["idle"], DRIFT) == {}
