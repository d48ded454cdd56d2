"""Kernel-log Xids: the line formats of several driver generations and log writers, PCI bus
ids, seconds since boot, SXids per switch, and ``kmsg://`` replaying a file."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuwarden.collectors import open_collector
from gpuwarden.collectors.kmsg import (
    GpuDirectory,
    KernelLineError,
    KmsgCollector,
    boot_time_from_proc,
    parse_line,
    to_event,
)
from gpuwarden.errors import CollectorUnavailable, ConfigError
from gpuwarden.telemetry import GpuId, canonical_pci_bus_id

BOOT = 1_767_225_600.0  # 2026-01-01T00:00:00Z
NOW = 1_780_000_000.0  # 2026-05-28


def _unix(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


# (line, code, canonical bus id, ts, host, detail starts with)
FORMATS = [
    pytest.param(
        "[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        79, "0000:91:00.0", BOOT + 6781741.548779, "", "pid='<unknown>', name=<unknown>, GPU",
        id="dmesg-unknown-pid",
    ),
    pytest.param(
        "[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
        "GPU has fallen off the bus.",
        79, "0000:3b:00.0", BOOT + 1843.308145, "", "pid=1234, name=python",
        id="dmesg-padded",
    ),
    pytest.param(
        "May 10 22:25:01 jambi kernel: [176830.774761] NVRM: Xid (0000:03:00): 13, "
        "0003 00000000 00008297 00001098 00000000 00000044",
        13, "0000:03:00.0", _unix("2026-05-10T22:25:01"), "jambi", "0003 00000000",
        id="syslog-old-driver",
    ),
    pytest.param(
        "[Thu Jan  1 00:00:00 2026] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, "
        "name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU4 GSP!",
        119, "0000:9b:00.0", _unix("2026-01-01T00:00:00"), "", "pid=2024380",
        id="dmesg-T",
    ),
    pytest.param(
        "2026-01-01T00:00:00+0000 node7 kernel: NVRM: Xid (PCI:0000:cb:00): 48, pid=77, "
        "name=python3, Double Bit ECC Error",
        48, "0000:cb:00.0", _unix("2026-01-01T00:00:00"), "node7", "pid=77",
        id="journalctl-short-iso",
    ),
    pytest.param(
        "Jan 02 03:04:05.250000 node7 kernel: NVRM: Xid (PCI:0000:CB:00): 94, pid=7, "
        "name=torchrun, Contained: SM (0x1). RST: No, D-RST: No",
        94, "0000:cb:00.0", _unix("2026-01-02T03:04:05.25"), "node7", "pid=7",
        id="journalctl-short-precise",
    ),
    pytest.param(
        "kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid (PCI:0000:38:00): 13, "
        "pid='<unknown>', name=<unknown>, Graphics SM Global Exception",
        13, "0000:38:00.0", _unix("2025-01-21T04:41:44.283302"), "", "pid='<unknown>'",
        id="dmesg-decode-iso",
    ),
    pytest.param(
        "4,1234,5678901234,-;NVRM: Xid (PCI:0000:87:00 GPU-I:05): 31, pid=9, name=t, "
        "Ch 00000001, intr 00000000. MMU Fault",
        31, "0000:87:00.0", BOOT + 5678.901234, "", "GPU-I:05: pid=9",
        id="dev-kmsg-mig",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("line", "code", "bus", "ts", "host", "detail"), FORMATS)
def test_each_format_gives_code_bus_time_and_host(line, code, bus, ts, host, detail):
    x = parse_line(line, boot_time=BOOT, now=NOW)
    assert x is not None and x.kind == "xid"
    assert (x.code, x.bus_id, x.host) == (code, bus, host)
    assert x.ts == pytest.approx(ts, abs=1e-6)
    assert x.detail.startswith(detail)


def test_other_kernel_lines_are_not_xids():
    for line in (
        "[1.0] NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d",
        "[1.0] NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.",
        "May 10 22:25:01 jambi kernel: usb 1-1: new high-speed USB device",
        "",
    ):
        assert parse_line(line, boot_time=BOOT) is None


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("[1.0] NVRM: Xid (PCI:0000:91:00): abc, oops", "not a number"),
        ("[1.0] NVRM: Xid (somewhere): 79, oops", "without"),
        ("[Thu Feb 30 00:00:00 2026] NVRM: Xid (PCI:0000:91:00): 79, x", "does not exist"),
    ],
)
def test_an_xid_line_that_does_not_read_raises(line, why):
    with pytest.raises(KernelLineError, match=why):
        parse_line(line, boot_time=BOOT)


def test_since_boot_without_a_boot_time_has_no_wall_clock():
    x = parse_line("[100.5] NVRM: Xid (PCI:0000:91:00): 79, x")
    assert x is not None and x.ts is None and x.since_boot == 100.5


def test_syslog_year_is_the_latest_not_in_the_future():
    # a December line read in January belongs to last year
    now = _unix("2027-01-05T00:00:00")
    x = parse_line("Dec 31 23:00:00 n1 kernel: NVRM: Xid (PCI:0000:01:00): 13, x", now=now)
    assert x is not None and x.ts == _unix("2026-12-31T23:00:00")


def test_sxid_names_the_switch_not_a_gpu():
    line = "[6781753.400584] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48"
    x = parse_line(line, boot_time=BOOT)
    assert x is not None
    assert (x.kind, x.code, x.bus_id, x.device) == (
        "sxid",
        20034,
        "0000:06:00.0",
        "nvidia-nvswitch1",
    )
    gpus = GpuDirectory([(GpuId("n1", 0, "GPU-a", "00000000:06:00.0"), 0.0)])
    event = to_event(x, x.ts or 0.0, "n1", gpus)
    assert event.kind == "sxid" and event.code == 20034
    assert event.gpu.index == -1 and event.gpu.model == "NVSwitch"
    assert event.gpu.uuid == "nvswitch:n1:0000:06:00.0"  # never GPU-a, though the bus is equal
    assert event.detail.startswith("nvidia-nvswitch1 Fatal")


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("PCI:0000:cb:00", "0000:cb:00.0"),
        ("0000:cb:00", "0000:cb:00.0"),
        ("00000000:CB:00.0", "0000:cb:00.0"),
        ("0000:CB:00.0", "0000:cb:00.0"),
        ("cb:00.0", "0000:cb:00.0"),
        ("00000001:3B:00.1", "0001:3b:00.1"),
        ("", ""),
    ],
)
def test_pci_bus_ids_have_one_spelling(text, canonical):
    assert canonical_pci_bus_id(text) == canonical


def test_a_pci_bus_id_that_is_not_one_raises():
    with pytest.raises(ValueError, match="not a PCI bus id"):
        canonical_pci_bus_id("GPU-1234")


def test_kernel_and_nvml_spellings_match_the_same_gpu():
    h100 = GpuId("n1", 3, "GPU-c", pci_bus_id="00000000:CB:00.0")
    gpus = GpuDirectory([(h100, 0.0), (GpuId("n2", 3, "GPU-d", "00000000:CB:00.0"), 0.0)])
    x = parse_line("[5.0] NVRM: Xid (PCI:0000:cb:00): 79, x", boot_time=BOOT)
    assert x is not None
    event = to_event(x, x.ts or 0.0, "n1", gpus)
    assert (event.kind, event.gpu) == ("xid", h100)
    # and the other way: a kernel-style id in the inventory, an NVML-style lookup
    gpus = GpuDirectory([(GpuId("n1", 0, "GPU-e", "PCI:0000:3b:00"), 0.0)])
    assert gpus.find("n1", canonical_pci_bus_id("00000000:3B:00.0")) is not None


def test_an_unknown_bus_id_is_kept_unmatched_not_guessed():
    gpus = GpuDirectory([(GpuId("n1", 0, "GPU-a", "00000000:3B:00.0"), 0.0)])
    x = parse_line("[5.0] NVRM: Xid (PCI:0000:cb:00): 79, gone", boot_time=BOOT)
    assert x is not None
    event = to_event(x, x.ts or 0.0, "n1", gpus)
    assert event.kind == "xid_unmatched" and event.code == 79
    assert event.gpu.index == -1 and event.gpu.uuid == "pci:n1:0000:cb:00.0"
    assert "PCI 0000:cb:00.0" in event.detail


def test_a_slot_with_two_boards_takes_the_one_there_at_the_time():
    old, new = GpuId("n1", 0, "GPU-old", "0000:3b:00.0"), GpuId("n1", 0, "GPU-new", "0000:3b:00.0")
    gpus = GpuDirectory([(new, 2000.0), (old, 1000.0)])
    assert gpus.find("n1", "0000:3b:00.0", 1500.0) == old
    assert gpus.find("n1", "0000:3b:00.0", 2500.0) == new


def test_boot_time_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3\nbtime 1767225600\nprocesses 9\n")
    assert boot_time_from_proc(str(stat)) == BOOT
    stat.write_text("cpu 1 2 3\n")
    with pytest.raises(CollectorUnavailable, match="btime"):
        boot_time_from_proc(str(stat))


def _no_nvml(hostname: str) -> list[GpuId]:
    raise CollectorUnavailable("NVML not found")


def test_collector_replays_a_kmsg_file_and_follows_it(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text(
        "6,100,1000000,-;nvidia-modeset: Loading\n"
        "4,101,2500000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
        "4,102,2600000,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal\n"
        "4,103,2700000,-;NVRM: Xid (PCI:0000:cb:00): 48, DBE\n"
        "4,104,2800000,-;NVRM: Xid (PCI:0000:3b:00): bad, x\n"
    )
    gpu = GpuId("n1", 0, "GPU-a", "00000000:3B:00.0")
    c = KmsgCollector(str(log), hostname="n1", boot_time=BOOT, gpus=[gpu], clock=lambda: NOW)
    batch = c.collect()
    kinds = [(e.kind, e.code, e.gpu.uuid, e.ts) for e in batch.events]
    assert kinds == [
        ("xid", 79, "GPU-a", BOOT + 2.5),
        ("sxid", 12028, "nvswitch:n1:0000:05:00.0", BOOT + 2.6),
        ("xid_unmatched", 48, "pci:n1:0000:cb:00.0", BOOT + 2.7),
    ]
    assert any("'bad' is not a number" in p for p in batch.problems)
    assert any("0000:cb:00.0 matches no GPU" in p for p in batch.problems)
    assert c.collect().events == ()  # nothing new: returns at once
    with log.open("a") as fh:  # a half-written line waits for its end
        fh.write("4,105,3000000,-;NVRM: Xid (PCI:0000:3b:00): 94, ")
    assert c.collect().events == ()
    with log.open("a") as fh:
        fh.write("Contained\n")
    (event,) = c.collect().events
    assert (event.code, event.detail, event.ts) == (94, "Contained", BOOT + 3.0)
    c.close()


def test_collector_without_nvml_says_so_once(tmp_path):
    log = tmp_path / "dmesg"
    log.write_text("[2.0] NVRM: Xid (PCI:0000:3b:00): 79, x\n")
    c = KmsgCollector(str(log), hostname="n1", boot_time=BOOT, nvml=_no_nvml)
    first = c.collect()
    assert [e.kind for e in first.events] == ["xid_unmatched"]
    assert any("NVML not found" in p for p in first.problems)
    assert not any("NVML" in p for p in c.collect().problems)
    c.close()


def test_collector_tail_skips_what_is_there(tmp_path):
    log = tmp_path / "dmesg"
    log.write_text("[2.0] NVRM: Xid (PCI:0000:3b:00): 79, x\n")
    c = KmsgCollector(str(log), hostname="n1", boot_time=BOOT, gpus=[], tail=True)
    assert c.collect().events == ()
    c.close()


def test_kmsg_url(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("[2.0] NVRM: Xid (PCI:0000:3b:00): 79, x\n")
    c = open_collector(f"kmsg://{log}?hostname=n9&boot_time={BOOT:.0f}")
    try:
        assert isinstance(c, KmsgCollector)
        assert (c.path, c.hostname) == (str(log), "n9")
        (event,) = c.collect().events
        assert event.ts == BOOT + 2.0 and event.gpu.hostname == "n9"
    finally:
        c.close()
    with pytest.raises(ConfigError, match="unknown option"):
        open_collector(f"kmsg://{log}?speed=9")
    with pytest.raises(CollectorUnavailable, match="cannot open"):
        open_collector(f"kmsg://{tmp_path}/missing?hostname=n1")


def test_a_one_line_fallen_off_the_bus_notice_is_xid_79_unless_its_xid_came_first():
    from gpuwarden.collectors.kmsg import FallenOffBus

    notice = "[100.5] NVRM: GPU 0000:91:00.0: GPU has fallen off the bus."
    alone = FallenOffBus().feed(notice, boot_time=1000.0)
    assert alone is not None and (alone.code, alone.bus_id, alone.ts) == (
        79,
        "0000:91:00.0",
        1100.5,
    )
    watch = FallenOffBus()
    xid = "[100.4] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    assert watch.feed(xid, boot_time=1000.0) is None
    assert watch.feed(notice, boot_time=1000.0) is None  # the same fault, said again
    other = "[100.6] NVRM: GPU 0000:92:00.0: GPU has fallen off the bus."
    assert watch.feed(other, boot_time=1000.0).bus_id == "0000:92:00.0"  # another GPU
