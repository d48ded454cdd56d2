"""Every real dcgm-exporter scrape in tests/data/dcgm/real (SOURCES.md), read value by value.

The tables say what gpuwarden reads from each file: each GPU's identity (hostname, index, uuid,
PCI bus id, model) and every field's value. DCGM's blank sentinels and the memory temperature
of 0 that GPUs without an HBM sensor (T4, L4, L40S) report are left out of the tables: they are
to be *missing*, which the value path (branch wave2-readings) does; until it lands,
``test_blank_and_impossible_readings_are_missing`` is expected to fail.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from gpuwarden.collectors.dcgm import DcgmCollector
from gpuwarden.telemetry import Batch, mig_uuid, time_unknown

REAL = Path(__file__).resolve().parents[1] / "data" / "dcgm" / "real"
TS = 1_000.0

#: (file, field) readings that are DCGM blanks or impossible: to be missing from the sample.
BLANK = {
    ("t4_gpuop_driver590_memtemp0.txt", "mem_temp_c"),  # 0 on a T4 (no memory sensor)
    ("t4_rafay_driver580_temps.txt", "mem_temp_c"),  # 0 on a T4
    ("l40s_driver595_full.txt", "mem_temp_c"),  # 0 on an L40S (GDDR6, no sensor)
    ("l4_kops_driver580_full.txt", "mem_temp_c"),  # 0 on an L4
    ("readme_quickstart_sentinel_int64.txt", "mem_temp_c"),  # DCGM_INT64_NOT_SUPPORTED
    ("readme_k8s_empty_pod_labels_sentinel.txt", "mem_temp_c"),  # DCGM_INT64_NOT_SUPPORTED
}
#: Not asserted either way: a vGPU guest's memory temperature of 0 (GRID A100-10C; an A100 has
#: an HBM sensor, a vGPU guest may not be given it). Which it is is the value path's call.
UNDECIDED = {("grid_a100_10c_vgpu_driver580.txt", "mem_temp_c")}

EXPECTED: dict[str, list[tuple[tuple[str, int, str, str, str], dict[str, float]]]] = {
    "grid_a100_10c_vgpu_driver580.txt": [
        (
            (
                "conformance-test-np1-qcqc8-bpdtl-wv2gs",
                0,
                "GPU-44d2411e-1604-478f-aa96-5a3c00000000",
                "00000000:03:00.0",
                "GRID A100-10C",
            ),
            {
                "sm_clock_mhz": 1410.0,
                "mem_clock_mhz": 1215.0,
                "gpu_util_pct": 0.0,
                "mem_copy_util_pct": 0.0,
                "enc_util_pct": 0.0,
                "dec_util_pct": 0.0,
                "fb_free_mib": 9323.0,
                "fb_used_mib": 0.0,
                "fb_reserved_mib": 916.0,
            },
        ),
    ],
    "issue_250_v100_hostname_fragment.txt": [
        (
            ("r6i3n0", 0, "GPU-a6158b59-2c1e-1e63-0068-9178c4298abd", "", "Tesla V100-SXM2-32GB"),
            {"sm_clock_mhz": 135.0},
        ),
        (
            ("r6i3n0", 1, "GPU-8d5053b3-9280-7d1a-751b-4fd2fdd547c5", "", "Tesla V100-SXM2-32GB"),
            {"sm_clock_mhz": 135.0},
        ),
    ],
    "issue_317_a30_mig_hostname_fragment.txt": [
        (
            (
                "yg-data-k8s-gpu-a30-node-test-test0003.mt",
                0,
                "GPU-265c9814-6156-355b-e589-ff2064894f16",
                "",
                "NVIDIA A30",
            ),
            {"mem_temp_c": 35.0},
        ),
        (
            (
                "yg-data-k8s-gpu-a30-node-test-test0003.mt",
                1,
                "GPU-2d20791a-b4a6-ba59-97f1-e95b99fe5b49",
                "",
                "NVIDIA A30",
            ),
            {"mem_temp_c": 34.0},
        ),
    ],
    "issue_gpuop340_t4_pod_labels_fragment.txt": [
        (
            (
                "nvidia-dcgm-exporter-ml2wh",
                0,
                "GPU-e1200d64-e918-4277-cad9-75da90b9f618",
                "",
                "Tesla T4",
            ),
            {"enc_util_pct": 0.0, "dec_util_pct": 0.0, "fb_free_mib": 15109.0},
        ),
    ],
    "issue_pr239_xid_errors_count_t400.txt": [],
    "issue_pr736_a30_mig_pod_lowercase_hostname_fragment.txt": [
        (
            (
                "dcgm-exporter-wwwjh",
                0,
                "GPU-9a63752e-af8d-fe52-7f0d-968bca6d52e3",
                "00000000:65:00.0",
                "NVIDIA A30",
            ),
            {"gpu_temp_c": 50.0},
        ),
        (
            (
                "dcgm-exporter-wwwjh",
                0,
                "MIG-GPU-9a63752e-af8d-fe52-7f0d-968bca6d52e3/6",
                "00000000:65:00.0",
                "NVIDIA A30 MIG 1g.6gb",
            ),
            {"fb_used_mib": 3744.0},
        ),
        (
            (
                "dcgm-exporter-wwwjh",
                1,
                "GPU-fc60126e-514d-3522-2828-c5daa8e99d85",
                "00000000:B1:00.0",
                "NVIDIA RTX 2000 Ada Generation",
            ),
            {"gpu_temp_c": 44.0},
        ),
        (
            (
                "dcgm-exporter-wwwjh",
                2,
                "GPU-63bc0b91-2265-1b94-831c-15c41fe92675",
                "00000000:CA:00.0",
                "NVIDIA A30",
            ),
            {"gpu_temp_c": 45.0},
        ),
    ],
    "l40s_driver595_full.txt": [
        (
            (
                "gpu1-wl8sg",
                0,
                "GPU-5b4e07f6-3a86-4340-039d-25f2a83cdc43",
                "00000000:00:07.0",
                "NVIDIA L40S",
            ),
            {
                "sm_clock_mhz": 210.0,
                "mem_clock_mhz": 405.0,
                "gpu_temp_c": 32.0,
                "power_w": 35.686,
                "energy_mj": 5551899580.0,
                "pcie_replay_total": 0.0,
                "gpu_util_pct": 0.0,
                "mem_copy_util_pct": 0.0,
                "enc_util_pct": 0.0,
                "dec_util_pct": 0.0,
                "fb_free_mib": 45459.0,
                "fb_used_mib": 0.0,
                "fb_reserved_mib": 608.0,
                "remapped_rows_uncorrectable": 0.0,
                "remapped_rows_correctable": 0.0,
                "remapped_rows_failure": 0.0,
                "gr_engine_active": 0.0,
                "tensor_active": 0.0,
                "dram_active": 0.000131,
                "pcie_tx_bytes_per_s": 175084.0,
                "pcie_rx_bytes_per_s": 19831.0,
            },
        ),
    ],
    "l4_kops_driver580_full.txt": [
        (
            (
                "i-030791dc5a37cd257",
                0,
                "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c",
                "00000000:31:00.0",
                "NVIDIA L4",
            ),
            {
                "sm_clock_mhz": 210.0,
                "mem_clock_mhz": 405.0,
                "gpu_temp_c": 31.0,
                "power_w": 16.365,
                "energy_mj": 4742776.0,
                "pcie_replay_total": 0.0,
                "gpu_util_pct": 0.0,
                "mem_copy_util_pct": 0.0,
                "enc_util_pct": 0.0,
                "dec_util_pct": 0.0,
                "fb_free_mib": 22563.0,
                "fb_used_mib": 0.0,
                "fb_reserved_mib": 470.0,
                "remapped_rows_uncorrectable": 0.0,
                "remapped_rows_correctable": 0.0,
                "remapped_rows_failure": 0.0,
                "gr_engine_active": 0.0,
                "tensor_active": 0.0,
                "dram_active": 0.0,
                "pcie_tx_bytes_per_s": 112603.0,
                "pcie_rx_bytes_per_s": 17544.0,
            },
        ),
    ],
    "readme_k8s_empty_pod_labels_sentinel.txt": [
        (
            ("endpoint", 0, "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52", "", ""),
            {"sm_clock_mhz": 139.0, "mem_clock_mhz": 405.0},
        ),
    ],
    "readme_quickstart_sentinel_int64.txt": [
        (
            ("endpoint", 0, "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52", "", ""),
            {"sm_clock_mhz": 139.0, "mem_clock_mhz": 405.0},
        ),
    ],
    "t4_gpuop_driver590_memtemp0.txt": [
        (
            (
                "cp-bm14r7",
                0,
                "GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a",
                "00000000:37:00.0",
                "Tesla T4",
            ),
            {
                "sm_clock_mhz": 660.0,
                "mem_clock_mhz": 5000.0,
                "gpu_temp_c": 74.0,
                "power_w": 68.244,
                "energy_mj": 15152422938.0,
                "pcie_replay_total": 0.0,
                "gpu_util_pct": 91.0,
                "mem_copy_util_pct": 73.0,
                "enc_util_pct": 0.0,
                "dec_util_pct": 0.0,
                "fb_free_mib": 9791.0,
                "fb_used_mib": 5120.0,
                "fb_reserved_mib": 447.0,
                "gr_engine_active": 0.156205,
                "tensor_active": 0.005822,
                "dram_active": 0.092781,
                "pcie_tx_bytes_per_s": 4791810.0,
                "pcie_rx_bytes_per_s": 6935930.0,
            },
        ),
    ],
    "t4_rafay_driver580_temps.txt": [
        (
            (
                "ip-10-200-3-41",
                0,
                "GPU-d7cbb0cd-d4bd-c2f7-dfaf-221df5e958ea",
                "00000000:00:1E.0",
                "Tesla T4",
            ),
            {"gpu_temp_c": 24.0},
        ),
    ],
}


def scrape(*bodies: str) -> list[Batch]:
    """One collector, one scrape per body (the collector's state carries over)."""
    served = list(bodies)
    client = httpx.Client(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, text=served[0]))
    )
    collector = DcgmCollector(["http://endpoint:9400/metrics"], client=client, clock=lambda: TS)
    out = []
    try:
        while served:
            out.append(collector.collect())
            served.pop(0)
    finally:
        collector.close()
        client.close()
    return out


