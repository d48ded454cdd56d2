"""The parser on real kernel-log excerpts (tests/data/kmsg/real/, sources in SOURCES.md there):
every NVRM Xid and SXid line reads, with the code, the PCI address and the time it shows."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuwarden.collectors.kmsg import FallenOffBus, is_xid_line, parse_line
from gpuwarden.ingest import ingest_kernel_log
from gpuwarden.store.sqlite import SqliteStore

REAL = Path(__file__).parent.parent / "data" / "kmsg" / "real"
BOOT = 1_700_000_000.0


def _lines(name: str) -> list[str]:
    return (REAL / name).read_text().splitlines()


def _xids(name: str):
    return [x for line in _lines(name) if (x := parse_line(line, boot_time=BOOT)) is not None]


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_every_xid_line_of_every_file_reads():
    for path in sorted(REAL.glob("*.log")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if is_xid_line(line):
                x = parse_line(line, boot_time=BOOT)
                assert x is not None, f"{path.name}:{n}"
                # the r304 excerpt was quoted without its syslog prefix: no time to read
                assert (x.ts is None) == path.name.startswith("kernlog_r304"), f"{path.name}:{n}"


def test_dmesg_T_gsp_timeout():
    xids = _xids("dmesg_T_xid119_gsp_timeout_h100.log")
    assert xids and {(x.kind, x.code, x.bus_id) for x in xids} == {("xid", 119, "0000:9b:00.0")}
    assert xids[0].ts == _utc("2025-02-23T16:24:18")
    assert xids[0].detail.startswith("pid=2024380, name=nvidia-smi, Timeout after 6s")


def test_dmesg_ctime_application_xids():
    xids = _xids("dmesg_ctime_xid13_109.log")
    assert [x.code for x in xids] == [13, 13, 13, 109]
    assert {x.bus_id for x in xids} == {"0000:cb:00.0"}
    assert xids[-1].ts == _utc("2024-08-30T11:43:14")


def test_dmesg_decode_iso_unknown_pid():
    xids = _xids("dmesg_decode_iso_xid13_43_unknown_pid.log")
    assert {x.code for x in xids} == {13, 43}
    assert xids[0].ts == pytest.approx(_utc("2025-01-21T04:41:44.283302"))
    assert xids[0].detail.startswith("pid='<unknown>', name=<unknown>, ")


def test_dmesg_since_boot_xid79_and_sxids():
    xids = _xids("dmesg_xid79_sxid20034_nvswitch.log")
    (xid,) = [x for x in xids if x.kind == "xid"]
    assert (xid.code, xid.bus_id, xid.ts) == (79, "0000:91:00.0", BOOT + 6781741.548779)
    sxids = [x for x in xids if x.kind == "sxid"]
    assert sxids and {x.code for x in sxids} == {20034}
    assert {x.device for x in sxids} == {"nvidia-nvswitch0", "nvidia-nvswitch1", "nvidia-nvswitch2"}
    assert {x.bus_id for x in sxids} == {"0000:05:00.0", "0000:06:00.0", "0000:07:00.0"}


def test_fallen_off_the_bus_without_an_xid_line_is_an_xid_79():
    """Driver 570 writes the notice over three lines and no Xid line (NVIDIA/NVSentinel#155):
    it is read as the Xid 79 it is, at the first line's time, on the bus id it names."""
    assert _xids("dmesg_fallen_off_bus_no_xid_r570.log") == []  # no line is an Xid line
    watch = FallenOffBus()
    found = [
        x
        for line in _lines("dmesg_fallen_off_bus_no_xid_r570.log")
        if (x := watch.feed(line, boot_time=BOOT)) is not None
    ]
    assert [(x.code, x.bus_id, x.ts) for x in found] == [(79, "0000:b3:00.0", BOOT + 1843.308145)]


def test_ingest_reads_the_notice_as_xid_79(tmp_path):
    from gpuwarden.telemetry import Batch, GpuId, Sample

    _lines("dmesg_fallen_off_bus_no_xid_r570.log")
    store = SqliteStore(tmp_path / "s.db")
    gpu = GpuId("n1", 0, "GPU-b3", pci_bus_id="00000000:B3:00.0")
    store.write_batch(Batch(BOOT, (Sample(BOOT, gpu, {"gpu_temp_c": 40.0}),)))
    ingest_kernel_log(
        store, REAL / "dmesg_fallen_off_bus_no_xid_r570.log", host="n1", boot_time=BOOT
    )
    events = store.read_events(kinds=["xid"])
    assert list(zip(events["uuid"], events["code"].astype(int), strict=True)) == [("GPU-b3", 79)]
    store.close()


def test_ingest_the_nvswitch_log(tmp_path):
    _lines("dmesg_xid79_sxid20034_nvswitch.log")
    store = SqliteStore()
    report = ingest_kernel_log(
        store, REAL / "dmesg_xid79_sxid20034_nvswitch.log", host="n1", boot_time=BOOT
    )
    assert report.bad_rows_total == 0 and report.sxids >= 3
    assert report.unmatched == [(3, "0000:91:00.0", "n1")]  # an empty store knows no GPU
    store.close()


def test_dmesg_2015_lines_without_pid_or_name():
    xids = _xids("dmesg_2015_xid32_31_no_pid.log")
    assert [(x.code, x.bus_id) for x in xids] == [(32, "0000:01:00.0")] * 2 + [(31, "0000:01:00.0")]
    assert xids[2].ts == BOOT + 24128.834365
    assert xids[2].detail == "Ch 00000003, engmask 00000101, intr 10000000"


def test_driver_304_address_form_reads_but_has_no_time():
    xids = _xids("kernlog_r304_xid16_8_no_time.log")
    assert [x.code for x in xids] == [16] * 8 + [8]
    assert {x.bus_id for x in xids} == {"0000:01:00.0"} and {x.ts for x in xids} == {None}


#: (file, the PCI addresses its Xid lines name, the Xid codes in order)
TIMED = [
    ("dmesg_T_xid119_gsp_timeout_h100.log", ["0000:9b:00.0"], None),
    ("dmesg_decode_iso_xid13_43_unknown_pid.log", ["0000:38:00.0"], None),
    ("dmesg_ctime_xid13_109.log", ["0000:cb:00.0"], [13, 13, 13, 109]),
    ("dmesg_xid79_sxid20034_nvswitch.log", ["0000:91:00.0"], [79]),
    ("dmesg_2015_xid32_31_no_pid.log", ["0000:01:00.0"], [32, 32, 31]),
]


@pytest.mark.parametrize(("name", "buses", "codes"), TIMED, ids=[t[0] for t in TIMED])
def test_ingest_stores_each_xid_with_its_code_gpu_and_time(tmp_path, name, buses, codes):
    """Five real formats from different driver generations: every Xid line becomes an event on
    the GPU whose PCI address it names (the store knows the GPU as DCGM writes the address)."""
    from gpuwarden.telemetry import Batch, GpuId, Sample

    lines = _lines(name)
    store = SqliteStore(tmp_path / "s.db")
    gpus = []
    for i, bus in enumerate(buses):
        domain, rest = bus.split(":", 1)
        dcgm_form = f"0000{domain}:{rest}".upper()  # 00000000:9B:00.0
        gpus.append(GpuId("n1", i, f"GPU-{i}", pci_bus_id=dcgm_form))
    store.write_batch(Batch(BOOT, tuple(Sample(BOOT, g, {"gpu_temp_c": 40.0}) for g in gpus)))
    report = ingest_kernel_log(store, REAL / name, host="n1", boot_time=BOOT)
    expected = [x for line in lines if (x := parse_line(line, boot_time=BOOT)) and x.kind == "xid"]
    assert report.bad_rows_total == 0 and report.unmatched == []
    events = store.read_events(kinds=["xid"]).sort_values("ts", kind="stable")
    assert len(events) == len(expected) > 0
    assert set(events["uuid"]) == {"GPU-0"} and events["ts"].notna().all()
    assert sorted(events["code"].astype(int)) == sorted(x.code for x in expected)
    if codes is not None:
        assert list(events["code"].astype(int)) == codes
    store.close()
