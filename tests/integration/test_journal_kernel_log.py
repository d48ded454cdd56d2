"""Real kernel logs (tests/data/kmsg/real/) put into a systemd journal by systemd's own
``systemd-journal-remote``, then read back every way a fleet keeps them: the journal file, a
``/var/log/journal``-like directory, and ``journalctl``'s json, json-seq, json-pretty, export and
short-iso-precise printouts (gzip too). Each gives the events the text logs give, and an Xid
echoed by another program is not counted twice."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alerting_daemons import require_binary  # this folder's conftest, by path

from gpuwarden.collectors.journal import export_entries
from gpuwarden.ingest import ingest_kernel_log
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Event, GpuId

pytestmark = pytest.mark.integration

REAL = Path(__file__).parent.parent / "data" / "kmsg" / "real"
#: The boot of the logs stamped in seconds since boot.
BOOT = 1_735_689_600.0  # 2025-01-01T00:00:00Z
HOST = "node7"
#: Logs whose lines carry a time (or seconds since boot), with the forms they are written in.
LOGS = [
    "dmesg_T_xid119_gsp_timeout_h100.log",
    "dmesg_ctime_xid13_109.log",
    "dmesg_decode_iso_xid13_43_unknown_pid.log",
    "dmesg_xid79_sxid20034_nvswitch.log",
    "dmesg_fallen_off_bus_no_xid_r570.log",
    "dmesg_2015_xid32_31_no_pid.log",
]
H100 = GpuId(HOST, 4, "GPU-509665ad-b600-ac93-3616-d754b23d636d", "00000000:9B:00.0", "H100")
_CTIME = re.compile(r"^\[(?P<t>[A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ [\d:]{8} \d{4})\] (?P<m>.*)$")
_UPTIME = re.compile(r"^\[\s*(?P<t>\d+\.\d+)\] (?P<m>.*)$")
_DECODE = re.compile(r"^kern\s*:\s*\w+\s*: (?P<t>\S+) (?P<m>.*)$")


def _us(line: str) -> tuple[int, str] | None:
    """(µs since the epoch, message) of a dmesg line as the kernel stamped it; None for a
    continuation line."""
    if m := _CTIME.match(line):
        when = datetime.strptime(m["t"].replace("  ", " "), "%a %b %d %H:%M:%S %Y")
        return int(when.replace(tzinfo=UTC).timestamp()) * 10**6, m["m"]
    if m := _DECODE.match(line):
        when = datetime.fromisoformat(m["t"].replace(",", "."))
        return round(when.timestamp() * 1e6), m["m"]
    if m := _UPTIME.match(line):
        return round((BOOT + float(m["t"])) * 1e6), m["m"]
    return None


def _entries() -> list[dict[str, str]]:
    """The logs' records as journald keeps the kernel's: a record with continuation lines is
    one entry whose message has several lines."""
    out: list[dict[str, str]] = []
    for name in LOGS:
        for line in (REAL / name).read_text().splitlines():
            got = _us(line)
            if got is None:
                out[-1]["MESSAGE"] += "\n" + line.strip()
                continue
            us, message = got
            out.append(
                {
                    "__REALTIME_TIMESTAMP": str(us),
                    "__MONOTONIC_TIMESTAMP": "1",
                    "_BOOT_ID": "0123456789abcdef0123456789abcdef",
                    "_HOSTNAME": HOST,
                    "_TRANSPORT": "kernel",
                    "SYSLOG_IDENTIFIER": "kernel",
                    "PRIORITY": "4",
                    "MESSAGE": message,
                }
            )
    first = out[0]
    # a health checker that logs each Xid line it sees: kept by the journal, not a second Xid;
    # and a program that logs under the kernel's name (journalctl's match lets it through)
    echo = {**first, "_TRANSPORT": "stdout", "SYSLOG_IDENTIFIER": "node-problem-detector"}
    spoof = {**first, "_TRANSPORT": "stdout"}
    return [*out, {**echo, "MESSAGE": "caught: " + first["MESSAGE"]}, spoof]


@pytest.fixture(scope="module")
def journal(tmp_path_factory) -> Path:
    """A journal file written by systemd-journal-remote, in a machine-id folder."""
    remote = require_binary(
        "systemd-journal-remote", package="systemd-journal-remote", also_in="/lib/systemd"
    )
    root = tmp_path_factory.mktemp("journal")
    folder = root / "var-log-journal" / "0123456789abcdef0123456789abcdef"
    folder.mkdir(parents=True)
    path = folder / "system.journal"
    subprocess.run(
        [remote, f"--output={path}", "-"], input=export_entries(_entries()), check=True, timeout=60
    )
    return path


def _store() -> SqliteStore:
    store = SqliteStore()
    store.write_events([Event(BOOT, H100, "gpu_recovered")])
    return store


def _events(store: SqliteStore) -> list[tuple]:
    events = store.read_events(kinds=["xid", "sxid", "xid_unmatched"])
    rows = events[["ts", "uuid", "kind", "code", "detail"]].itertuples(index=False, name=None)
    return [(round(ts, 6), *rest) for ts, *rest in rows]


@pytest.fixture(scope="module")
def from_text() -> list[tuple]:
    store = _store()
    for name in LOGS:
        ingest_kernel_log(store, REAL / name, host=HOST, boot_time=BOOT)
    events = _events(store)
    store.close()
    # the logs' Xids and SXids, and the r570 notice's Xid 79 without a line of its own
    assert {(kind, code) for _, _, kind, code, _ in events} >= {
        ("xid", 119), ("xid_unmatched", 13), ("xid_unmatched", 43), ("xid_unmatched", 79),
        ("sxid", 20034), ("xid_unmatched", 32), ("xid_unmatched", 31),
    }  # fmt: skip
    assert any("the driver's notice" in detail for *_, detail in events)
    return events


def _journalctl(journal: Path, form: str) -> bytes:
    binary = require_binary("journalctl", package="systemd")
    argv = [binary, f"--file={journal}", "-o", form, "--all", "--no-pager"]
    return subprocess.run(
        argv, capture_output=True, check=True, timeout=60, env={**os.environ, "TZ": "UTC"}
    ).stdout


def test_the_journal_file_and_its_folder_read_as_the_text_logs(journal, from_text):
    for path in (journal, journal.parent.parent):
        store = _store()
        report = ingest_kernel_log(store, path)  # no --host: the journal names it
        assert _events(store) == from_text, path
        assert report.read_unit == "journal entry" and not report.bad_rows_total
        # journalctl's match leaves out the echo; the one under the kernel's name is skipped here
        assert report.ignored == {"other programs' journal entry": 1}
        store.close()


@pytest.mark.parametrize("form", ["json", "json-seq", "json-pretty", "export", "short-iso-precise"])
def test_each_printout_reads_as_the_text_logs(journal, from_text, form, tmp_path):
    printed = _journalctl(journal, form)
    for path, data in ((tmp_path / f"k.{form}", printed), (tmp_path / f"k.{form}.gz", None)):
        path.write_bytes(gzip.compress(printed) if data is None else data)
        store = _store()
        report = ingest_kernel_log(store, path)
        assert _events(store) == from_text, path.name
        assert not report.bad_rows_total
        if form != "short-iso-precise":  # a text printout cannot tell the echo apart
            assert report.ignored == {"other programs' journal entry": 2}
        store.close()


def _append(remote: str, path: Path, entries: list[dict[str, str]]) -> None:
    subprocess.run(
        [remote, f"--output={path}", "-"], input=export_entries(entries), check=True, timeout=60
    )


def _collect_until(collector, n: int, timeout: float = 15.0) -> list:
    """Events the collector gives until it has ``n`` (journalctl prints as it notices)."""
    import time

    events, problems = [], []
    deadline = time.monotonic() + timeout
    while len(events) < n and time.monotonic() < deadline:
        batch = collector.collect()
        events += batch.events
        problems += [p for p in batch.problems if "NVML" not in p]
        time.sleep(0.2)
    assert not problems, problems
    return events


def _kernel(message: str, us: int) -> dict[str, str]:
    return {
        "__REALTIME_TIMESTAMP": str(us), "__MONOTONIC_TIMESTAMP": "1",
        "_BOOT_ID": "0123456789abcdef0123456789abcdef", "_HOSTNAME": HOST,
        "_TRANSPORT": "kernel", "SYSLOG_IDENTIFIER": "kernel", "MESSAGE": message,
    }  # fmt: skip


def test_the_journal_collector_follows_a_growing_journal(tmp_path):
    """``journal:///DIR``: the entries there when it starts, then each appended as the journal
    grows (the host's /var/log/journal mounted into a pod), an echo from another program never
    counted; with a cursor file a restart goes on after the last entry, repeating none."""
    from gpuwarden.collectors import open_collector

    remote = require_binary(
        "systemd-journal-remote", package="systemd-journal-remote", also_in="/lib/systemd"
    )
    require_binary("journalctl", package="systemd")
    folder = tmp_path / "journal" / "0123456789abcdef0123456789abcdef"
    folder.mkdir(parents=True)
    path = folder / "system.journal"
    us = round(BOOT * 1e6)
    xid = "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s"
    _append(remote, path, [_kernel(xid, us)])
    cursor = tmp_path / "cursor"
    url = f"journal://{tmp_path / 'journal'}?hostname={HOST}&since=2024-01-01&cursor_file={cursor}"
    collector = open_collector(url)
    collector.gpus.add(H100)
    try:
        (first,) = _collect_until(collector, 1)
        assert (first.ts, first.gpu.uuid, first.code) == (BOOT, H100.uuid, 119)
        fallen = "\n".join(
            ["NVRM: The NVIDIA GPU 0000:9b:00.0", "NVRM: (PCI ID: 10de:2330) installed in this system has",
             "NVRM: fallen off the bus and is not responding to commands."]
        )  # fmt: skip
        echo = {**_kernel("caught: " + xid, us + 2), "_TRANSPORT": "stdout",
                "SYSLOG_IDENTIFIER": "node-problem-detector"}  # fmt: skip
        spoof = {**_kernel(xid, us + 3), "_TRANSPORT": "stdout"}  # "kernel", but not the kernel
        _append(remote, path, [_kernel(fallen, us + 1_000_000), echo, spoof])
        (second,) = _collect_until(collector, 1)
        assert (second.ts, second.code, second.kind) == (BOOT + 1, 79, "xid")
    finally:
        collector.close()
    assert cursor.is_file()  # journalctl kept its place
    _append(remote, path, [_kernel(xid.replace("119", "48"), us + 2_000_000)])
    again = open_collector(url)
    again.gpus.add(H100)
    try:
        got = _collect_until(again, 1)
        assert [(e.ts, e.code) for e in got] == [(BOOT + 2, 48)]  # nothing read twice
    finally:
        again.close()
