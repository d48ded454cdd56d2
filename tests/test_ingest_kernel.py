"""``gpuwarden ingest --kernel-log``: Xids matched to stored GPUs by PCI address, SXids per
switch, unmatched Xids kept, bad lines by number, and the options a dmesg log needs."""

from __future__ import annotations

import gzip

import click
import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.cliutil import parse_time
from gpuwarden.errors import InputError
from gpuwarden.ingest import ingest_kernel_log
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Event, GpuId

BOOT = 1_767_225_600.0  # 2026-01-01T00:00:00Z
H100 = GpuId("node7", 4, "GPU-509665ad", pci_bus_id="00000000:9B:00.0", model="H100")

DMESG = """\
[    5.000000] nvidia: loading out-of-tree module taints kernel.
[  100.250000] NVRM: Xid (PCI:0000:9b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
[  101.000000] NVRM: Xid (PCI:0000:9b:00): x79, pid=1, name=a, broken
[  102.000000] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 7
[  103.000000] NVRM: Xid (PCI:0000:cb:00): 13, pid=9, name=python, Graphics Exception
"""


def _store_with_gpu() -> SqliteStore:
    store = SqliteStore()
    # the inventory, as telemetry or a collector leaves it (NVML's spelling of the bus id)
    store.write_events([Event(BOOT - 10, H100, "gpu_recovered")])
    return store


def run(*args: str):
    return CliRunner().invoke(main, list(args), env={}, catch_exceptions=False)


def test_dmesg_log_goes_to_the_gpu_at_its_pci_address(tmp_path):
    log = tmp_path / "dmesg.txt"
    log.write_text(DMESG)
    store = _store_with_gpu()
    report = ingest_kernel_log(store, log, host="node7", boot_time=BOOT)
    assert report.rows_stored == 3 and report.sxids == 1
    assert report.bad_rows == [(3, "Xid code 'x79' is not a number")]
    assert report.unmatched == [(5, "0000:cb:00.0", "node7")]
    events = store.read_events(kinds=["xid", "sxid", "xid_unmatched"])
    rows = list(events[["ts", "uuid", "kind", "code"]].itertuples(index=False, name=None))
    assert rows == [
        (BOOT + 100.25, "GPU-509665ad", "xid", 79),
        (BOOT + 102.0, "nvswitch:node7:0000:05:00.0", "sxid", 12028),
        (BOOT + 103.0, "pci:node7:0000:cb:00.0", "xid_unmatched", 13),
    ]
    # loading it again stores nothing new and loses nothing
    ingest_kernel_log(store, log, host="node7", boot_time=BOOT)
    assert len(store.read_events(kinds=["xid", "sxid", "xid_unmatched"])) == 3
    store.close()


def test_syslog_lines_carry_their_host_and_date(tmp_path):
    log = tmp_path / "kern.log.gz"
    log.write_bytes(
        gzip.compress(
            b"2026-01-01T00:00:00+0000 node7 kernel: NVRM: Xid (PCI:0000:9b:00): 48, pid=1, "
            b"name=x, DBE\n"
        )
    )
    store = _store_with_gpu()
    report = ingest_kernel_log(store, log)  # no --host, no --boot-time needed
    assert report.rows_stored == 1 and not report.unmatched
    (row,) = store.read_events(kinds=["xid"]).itertuples()
    assert (row.ts, row.uuid, row.code) == (BOOT, "GPU-509665ad", 48)
    store.close()


def test_since_boot_stamps_need_boot_time_and_store_nothing_without(tmp_path):
    log = tmp_path / "dmesg.txt"
    log.write_text(DMESG)
    store = _store_with_gpu()
    with pytest.raises(InputError, match=r"dmesg.txt:2: .*give --boot-time"):
        ingest_kernel_log(store, log, host="node7")
    with pytest.raises(InputError, match="give --host"):
        ingest_kernel_log(store, log, boot_time=BOOT)
    assert store.read_events(kinds=["xid", "sxid", "xid_unmatched"]).empty
    store.close()


def test_an_empty_file_is_an_error(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text("")
    with pytest.raises(InputError, match="empty"):
        ingest_kernel_log(SqliteStore(), log, host="n1")


@pytest.mark.parametrize(
    ("text", "ts"),
    [("1767225600", BOOT), ("2026-01-01T00:00:00Z", BOOT), ("2026-01-01T01:00:00+01:00", BOOT)],
)
def test_parse_time(text, ts):
    assert parse_time(text, "--boot-time") == ts


def test_parse_time_names_the_option():
    with pytest.raises(click.BadParameter, match="'yesterday' is not a time") as bad:
        parse_time("yesterday", "--boot-time")
    assert bad.value.param_hint == "--boot-time"


def test_cli_good_file(tmp_path):
    db = tmp_path / "s.db"
    store = SqliteStore.from_url(f"sqlite:///{db}")
    store.write_events([Event(BOOT - 10, H100, "gpu_recovered")])
    store.close()
    log = tmp_path / "kern.log"
    log.write_text(
        "Jan 01 00:01:40.250000 node7 kernel: NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=x, gone\n"
    )
    result = run("ingest", "--store", str(db), "--kernel-log", str(log))
    assert result.exit_code == 0, result.output
    assert "stored 1 kernel-log event (1 Xid, 0 SXid, 0 unmatched Xid)" in result.output


def test_cli_bad_lines_exit_1_and_keep_the_good(tmp_path):
    db = tmp_path / "s.db"
    log = tmp_path / "dmesg.txt"
    log.write_text(DMESG)
    result = run(
        "ingest", "--store", str(db), "--kernel-log", str(log), "--host", "node7",
        "--boot-time", "2026-01-01T00:00:00Z",
    )  # fmt: skip
    assert result.exit_code == 1
    assert f"{log}:3: Xid code 'x79' is not a number" in result.output
    assert f"{log}:2: no known GPU at PCI 0000:9b:00.0 on node7;" in result.output  # empty store
    assert "stored 4" not in result.output and "stored 3 kernel-log events" in result.output
    assert "1 bad row skipped" in result.output


def test_cli_missing_boot_time_names_the_option(tmp_path):
    log = tmp_path / "dmesg.txt"
    log.write_text(DMESG)
    result = run(
        "ingest", "--store", str(tmp_path / "s.db"), "--kernel-log", str(log), "--host", "n"
    )
    assert result.exit_code == 1
    assert "--boot-time" in result.output and "Traceback" not in result.output


def test_cli_log_without_xids_says_so(tmp_path):
    log = tmp_path / "dmesg.txt"
    log.write_text("[1.0] Linux version 6.8\n[2.0] usb 1-1: new device\n")
    result = run(
        "ingest", "--store", str(tmp_path / "s.db"), "--kernel-log", str(log), "--host", "n"
    )
    assert result.exit_code == 0
    assert "no NVRM Xid or SXid line in 2 lines" in result.output
