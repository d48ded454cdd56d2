"""record_nvml.py, pointed at the fake replaying each fixture, must write a fixture that reads the
same through nvml:// as the one it recorded: the recorder loses nothing the collector reads, so a
node a user records (docs/collectors.md) replays as it was."""

from __future__ import annotations

import pytest
import record_nvml
from fake_nvml import DATA, FakeNvml

from gpuwarden.collectors.nvml import NvmlCollector
from gpuwarden.telemetry import Batch

FIXTURES = sorted(p.name for p in DATA.glob("*.json") if not p.name.endswith("_read.json"))


def reads(fixture: str | dict, polls: int = 3) -> list[Batch]:
    fake = FakeNvml(fixture)
    clock = iter(float(n) for n in range(polls))
    collector = NvmlCollector(nvml=fake, hostname="node", clock=clock.__next__)
    batches = []
    for _ in range(polls):
        batches.append(collector.collect())
        fake.advance()
    collector.close()
    return batches


def recorded(fixture: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(record_nvml, "NV", FakeNvml(fixture))
    return record_nvml.record("round trip", gpm_interval_s=0.0)


def test_every_fixture_is_covered():
    assert {"h100_hgx_8gpu.json", "v100_r470_2gpu.json", "h200_vm_1gpu_load.json"} <= set(FIXTURES)


@pytest.mark.parametrize("fixture", FIXTURES)
def test_a_recorded_node_reads_as_the_node_it_recorded(fixture, monkeypatch):
    again = recorded(fixture, monkeypatch)
    want, got = reads(fixture), reads(again)
    # the first poll of each: later polls differ only where the original has per_step or faults
    assert [(s.gpu, dict(s.values)) for s in got[0].samples] == [
        (s.gpu, dict(s.values)) for s in want[0].samples
    ]
    assert got[0].problems == want[0].problems


def test_failures_are_recorded_by_their_nvml_name(monkeypatch):
    again = recorded("v100_r470_2gpu.json", monkeypatch)
    dev = again["devices"][0]
    assert dev["missing_functions"] == [
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetMemoryInfo_v2",
    ]
    assert "gpm" not in dev  # Volta has no GPM: the fake then says GPM is not supported
    h200 = recorded("h200_vm_1gpu_idle.json", monkeypatch)["devices"][0]
    assert h200["nvlink"] == "NOT_SUPPORTED" and h200["retired_pages"] == "NOT_SUPPORTED"


def test_energy_growth_between_polls_is_recorded_as_per_step(monkeypatch):
    fake = FakeNvml("h100_hgx_8gpu.json")
    monkeypatch.setattr(record_nvml, "NV", fake)
    monkeypatch.setattr(record_nvml.time, "sleep", lambda s: fake.advance() if s else None)
    again = record_nvml.record("per step", gpm_interval_s=0.0, per_step_s=1.0)
    original = fake.fixture["devices"][0]["per_step"]["total_energy_mj"]
    assert again["devices"][0]["per_step"] == {"total_energy_mj": original}
