"""NvmlCollector against recorded nodes replayed by a fake pynvml module, and the real pynvml."""

from __future__ import annotations

import ctypes
import inspect
import math
import re
from pathlib import Path

import pynvml
import pytest
from fake_nvml import FakeNvml, load_fixture

from gpuwarden.collectors import Collector, open_collector
from gpuwarden.collectors.libnvml import NO_LIBRARY
from gpuwarden.collectors.nvml import NOT_READ, NvmlCollector
from gpuwarden.errors import CollectorError, CollectorUnavailable, ConfigError
from gpuwarden.telemetry import FIELD_NAMES, FIELDS, Batch, samples_to_frame

#: Hopper and Ampere remap rows instead of retiring pages: NVML answers NotSupported for those.
RETIRED = {"retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"}
H100_FIELDS = set(FIELD_NAMES) - RETIRED - NOT_READ

SOURCES = [
    Path(__file__).resolve().parents[2] / "gpuwarden" / "collectors" / name
    for name in ("nvml.py", "libnvml.py")
]


def open_node(fixture: str | dict, ts: list[float] | None = None) -> tuple[FakeNvml, NvmlCollector]:
    fake = FakeNvml(fixture)
    clock = iter(ts or [1_718_092_800.0 + 10 * n for n in range(100)])
    return fake, NvmlCollector(nvml=fake, hostname="node-a", clock=lambda: next(clock))


def polls(fake: FakeNvml, collector: NvmlCollector, n: int) -> list[Batch]:
    batches = []
    for _ in range(n):
        batches.append(collector.collect())
        fake.advance()
    return batches


def by_index(batch: Batch) -> dict[int, dict[str, float]]:
    return {s.gpu.index: dict(s.values) for s in batch.samples}


# --- the fake is pynvml-shaped --------------------------------------------------------------


def test_every_nvml_name_the_collector_uses_exists_in_pynvml_and_the_fake():
    names = set()
    for path in SOURCES:
        names |= set(re.findall(r"\"(nvml[A-Z]\w+)\"", path.read_text()))
    assert "nvmlDeviceGetRemappedRows" in names  # the pattern does find them
    fake = FakeNvml("a100_vm_1gpu.json")
    for name in sorted(names):
        assert hasattr(pynvml, name), f"pynvml has no {name}"
        assert hasattr(fake, name), f"the fake has no {name}"


def test_fake_functions_have_pynvml_signatures():
    fake = FakeNvml("a100_vm_1gpu.json")
    functions = [n for n in dir(FakeNvml) if n.startswith("nvml") and callable(getattr(fake, n))]
    assert len(functions) > 25
    for name in functions:
        ours = list(inspect.signature(getattr(fake, name)).parameters)
        theirs = list(inspect.signature(getattr(pynvml, name)).parameters)
        assert ours == theirs, name


def test_fake_raises_the_real_pynvml_error_classes():
    fake, collector = open_node("a100_vm_1gpu.json")
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetNvLinkState(handle, 0)
    with pytest.raises(pynvml.NVMLError_Timeout):
        fake.nvmlEventSetWait(fake.nvmlEventSetCreate(), 0)
    collector.close()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


# --- reading -------------------------------------------------------------------------------


