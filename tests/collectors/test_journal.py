"""Kernel logs from systemd's journal (``collectors.journal``): each form is recognised, entries
become the lines the kernel-log parser reads, other programs' echoes of an Xid are skipped,
and an entry that does not read is named by its number. The same journals made and printed by
systemd's own tools: tests/integration/test_journal_kernel_log.py."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.collectors import journal
from gpuwarden.collectors.journal import (
    entry_lines,
    export_entries,
    journal_format,
    kernel_lines,
)
from gpuwarden.errors import InputError
from gpuwarden.ingest import ingest_kernel_log
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Event, GpuId

T0 = 1_740_327_858  # 2025-02-23T16:24:18Z
H100 = GpuId("node7", 4, "GPU-509665ad", pci_bus_id="00000000:9B:00.0", model="H100")
XID = "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s"
#: The driver's notice as the kernel logs it: one record over three lines (r570).
FALLEN = (
    "NVRM: The NVIDIA GPU 0000:9b:00.0\n"
    "NVRM: (PCI ID: 10de:2330) installed in this system has\n"
    "NVRM: fallen off the bus and is not responding to commands."
)


def _entry(message, us: int, **more) -> dict:
    out = {"__REALTIME_TIMESTAMP": str(us), "_HOSTNAME": "node7", "_TRANSPORT": "kernel"}
    return {**out, "SYSLOG_IDENTIFIER": "kernel", "MESSAGE": message, **more}


def _store() -> SqliteStore:
    store = SqliteStore()
    store.write_events([Event(T0 - 60, H100, "gpu_recovered")])
    return store


def _xids(store: SqliteStore) -> list[tuple]:
    events = store.read_events(kinds=["xid", "sxid", "xid_unmatched"])
    return list(events[["ts", "uuid", "kind", "code"]].itertuples(index=False, name=None))


def test_an_entry_is_a_stamped_line_per_line_of_its_message():
    assert entry_lines(_entry(XID, T0 * 10**6 + 5)) == [
        f"2025-02-23T16:24:18.000005+00:00 node7 kernel: {XID}"
    ]
    three = entry_lines(_entry(FALLEN, T0 * 10**6))
    assert [line.split(" kernel: ")[1] for line in three] == FALLEN.split("\n")
    assert entry_lines({"MESSAGE": XID}) == [XID]  # no stamp, no host: the parser says so
    with pytest.raises(ValueError, match="not microseconds"):
        entry_lines(_entry(XID, 0) | {"__REALTIME_TIMESTAMP": "2025-02-23"})


def test_fields_as_journalctl_encodes_them():
    # not UTF-8: an array of byte values; a field met twice: an array of its values
    raw = list(XID.encode()) + [0xFF]
    assert entry_lines(_entry(raw, T0 * 10**6))[0].endswith(XID + "\ufffd")
    assert entry_lines(_entry([XID, "again"], T0 * 10**6))[0].endswith(XID)
    assert entry_lines(_entry(None, T0 * 10**6)) == []  # left out as too large


def test_each_form_is_recognised(tmp_path):
    lines = [json.dumps(_entry(XID, T0 * 10**6))]
    (tmp_path / "a.json").write_text("\n".join(lines) + "\n")
    (tmp_path / "a.seq").write_text("".join(f"\x1e{line}\n" for line in lines))
    (tmp_path / "a.pretty").write_text(json.dumps(_entry(XID, T0 * 10**6), indent=8) + "\n")
    (tmp_path / "a.export").write_bytes(b"__CURSOR=s=1\n__REALTIME_TIMESTAMP=1\nMESSAGE=x\n\n")
    (tmp_path / "a.journal").write_bytes(journal.JOURNAL_MAGIC + b"\0" * 8)
    (tmp_path / "dmesg.log").write_text(f"[Sun Feb 23 16:24:18 2025] {XID}\n")
    (tmp_path / "no_stamp.log").write_text("MESSAGE=not an export: no journal field\n")
    assert {p.name: journal_format(p) for p in sorted(tmp_path.iterdir())} == {
        "a.export": "export",
        "a.journal": "file",
        "a.json": "json",
        "a.pretty": "json",
        "a.seq": "json",
        "dmesg.log": None,
        "no_stamp.log": None,
    }
    assert journal_format(tmp_path) == "directory"


def test_json_lines_keep_the_kernels_own_entries_and_name_the_broken_one(tmp_path):
    us = T0 * 10**6
    entries = [
        json.dumps(_entry("nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver", us)),
        json.dumps(_entry(XID, us + 1)),
        # a health checker echoing the line it saw: not a second Xid
        json.dumps(_entry(f"found {XID}", us + 2, _TRANSPORT="stdout", SYSLOG_IDENTIFIER="npd")),
        '{"MESSAGE": "NVRM: Xid (PCI:0000:9b:00): 48, DBE", "__REALTIME',  # cut off
        json.dumps(_entry(FALLEN, us + 3)),
        # kernel lines forwarded through syslog into the journal of a log host
        json.dumps(_entry(XID.replace("119", "63"), us + 4, _TRANSPORT="syslog")),
    ]
    path = tmp_path / "node7.json"
    path.write_text("\n".join(entries) + "\n")
    got = kernel_lines(path)
    assert got is not None
    assert (got.entries, got.others) == (6, 1)
    assert got.bad == [(4, "not a journal JSON entry (Unterminated string starting at: column 52)")]
    store = _store()
    report = ingest_kernel_log(store, path)
    assert report.read_unit == "journal entry" and report.lines_read == 6
    assert report.ignored == {"other programs' journal entry": 1}
    assert report.bad_rows == got.bad
    assert _xids(store) == [
        (T0 + 1e-6, "GPU-509665ad", "xid", 119),
        (T0 + 3e-6, "GPU-509665ad", "xid", 79),  # the notice, one entry of three lines
        (T0 + 4e-6, "GPU-509665ad", "xid", 63),
    ]
    store.close()


def test_export_stream_with_a_multiline_message(tmp_path):
    us = T0 * 10**6
    path = tmp_path / "node7.export"
    path.write_bytes(export_entries([_entry(FALLEN, us), _entry(XID, us + 10)]))
    store = _store()
    report = ingest_kernel_log(store, path)
    assert report.rows_stored == 2 and not report.bad_rows
    assert _xids(store) == [
        (T0, "GPU-509665ad", "xid", 79),
        (T0 + 1e-5, "GPU-509665ad", "xid", 119),
    ]
    # cut off inside the length-prefixed message: what came before is read, the cut is named
    cut = export_entries([_entry(XID, us)]) + export_entries([_entry(FALLEN, us + 20)])[:-40]
    path.write_bytes(cut)
    got = kernel_lines(path)
    assert got is not None and len(got.lines) == 1
    assert got.bad == [(7, "export entry cut off in its field b'MESSAGE'")]
    store.close()


def test_a_journal_without_hosts_needs_host_and_one_without_times_is_bad_lines(tmp_path):
    path = tmp_path / "shipped.json"
    path.write_text(json.dumps({"MESSAGE": XID, "__REALTIME_TIMESTAMP": str(T0 * 10**6)}) + "\n")
    store = _store()
    with pytest.raises(InputError, match="names no host"):
        ingest_kernel_log(store, path)
    assert ingest_kernel_log(store, path, host="node7").rows_stored == 1
    path.write_text(json.dumps({"MESSAGE": XID, "_HOSTNAME": "node7"}) + "\n")
    report = ingest_kernel_log(store, path)
    assert report.rows_stored == 0 and report.bad_rows == [(1, "an Xid line without a time stamp")]
    assert len(_xids(store)) == 1  # nothing stored is lost
    store.close()


def test_a_journal_file_without_journalctl_says_how_to_export_it(tmp_path, monkeypatch):
    path = tmp_path / "system.journal"
    path.write_bytes(journal.JOURNAL_MAGIC + b"\0" * 100)
    monkeypatch.setattr(journal.shutil, "which", lambda name: None)
    with pytest.raises(InputError, match=r"needs journalctl .* -o json > FILE"):
        kernel_lines(path)
    (tmp_path / "nothing.d").mkdir()
    with pytest.raises(InputError, match="a directory with no journal file"):
        kernel_lines(tmp_path / "nothing.d")


def test_cli_says_entries_and_what_it_skipped(tmp_path):
    us = T0 * 10**6
    path = tmp_path / "node7.json"
    npd = _entry(f"found {XID}", us + 2, _TRANSPORT="stdout", SYSLOG_IDENTIFIER="npd")
    path.write_text("\n".join(json.dumps(e) for e in (_entry(XID, us), npd)) + "\n")
    store = tmp_path / "s.db"
    with SqliteStore(store) as s:
        s.write_events([Event(T0 - 60, H100, "gpu_recovered")])
    result = CliRunner().invoke(
        main, ["ingest", "--store", f"sqlite:///{store}", "--kernel-log", str(path)], env={}
    )
    assert result.exit_code == 0, result.output
    assert "stored 1 kernel-log event (1 Xid, 0 SXid, 0 unmatched Xid)" in result.output
    assert "skipped 1 other programs' journal entry (the kernel's own are read)" in result.output
    path.write_text(json.dumps(_entry("usb 1-1: new device", us)) + "\n")
    result = CliRunner().invoke(
        main, ["ingest", "--store", f"sqlite:///{store}", "--kernel-log", str(path)], env={}
    )
    assert "no NVRM Xid or SXid line in 1 journal entry" in result.output


def test_the_journal_collector_says_what_it_cannot_do(tmp_path, monkeypatch):
    from gpuwarden.collectors import open_collector
    from gpuwarden.errors import CollectorUnavailable, ConfigError

    with pytest.raises(ConfigError, match="unknown option tail; journal:// takes hostname="):
        open_collector("journal://?tail=1")
    with pytest.raises(CollectorUnavailable, match="is not a directory"):
        journal.JournalCollector(str(tmp_path / "nope"), gpus=[])
    monkeypatch.setattr(journal.shutil, "which", lambda name: None)
    with pytest.raises(CollectorUnavailable, match="journalctl .* is not installed"):
        journal.JournalCollector(gpus=[])


def test_a_journalctl_that_exits_is_said_and_started_again_after_the_last_entry(
    tmp_path, monkeypatch
):
    """The follower exits (the journal's folder unmounted, journalctl killed): its last
    entries are read, the exit is a problem naming its words, and the next collect starts it
    again after the last entry read. (A stand-in journalctl: the real one, following, does not
    exit by itself; tests/integration/test_journal_kernel_log.py follows a real journal.)"""
    import time

    entry = json.dumps(_entry(XID, T0 * 10**6) | {"__CURSOR": "s=1;i=7"})
    script = tmp_path / "journalctl"
    calls = tmp_path / "calls"
    script.write_text(
        f"#!/bin/sh\necho \"$@\" >> {calls}\necho '{entry}'\necho 'No journal files' >&2\nexit 1\n"
    )
    script.chmod(0o755)
    monkeypatch.setattr(journal.shutil, "which", lambda name: str(script))
    collector = journal.JournalCollector(str(tmp_path), hostname="node7", gpus=[H100])
    events, problems = [], []
    try:
        deadline = time.monotonic() + 20
        while not problems and time.monotonic() < deadline:
            batch = collector.collect()
            events += batch.events
            problems += batch.problems
            time.sleep(0.1)
        assert [(e.ts, e.code) for e in events] == [(T0, 119)]
        assert problems == [f"journal://{tmp_path}: journalctl exited (1): No journal files"]
        collector.collect()  # started again
        while len(calls.read_text().splitlines()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        collector.close()
    first, second = calls.read_text().splitlines()[:2]
    assert "--since=-24h" in first and "--after-cursor=s=1;i=7" in second
