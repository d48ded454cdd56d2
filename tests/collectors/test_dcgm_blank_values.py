"""dcgm+http://: DCGM blank sentinels, a GDDR board's memory temperature and impossible readings
become missing fields, counted in ``Batch.rejected``; the GPU's other fields are kept."""

from __future__ import annotations

import httpx
import pytest

from gpuwarden.collectors.dcgm import DcgmCollector
from gpuwarden.telemetry import Batch

_T4 = 'gpu="0",UUID="GPU-t4",pci_bus_id="00000000:37:00.0",device="nvidia0",modelName="Tesla T4",Hostname="n1"'  # noqa: E501
_H100 = 'gpu="1",UUID="GPU-h1",pci_bus_id="00000000:2B:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"'  # noqa: E501
BODY = f"""\
DCGM_FI_DEV_GPU_TEMP{{{_T4}}} 74
DCGM_FI_DEV_MEMORY_TEMP{{{_T4}}} 0
DCGM_FI_DEV_POWER_USAGE{{{_T4}}} 68.244000
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{_T4}}} 2147483632
DCGM_FI_DEV_GPU_UTIL{{{_T4}}} 91
DCGM_FI_DEV_GPU_TEMP{{{_H100}}} 255
DCGM_FI_DEV_MEMORY_TEMP{{{_H100}}} 9223372036854775794
DCGM_FI_DEV_POWER_USAGE{{{_H100}}} 140737488355330
DCGM_FI_DEV_ENFORCED_POWER_LIMIT{{{_H100}}} 700.000000
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{_H100}}} 9.223372036854776e+18
DCGM_FI_DEV_PCIE_LINK_WIDTH{{{_H100}}} 16
DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{_H100}}} -4
"""


def collect(body: str) -> Batch:
    """One ``collect()`` of a dcgm+http:// collector whose endpoint answers ``body``."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=body))
    with httpx.Client(transport=transport) as client:
        collector = DcgmCollector(["http://n1:9400/metrics"], client=client, clock=lambda: 9.0)
        try:
            return collector.collect()
        finally:
            collector.close()


def test_impossible_readings_are_missing_and_counted_the_rest_kept() -> None:
    batch = collect(BODY)
    assert batch.problems == () and batch.screened
    t4, h100 = (dict(s.values) for s in batch.samples)
    # the T4 has no memory sensor: 0 is missing; its int64 energy of 2147483632 mJ is kept
    assert t4 == {
        "gpu_temp_c": 74,
        "power_w": pytest.approx(68.244),
        "energy_mj": 2147483632,
        "gpu_util_pct": 91,
    }
    assert h100 == {"power_limit_w": 700, "pcie_link_width": 16}
    assert [(r.gpu.index, r.field, r.reason, r.value, r.ts) for r in batch.rejected] == [
        (0, "mem_temp_c", "no_sensor", 0.0, 9.0),
        (1, "gpu_temp_c", "out_of_range", 255.0, 9.0),
        (1, "mem_temp_c", "sentinel", 2.0**63, 9.0),
        (1, "power_w", "sentinel", 140737488355330.0, 9.0),
        (1, "energy_mj", "sentinel", 2.0**63, 9.0),
        (1, "pcie_replay_total", "out_of_range", -4.0, 9.0),
    ]


def test_a_gpu_with_only_impossible_readings_still_has_its_sample() -> None:
    batch = collect(f"DCGM_FI_DEV_MEMORY_TEMP{{{_T4}}} 0\n")
    (sample,) = batch.samples
    assert sample.gpu.model == "Tesla T4" and dict(sample.values) == {}
    assert [r.reason for r in batch.rejected] == ["no_sensor"]