def test_h100_node_reads_every_catalogue_field_in_catalogue_units():
    assert all(f.nvml for f in FIELDS)  # every field has an NVML source
    fake, collector = open_node("h100_hgx_8gpu.json")
    batch = collector.collect()
    assert isinstance(collector, Collector)
    assert batch.problems == () and batch.events == ()
    assert [s.gpu.index for s in batch.samples] == list(range(8))
    for sample in batch.samples:
        assert set(sample.values) == H100_FIELDS, sample.gpu
        assert sample.gpu.model == "NVIDIA H100 80GB HBM3"
        assert sample.gpu.hostname == "node-a"
        assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", sample.gpu.uuid)
        assert sample.ts == 1_718_092_800.0
    fixture = load_fixture("h100_hgx_8gpu.json")["devices"]
    assert [s.gpu.uuid for s in batch.samples] == [d["uuid"] for d in fixture]
    assert batch.samples[0].gpu.pci_bus_id == "00000000:18:00.0"
    gpu = by_index(batch)
    assert gpu[0]["power_w"] == pytest.approx(688.412)  # from 688412 mW
    assert gpu[0]["power_limit_w"] == 700.0
    assert gpu[0]["mem_temp_c"] == 70 and gpu[0]["gpu_temp_c"] == 61
    assert gpu[0]["fb_total_mib"] == 81559 and gpu[0]["fb_used_mib"] == 74213
    assert gpu[0]["fb_free_mib"] == 81559 - 547 - 74213  # v2: reserved is neither used nor free
    assert gpu[0]["power_violation_us"] == pytest.approx(3_106_457_000)  # from ns
    assert gpu[2]["nvlink_crc_flit_errors_total"] == 3 and gpu[2]["nvlink_replay_errors_total"] == 1
    assert gpu[0]["nvlink_crc_flit_errors_total"] == 0  # NVLink present, no errors: a real 0
    assert gpu[3]["pcie_replay_total"] == 17
    assert gpu[5]["ecc_sbe_volatile_total"] == 2 and gpu[5]["remapped_rows_correctable"] == 1
    assert gpu[6]["clock_event_reasons"] == 4
    assert gpu[0]["pcie_link_gen"] == 5 and gpu[0]["pcie_link_width_max"] == 16


def test_gpm_profiling_ratios_compare_two_samples_and_free_them():
    fake, collector = open_node("h100_hgx_8gpu.json")
    first = by_index(collector.collect())
    assert first[0]["gr_engine_active"] == pytest.approx(0.978)  # from 97.8 %
    assert first[6]["tensor_active"] == pytest.approx(0.546)
    fake.devices[0]["gpm"] = {"graphics_util_pct": 12.5, "any_tensor_util_pct": "NOT_SUPPORTED"}
    fake.advance()
    second = by_index(collector.collect())
    assert second[0]["gr_engine_active"] == pytest.approx(0.125)
    assert "tensor_active" not in second[0]  # the metric is not offered: absent, not 0
    assert fake.gpm_samples_alive == 8  # one kept per GPU for the next comparison
    collector.close()
    assert fake.gpm_samples_alive == 0


def test_counters_move_between_polls_and_each_batch_has_its_own_time():
    fake, collector = open_node("h100_hgx_8gpu.json", ts=[100.0, 110.0])
    first, second = polls(fake, collector, 2)
    assert (first.ts, second.ts) == (100.0, 110.0)
    assert by_index(second)[0]["energy_mj"] - by_index(first)[0]["energy_mj"] == 6_884_120


def test_unsupported_fields_are_absent_not_zero():
    _, collector = open_node("a100_vm_1gpu.json")
    batch = collector.collect()
    assert batch.problems == ()  # NotSupported is an answer, not a problem
    assert batch.rejected == ()  # and no reading: missing, not rejected
    (sample,) = batch.samples
    assert (
        sample.gpu.model == "NVIDIA A100-SXM4-80GB" and sample.gpu.pci_bus_id == "00000000:00:04.0"
    )
    absent = {"mem_temp_c"} | RETIRED
    absent |= {f for f in FIELD_NAMES if f.startswith("nvlink_")} | NOT_READ
    absent |= {"gr_engine_active", "tensor_active"}  # no GPM before Hopper
    assert set(FIELD_NAMES) - set(sample.values) == absent
    assert sample.values["gpu_temp_c"] == 31 and sample.values["clock_event_reasons"] == 1
    frame = samples_to_frame(batch.samples)
    assert math.isnan(frame.loc[0, "mem_temp_c"]) and math.isnan(
        frame.loc[0, "nvlink_replay_errors_total"]
    )
    assert frame.loc[0, "remapped_rows_pending"] == 0