def read(name: str) -> Batch:
    (batch,) = scrape((REAL / name).read_text())
    assert batch.problems == ()
    return batch


def test_every_real_file_has_a_table() -> None:
    assert sorted(EXPECTED) == sorted(p.name for p in REAL.glob("*.txt"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_what_gpuwarden_reads_from_each_real_scrape(name: str) -> None:
    batch = read(name)
    got = [
        (
            (s.gpu.hostname, s.gpu.index, s.gpu.uuid, s.gpu.pci_bus_id, s.gpu.model),
            {k: v for k, v in s.values.items() if (name, k) not in BLANK | UNDECIDED},
        )
        for s in batch.samples
    ]
    assert got == EXPECTED[name]
    assert all(s.ts == TS for s in batch.samples)


def test_blank_and_impossible_readings_are_missing() -> None:
    for name, field in sorted(BLANK):
        for sample in read(name).samples:
            assert field not in sample.values, (name, field, sample.values.get(field))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("t4_gpuop_driver590_memtemp0.txt", {"cp-bm14r7": "590.48.01"}),
        ("t4_rafay_driver580_temps.txt", {"ip-10-200-3-41": "580.105.08"}),
        ("l40s_driver595_full.txt", {"gpu1-wl8sg": "595.58.03"}),
        ("l4_kops_driver580_full.txt", {"i-030791dc5a37cd257": "580.105.08"}),
        (
            "grid_a100_10c_vgpu_driver580.txt",
            {"conformance-test-np1-qcqc8-bpdtl-wv2gs": "580.126.09"},
        ),
        ("issue_pr239_xid_errors_count_t400.txt", {"workstation": "545.29.02"}),
        ("issue_gpuop340_t4_pod_labels_fragment.txt", {}),  # 2.x: no driver label
        ("issue_250_v100_hostname_fragment.txt", {}),
        ("readme_quickstart_sentinel_int64.txt", {}),
    ],
)
def test_the_driver_version_label_is_kept_per_node(name: str, expected: dict[str, str]) -> None:
    nodes = read(name).nodes
    assert {n.hostname: n.driver_version for n in nodes} == expected
    assert all(n.cuda_driver_version == "" and n.ts == TS for n in nodes)  # not in dcgm's labels