def test_old_driver_falls_back_to_the_older_function_names():
    fake, collector = open_node("v100_r470_2gpu.json")
    batch = collector.collect()
    assert batch.problems == ()
    gpu = by_index(batch)
    # nvmlDeviceGetCurrentClocksEventReasons is missing on r470: the throttle-reasons name answers
    assert gpu[0]["clock_event_reasons"] == 0
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in fake.calls
    # no nvmlDeviceGetMemoryInfo_v2 either: v1 counts reserved memory as used
    assert gpu[0]["fb_used_mib"] == 30912 and gpu[0]["fb_total_mib"] == 32510
    # Volta retires pages and has no row remapper
    assert (
        gpu[1]["retired_pages_sbe"],
        gpu[1]["retired_pages_dbe"],
        gpu[1]["retired_pages_pending"],
    ) == (2, 1, 1)
    assert (gpu[0]["retired_pages_sbe"], gpu[0]["retired_pages_pending"]) == (0, 0)
    assert not any(f.startswith("remapped_rows") for f in gpu[0])
    # 6 NVLinks: summed over the links that answer, links 6..35 skipped
    assert (
        gpu[0]["nvlink_crc_flit_errors_total"] == 7 and gpu[0]["nvlink_recovery_errors_total"] == 1
    )


def test_other_nvml_errors_leave_the_field_absent_and_name_the_call():
    fixture = load_fixture("h100_hgx_8gpu.json")
    fixture["devices"][4]["pcie_replay_counter"] = "UNKNOWN"
    fixture["devices"][4]["ecc"]["corrected_aggregate"] = "CORRUPTED_INFOROM"
    _, collector = open_node(fixture)
    batch = collector.collect()
    values = by_index(batch)[4]
    assert "pcie_replay_total" not in values and "ecc_sbe_aggregate_total" not in values
    assert values["ecc_sbe_volatile_total"] == 0 and len(values) == len(H100_FIELDS) - 2
    uuid = fixture["devices"][4]["uuid"]
    assert batch.problems == (
        f"gpu 4 ({uuid}): nvmlDeviceGetTotalEccErrors: Corrupted infoROM",
        f"gpu 4 ({uuid}): nvmlDeviceGetPcieReplayCounter: Unknown Error",
    )
    assert len(batch.samples) == 8


# --- lost GPUs and Xids --------------------------------------------------------------------


def test_lost_and_reset_gpus_become_events_once_and_the_others_keep_reading():
    fake, collector = open_node("h100_lost_4gpu.json")
    b0, b1, b2, b3, b4 = polls(fake, collector, 5)
    assert len(b0.samples) == 4 and b0.events == ()

    # step 1: GPU 3 needs a reset after an uncontained ECC error (Xid 95)
    assert sorted(by_index(b1)) == [0, 1, 2]
    assert [(e.gpu.index, e.kind, e.code) for e in b1.events] == [
        (3, "gpu_requires_reset", None),
        (3, "xid", 95),
    ]
    assert b1.events[0].gpu.uuid == load_fixture("h100_lost_4gpu.json")["devices"][3]["uuid"]
    assert "GPU requires restart" in b1.events[0].detail

    # step 2: GPU 1 falls off the bus after 5 calls: the values read before that are kept
    assert [(e.gpu.index, e.kind, e.code) for e in b2.events] == [
        (1, "gpu_lost", None),
        (1, "xid", 79),
    ]
    partial = by_index(b2)[1]
    assert 0 < len(partial) < len(FIELD_NAMES) and "gpu_temp_c" in partial
    assert sorted(by_index(b2)) == [0, 1, 2]  # GPU 3 still needs its reset: no sample, no new event

    # step 3: an admin reset GPU 3; GPU 1 stays lost, said once, named in problems each poll
    assert [(e.gpu.index, e.kind) for e in b3.events] == [(3, "gpu_recovered")]
    assert sorted(by_index(b3)) == [0, 2, 3] and set(by_index(b3)[3]) == H100_FIELDS
    assert b4.events == ()
    for batch in (b3, b4):
        assert len(batch.problems) == 1 and batch.problems[0].startswith("gpu 1 (GPU-")
        assert "GPU is lost" in batch.problems[0]


def test_gpu_lost_before_the_collector_opened_it():
    fixture = load_fixture("h100_lost_4gpu.json")
    fixture["faults"] = [{"device": 2, "error": "GPU_IS_LOST", "from_step": 0, "until_step": 1}]
    fixture["xid_events"] = []
    fake, collector = open_node(fixture)
    first, second = polls(fake, collector, 2)
    (lost,) = first.events
    assert (lost.kind, lost.gpu.index, lost.gpu.uuid) == ("gpu_lost", 2, "")  # identity unknown yet
    assert sorted(by_index(first)) == [0, 1, 3]
    (back,) = second.events
    assert (back.kind, back.gpu.uuid) == ("gpu_recovered", fixture["devices"][2]["uuid"])
    assert sorted(by_index(second)) == [0, 1, 2, 3]