def test_the_host_label_in_both_spellings_and_the_endpoint_fallback() -> None:
    assert {s.gpu.hostname for s in read("l40s_driver595_full.txt").samples} == {"gpu1-wl8sg"}
    lower = read("issue_pr736_a30_mig_pod_lowercase_hostname_fragment.txt")
    assert {s.gpu.hostname for s in lower.samples} == {"dcgm-exporter-wwwjh"}
    # no host label at all (the 2020 README): the endpoint's host
    assert {s.gpu.hostname for s in read("readme_quickstart_sentinel_int64.txt").samples} == {
        "endpoint"
    }


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "issue_gpuop340_t4_pod_labels_fragment.txt",
            [("GPU-e1200d64-e918-4277-cad9-75da90b9f618", "default", "dcgmproftester", "dcgmproftester11")],
        ),
        (
            "issue_pr736_a30_mig_pod_lowercase_hostname_fragment.txt",
            [
                (mig_uuid("GPU-9a63752e-af8d-fe52-7f0d-968bca6d52e3", "6"), "default", "triton-server-f7cb5d77-2w5b2", "triton-server"),
                (mig_uuid("GPU-63bc0b91-2265-1b94-831c-15c41fe92675", "3"), "default", "triton-server-f7cb5d77-95xcf", "triton-server"),
                (mig_uuid("GPU-9a63752e-af8d-fe52-7f0d-968bca6d52e3", "3"), "default", "triton-server-f7cb5d77-wwk9g", "triton-server"),
            ],
        ),
        # pod="" namespace="" container="": unassigned, said explicitly
        ("readme_k8s_empty_pod_labels_sentinel.txt", [("GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52", "", "", "")]),
        ("l40s_driver595_full.txt", []),  # no pod labels at all: nothing said
    ],
)  # fmt: skip
def test_pod_labels_become_assignments(name: str, expected: list[tuple[str, ...]]) -> None:
    got = [(a.gpu.uuid, a.namespace, a.pod, a.container) for a in read(name).assignments]
    assert got == expected


def test_mig_instances_keep_their_own_fields_and_the_parent_keeps_the_gpus() -> None:
    batch = read("issue_pr736_a30_mig_pod_lowercase_hostname_fragment.txt")
    by_uuid = {s.gpu.uuid: s for s in batch.samples}
    parent = "GPU-9a63752e-af8d-fe52-7f0d-968bca6d52e3"
    instance = by_uuid[mig_uuid(parent, "6")]
    assert dict(instance.values) == {"fb_used_mib": 3744.0}  # the instance's own memory
    assert instance.gpu.model == "NVIDIA A30 MIG 1g.6gb"
    assert (instance.gpu.hostname, instance.gpu.index) == ("dcgm-exporter-wwwjh", 0)
    assert dict(by_uuid[parent].values) == {"gpu_temp_c": 50.0}  # once, on the parent
    # four instances repeating the memory temperature: one reading, on the parent
    four = read("issue_317_a30_mig_hostname_fragment.txt")
    assert [(s.gpu.uuid, dict(s.values)) for s in four.samples] == [
        ("GPU-265c9814-6156-355b-e589-ff2064894f16", {"mem_temp_c": 35.0}),
        ("GPU-2d20791a-b4a6-ba59-97f1-e95b99fe5b49", {"mem_temp_c": 34.0}),
    ]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_events_of_each_real_scrape(name: str) -> None:
    events = [(e.gpu.uuid, e.kind, e.code, e.detail) for e in read(name).events]
    if name != "issue_pr239_xid_errors_count_t400.txt":
        assert events == []  # gpuop340's DCGM_FI_DEV_XID_ERRORS is 0: no Xid
        return
    # the windowed count already there at the first scrape: recorded once, time unknown
    assert events == [
        (
            "GPU-b9f9e81b-bee7-34bc-af17-132ef6592740",
            "xid",
            42,
            "seen at first scrape; time unknown "
            "(DCGM_FI_DEV_XID_ERRORS_ACTIVE{xid=42} = 1 within 300 s)",
        )
    ]
    assert time_unknown(events[0][3])