def test_xids_are_polled_without_blocking():
    fake, collector = open_node("h100_hgx_8gpu.json")
    batches = polls(fake, collector, 4)
    xids = [(e.gpu.index, e.code) for b in batches for e in b.events if e.kind == "xid"]
    assert xids == [(5, 94), (2, 74)]
    assert batches[1].events[0].gpu.uuid == load_fixture("h100_hgx_8gpu.json")["devices"][5]["uuid"]
    assert fake.wait_timeouts and set(fake.wait_timeouts) == {0}


def test_gpu_without_xid_events_is_named_once():
    fixture = load_fixture("a100_vm_1gpu.json")
    fixture["devices"][0]["xid_events_supported"] = False
    fake, collector = open_node(fixture)
    first, second = polls(fake, collector, 2)
    assert first.problems == (
        f"gpu 0 ({fixture['devices'][0]['uuid']}): Xid events not available from this GPU",
    )
    assert second.problems == () and len(second.samples) == 1


# --- opening and closing -------------------------------------------------------------------


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_driver_present(), reason="this host has an NVIDIA driver")
def test_no_nvml_library_is_one_clear_line_with_the_real_pynvml():
    with pytest.raises(CollectorUnavailable) as info:
        open_collector("nvml://")
    assert str(info.value) == NO_LIBRARY
    assert "libnvidia-ml.so.1" in NO_LIBRARY and "smi://" in NO_LIBRARY and "\n" not in NO_LIBRARY
    assert isinstance(info.value.__cause__, pynvml.NVMLError_LibraryNotFound)


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "reboot"),
        (pynvml.NVML_ERROR_UNKNOWN, "NVML could not start: Unknown Error"),
    ],
)
def test_nvml_that_cannot_start_says_why(code, words):
    with pytest.raises(CollectorUnavailable, match=words):
        NvmlCollector(nvml=FakeNvml("a100_vm_1gpu.json", init_error=code))


def test_close_shuts_nvml_down_once():
    fake, collector = open_node("a100_vm_1gpu.json")
    with collector:
        collector.collect()
    collector.close()
    assert fake.shutdowns == 1 and not fake.initialized
    with pytest.raises(CollectorError, match="closed"):
        collector.collect()


@pytest.mark.parametrize(
    ("url", "words"),
    [("nvml://node7", "takes no host"), ("nvml://?interval=3", "unknown option interval")],
)
def test_bad_nvml_urls(url, words):
    with pytest.raises(ConfigError, match=words):
        NvmlCollector.from_url(url)


def test_the_node_says_its_driver_and_cuda_versions(tmp_path):
    """NVML's driver and CUDA driver versions (nvidia-smi's header) are kept per node; a host
    whose NVML has no CUDA version call leaves it unknown, never a made-up one."""
    from gpuwarden.store.sqlite import SqliteStore

    c = NvmlCollector(
        nvml=FakeNvml("h100_hgx_8gpu.json"), hostname="hgx1", clock=lambda: 1_767_225_600.0
    )
    batch = c.collect()
    c.close()
    assert [(n.hostname, n.driver_version, n.cuda_driver_version) for n in batch.nodes] == [
        ("hgx1", "535.161.08", "12.2")
    ]
    with SqliteStore(tmp_path / "s.db") as store:
        store.write_batch(batch)
        row = store.read_nodes(hostnames=["hgx1"]).iloc[0]
        assert (row["driver_version"], row["cuda_driver_version"]) == ("535.161.08", "12.2")
    old = NvmlCollector(
        nvml=FakeNvml("v100_r470_2gpu.json"), hostname="v1", clock=lambda: 1_767_225_600.0
    )
    assert [(n.driver_version, n.cuda_driver_version) for n in old.collect().nodes] == [
        ("470.239.06", "")
    ]
    old.close()