# -- Xid series of dcgm-exporter 4.x, on the PR 239 line ----------------------------------------

_LABELS = 'gpu="0",UUID="GPU-b9",device="nvidia0",modelName="NVIDIA T400 4GB",Hostname="ws"'


def _count(xid: int, n: int) -> str:
    return f'DCGM_EXP_XID_ERRORS_COUNT{{{_LABELS},window_size_in_ms="300000",xid="{xid}"}} {n}\n'


def _gauge(code: int, msg: str = "") -> str:
    extra = f',err_code="{code}",err_msg="{msg}"' if msg else ""
    return f"DCGM_FI_DEV_XID_ERRORS{{{_LABELS}{extra}}} {code}\n"


def test_a_windowed_xid_count_makes_events_for_its_increases_only() -> None:
    temp = f"DCGM_FI_DEV_GPU_TEMP{{{_LABELS}}} 40\n"
    batches = scrape(
        temp,  # no Xid yet
        temp + _count(42, 1),  # a new xid: one new
        temp + _count(42, 1),  # the same one, still in the window: nothing
        temp + _count(42, 3),  # two more
        temp + _count(42, 2),  # one left the window: nothing
        temp,  # all left the window
        temp + _count(42, 1) + _count(79, 1),  # new again, and a second code
    )
    got = [[(e.code, e.detail) for e in b.events] for b in batches]
    window = "within 300 s"
    assert got == [
        [],
        [(42, f"1 new (DCGM_EXP_XID_ERRORS_COUNT 0 -> 1 {window})")],
        [],
        [(42, f"2 new (DCGM_EXP_XID_ERRORS_COUNT 1 -> 3 {window})")],
        [],
        [],
        [
            (42, f"1 new (DCGM_EXP_XID_ERRORS_COUNT 0 -> 1 {window})"),
            (79, f"1 new (DCGM_EXP_XID_ERRORS_COUNT 0 -> 1 {window})"),
        ],
    ]


def test_the_last_xid_gauge_and_the_count_together_make_one_event() -> None:
    msg = "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda"
    first, second, third = scrape(
        _gauge(0), _gauge(45, msg) + _count(45, 1), _gauge(13, "Graphics Engine Exception")
    )
    assert first.events == ()
    assert [(e.code, e.detail) for e in second.events] == [
        (45, "1 new (DCGM_EXP_XID_ERRORS_COUNT 0 -> 1 within 300 s)")
    ]
    (event,) = third.events  # 3.3.6+ err_msg label: kept in the detail
    assert (event.code, event.detail) == (
        13,
        "DCGM_FI_DEV_XID_ERRORS changed from 45 to 13: Graphics Engine Exception",
    )


def test_an_old_last_xid_is_recorded_once_per_collector_start() -> None:
    batches = scrape(
        _gauge(79, "GPU has fallen off the bus"), _gauge(79, "GPU has fallen off the bus")
    )
    assert [[(e.code, e.detail) for e in b.events] for b in batches] == [
        [
            (
                79,
                "seen at first scrape; time unknown (DCGM_FI_DEV_XID_ERRORS = 79): GPU has fallen off the bus",
            )
        ],
        [],
    ]
    (again,) = scrape(_gauge(79))[0].events  # a new collector (gpuwarden restarted): once more
    assert time_unknown(again.detail)


def test_the_health_status_is_the_worst_watch() -> None:
    body = "".join(
        f'DCGM_EXP_GPU_HEALTH_STATUS{{{_LABELS},health_watch="{w}",health_error_code="{c}"}} {v}\n'
        for w, c, v in (("PCIE", "DCGM_FR_OK", 0), ("MEM", "DCGM_FR_VOLATILE_DBE_DETECTED", 20), ("THERMAL", "DCGM_FR_OK", 10))
    )  # fmt: skip
    (batch,) = scrape(body)
    (sample,) = batch.samples
    assert dict(sample.values) == {"dcgm_health": 20.0}
