"""Kernel logs kept by systemd's journal, read as lines the kernel-log parser knows.

    kernel_lines("node7.json")        journalctl -o json (json-seq, json-pretty too)
    kernel_lines("node7.export")      journalctl -o export, systemd's binary-safe stream
    kernel_lines("system.journal")    the journal's own file, read through journalctl
    kernel_lines("/srv/n7/journal")   a journal directory copied from a node
    open_collector("journal://")      this host's journal, followed (``JournalCollector``)

Most GPU nodes keep their kernel log in the journal, and fleets ship it as ``journalctl -o
json`` (Vector's and Fluent Bit's journald sources keep the same field names). Each entry
becomes one line per line of its ``MESSAGE``, stamped with its ``__REALTIME_TIMESTAMP`` (µs
since the epoch, UTC) and ``_HOSTNAME``, as ``journalctl -o short-iso-precise`` would print it,
so that the Xids, SXids and the driver's multi-line "fallen off the bus" notice read exactly as
from a text log.

Only the kernel's own entries count (``_TRANSPORT=kernel``, or ``SYSLOG_IDENTIFIER=kernel``
when the kernel log came through syslog): a program that echoes an NVRM line into the journal
(node-problem-detector, a health checker) would otherwise count each Xid twice. The others are
counted in ``JournalLines.others``. The JSON reader follows journalctl's encoding: a field that
is not valid UTF-8 is an array of byte values, a field met twice an array of values.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote

from gpuwarden.collectors.base import iter_log_lines, read_log_bytes, read_log_text, url_options
from gpuwarden.collectors.kmsg import LineEvents, host_gpus, nvml_gpus
from gpuwarden.errors import CollectorUnavailable, InputError
from gpuwarden.telemetry import Batch, Event, GpuId

#: The first bytes of a journal file (systemd's ``HEADER_SIGNATURE``).
JOURNAL_MAGIC = b"LPKSHHRH"
#: A journal file's names: active, archived, and set aside after an unclean shutdown.
_JOURNAL_SUFFIXES = (".journal", ".journal~")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EXPORT_FIELD = re.compile(rb"^[A-Z_][A-Z0-9_]*(=|\n)")
_JSON_GAP = re.compile(r"[\s\x1e]*")  # json-seq puts an RS before each entry
#: Text an entry must hold for it to be decoded at all (Xids, SXids, the driver's notices).
_WORTH = ("NVRM", "SXid")
#: An entry counted but not decoded (its line holds none of ``_WORTH``).
_UNREAD: dict[str, Any] = {}


@dataclass
class JournalLines:
    """The kernel's lines of a journal: (entry number, line) pairs, several for an entry
    whose message has several lines. ``entries``: entries read; ``others``: entries of other
    programs, skipped; ``bad``: (entry number, reason) of entries that did not read;
    ``unit``: what ``entries`` counts, in words."""

    lines: list[tuple[int, str]] = field(default_factory=list)
    entries: int = 0
    unit: str = "journal entry"
    others: int = 0
    bad: list[tuple[int, str]] = field(default_factory=list)


def journal_format(path: str | os.PathLike[str]) -> str | None:
    """ "file", "directory", "json" or "export" when ``path`` holds a journal in that form,
    None for anything else (a text log)."""
    p = Path(path)
    if p.is_dir():
        return "directory"
    try:
        with open(p, "rb") as fh:
            if fh.read(len(JOURNAL_MAGIC)) == JOURNAL_MAGIC:
                return "file"
    except OSError:
        return None  # the text reader says why
    try:
        head = read_log_bytes(path, limit=4096).lstrip(b"\xef\xbb\xbf")
    except InputError:
        return None  # the text reader says why
    start = head.lstrip(b" \t\r\n\x1e")
    if start.startswith(b"{"):
        return "json"
    if _EXPORT_FIELD.match(start) and (b"__REALTIME_TIMESTAMP=" in head or b"__CURSOR=" in head):
        return "export"
    return None


def kernel_lines(path: str | os.PathLike[str]) -> JournalLines | None:
    """The kernel's lines of the journal at ``path`` (``journal_format``), None when ``path``
    is not a journal. ``InputError`` when a journal file or directory cannot be read."""
    kind = journal_format(path)
    if kind is None:
        return None
    out = JournalLines()
    if kind in ("file", "directory"):
        records: Iterable[tuple[int, dict[str, Any] | None, str]] = _journalctl(path, kind)
    elif kind == "json":
        records = _json_records(path)
    else:
        records = _export_records(read_log_bytes(path))
    for n, entry, problem in records:
        out.entries += 1
        if entry is None:
            out.bad.append((n, problem))
            continue
        if entry is _UNREAD:
            continue
        if not _kernels(entry):
            out.others += 1
            continue
        try:
            out.lines.extend((n, line) for line in entry_lines(entry))
        except ValueError as exc:
            out.bad.append((n, str(exc)))
    return out


def entry_lines(entry: dict[str, Any]) -> list[str]:
    """One entry's message as text-log lines: ``STAMP HOST kernel: TEXT`` per line of it, the
    stamp ISO 8601 in UTC to the microsecond; no stamp when the entry has no
    ``__REALTIME_TIMESTAMP``, no host when it has no ``_HOSTNAME``. ``ValueError`` for a time
    that is not a count of microseconds."""
    message = _text(entry.get("MESSAGE"))
    stamp = _text(entry.get("__REALTIME_TIMESTAMP"))
    host = _text(entry.get("_HOSTNAME")).strip()
    prefix = ""
    if stamp:
        if not stamp.strip().isdigit():
            raise ValueError(f"__REALTIME_TIMESTAMP {stamp!r} is not microseconds since 1970")
        when = _EPOCH + timedelta(microseconds=int(stamp))
        prefix = when.isoformat(timespec="microseconds") + (f" {host} kernel: " if host else " ")
    return [prefix + part for part in message.split("\n") if part.strip()]


def _text(value: Any) -> str:
    """A field as journalctl's JSON gives it: a string, bytes as an array of numbers, null
    for a field it left out, or an array of those for a field met more than once (the first
    is kept)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return bytes(v & 0xFF for v in value).decode("utf-8", errors="replace")
    if isinstance(value, list) and value:
        return _text(value[0])
    return str(value) if isinstance(value, int | float) else ""


def _kernels(entry: dict[str, Any]) -> bool:
    """Whether an entry is the kernel's own: its transport, else its syslog identifier; an
    entry that names neither (a shipper that kept only the message) is taken as the kernel's."""
    transport = _text(entry.get("_TRANSPORT"))
    ident = _text(entry.get("SYSLOG_IDENTIFIER"))
    if transport:
        return transport == "kernel" or (transport == "syslog" and ident == "kernel")
    return ident in ("", "kernel")


def _json_records(
    path: str | os.PathLike[str],
) -> Iterator[tuple[int, dict[str, Any] | None, str]]:
    """(line number, entry or None, problem) per JSON entry: one a line (``-o json``,
    ``json-seq``: read as they come, a file larger than memory is fine), or spread over lines
    (``json-pretty``). A line that holds none of ``_WORTH`` is counted without being
    decoded."""
    first = True
    for n, line in enumerate(iter_log_lines(path), 1):
        line = line.strip().lstrip("\x1e")
        if not line:
            continue
        if first and line == "{":  # json-pretty
            yield from _json_stream(read_log_text(path))
            return
        first = False
        if not any(w in line for w in _WORTH):
            yield n, _UNREAD, ""
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            yield n, None, f"not a journal JSON entry ({exc.msg}: column {exc.colno})"
            continue
        if not isinstance(entry, dict):
            yield n, None, "not a journal JSON entry (not an object)"
            continue
        yield n, entry, ""


def _json_stream(text: str) -> Iterator[tuple[int, dict[str, Any] | None, str]]:
    decoder = json.JSONDecoder()
    pos, line = 0, 1
    while True:
        gap = _JSON_GAP.match(text, pos)
        assert gap is not None
        line += text.count("\n", pos, gap.end())
        pos = gap.end()
        if pos >= len(text):
            return
        try:
            entry, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            yield line, None, f"not a journal JSON entry ({exc.msg})"
            return  # no way to find the next entry of a pretty-printed stream
        if isinstance(entry, dict):
            yield line, entry, ""
        else:
            yield line, None, "not a journal JSON entry (not an object)"
        line += text.count("\n", pos, end)
        pos = end


def _export_records(data: bytes) -> Iterator[tuple[int, dict[str, Any] | None, str]]:
    """Entries of systemd's journal export format: ``FIELD=value`` lines, or ``FIELD``, a
    64-bit little-endian length and that many bytes for a value that may hold newlines; an
    empty line ends an entry. Numbered by the line each entry starts on."""
    pos, line, start = 0, 1, 1
    entry: dict[str, Any] = {}
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            nl = len(data)
        if nl == pos:  # the empty line after an entry
            if entry:
                yield start, entry, ""
            entry, pos, line = {}, pos + 1, line + 1
            start = line
            continue
        text = data[pos:nl]
        name, eq, value = text.partition(b"=")
        if eq:
            entry.setdefault(name.decode("ascii", errors="replace"), value)
            pos, line = nl + 1, line + 1
            continue
        size_at = nl + 1
        if size_at + 8 > len(data):
            yield start, None, f"export entry cut off in its field {text[:40]!r}"
            return
        size = int.from_bytes(data[size_at : size_at + 8], "little")
        value = data[size_at + 8 : size_at + 8 + size]
        end = size_at + 8 + size
        if len(value) < size or data[end : end + 1] not in (b"\n", b""):
            yield start, None, f"export entry cut off in its field {text[:40]!r}"
            return
        entry.setdefault(name.decode("ascii", errors="replace"), value)
        line += 1 + value.count(b"\n") + 1
        pos = end + 1
    if entry:
        yield start, entry, ""


def export_entries(entries: Iterable[dict[str, str]]) -> bytes:
    """Entries in systemd's journal export format, as ``systemd-journal-remote`` takes them
    (``systemd-journal-remote --output=F.journal -``): the inverse of the export reader, a
    value holding a newline length-prefixed."""
    out = bytearray()
    for entry in entries:
        for name, value in entry.items():
            data = value.encode()
            if b"\n" in data:
                out += name.encode() + b"\n" + len(data).to_bytes(8, "little") + data + b"\n"
            else:
                out += name.encode() + b"=" + data + b"\n"
        out += b"\n"
    return bytes(out)


def _journal_files(directory: Path) -> list[Path]:
    """The journal files under a directory, machine-id folders and all (``journalctl
    --directory`` reads only the top, and ``/var/log/journal`` keeps them a level down)."""
    return sorted(p for p in directory.rglob("*.journal*") if p.name.endswith(_JOURNAL_SUFFIXES))


def _journalctl(
    path: str | os.PathLike[str], kind: str
) -> Iterator[tuple[int, dict[str, Any] | None, str]]:
    """The kernel's entries of a journal file or directory, read by journalctl (its own
    matches pick them, so a journal of every service is not decoded here)."""
    files = [Path(path)] if kind == "file" else _journal_files(Path(path))
    if not files:
        raise InputError(f"{path}: a directory with no journal file (*.journal) in it")
    binary = shutil.which("journalctl")
    if binary is None:
        raise InputError(
            f"{path}: a systemd journal {kind}; reading it needs journalctl (systemd) here, "
            f"or run `journalctl --{kind}={path} -o json > FILE` where it is and load FILE"
        )
    argv = [binary, *(f"--file={f}" for f in files), "-o", "json", "--all", "--no-pager", "-q"]
    argv += ["_TRANSPORT=kernel", "+", "SYSLOG_IDENTIFIER=kernel"]
    with (
        tempfile.TemporaryFile("w+", errors="replace") as said,
        subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=said, text=True, errors="replace"
        ) as proc,
    ):
        assert proc.stdout is not None
        for n, line in enumerate(proc.stdout, 1):
            try:
                yield n, json.loads(line), ""
            except json.JSONDecodeError as exc:
                yield n, None, f"journalctl printed an entry that does not read ({exc.msg})"
        rc = proc.wait()
        said.seek(0)
        err = said.read().strip()[-500:]
    if rc != 0:
        raise InputError(f"{path}: journalctl could not read the journal {kind}: {err or rc}")


# -- the live collector -------------------------------------------------------------------

#: How far back a collector with no cursor file reads when it starts.
DEFAULT_SINCE = "-24h"
#: journalctl's matches for the kernel's own entries (two terms ORed with "+").
_KERNEL_MATCHES = ["_TRANSPORT=kernel", "+", "SYSLOG_IDENTIFIER=kernel"]
_CURSOR = re.compile(rb'"__CURSOR"\s*:\s*"([^"]+)"')


class JournalCollector:
    """Xid and SXid events from this node's systemd journal, followed as it grows: what a
    node agent or a DaemonSet that mounts the host's ``/var/log/journal`` read-only reads
    where ``/dev/kmsg`` is out of reach (the way node-problem-detector's kernel monitor reads
    the journal).

    ``journalctl --follow -o json`` runs beside the collector (over ``directory``, or the
    host's own journal when None), matched to the kernel's entries; each ``collect()`` reads
    what it printed since the last one without waiting, as ``kernel_lines`` reads a journal
    file. Every event belongs to ``hostname`` (the node whose journal it is; by default this
    machine's name: in a pod give the node's), its GPUs matched by PCI address as
    ``kmsg://``'s are (``gpus``, by default asked of NVML once). ``cursor_file``: the cursor
    of the last entry read is kept there, so a restart goes on after it, neither losing nor
    repeating one; without it, a start reads ``since`` back (the store keeps an event already
    stored once). A journalctl that exits is said in problems and started again, after the
    last entry read, at the next ``collect()``."""

    def __init__(
        self,
        directory: str | None = None,
        *,
        hostname: str | None = None,
        gpus: Iterable[GpuId] | None = None,
        since: str = DEFAULT_SINCE,
        cursor_file: str | None = None,
        clock: Callable[[], float] = time.time,
        url: str | None = None,
        nvml: Callable[[str], list[GpuId]] = nvml_gpus,
    ) -> None:
        self.directory = directory
        self.url = url or (f"journal://{directory}" if directory else "journal://")
        self.hostname = hostname or socket.gethostname()
        self.since = since
        self.cursor_file = cursor_file
        self.clock = clock
        self._notes: list[str] = []
        self._binary = shutil.which("journalctl")
        if self._binary is None:
            raise CollectorUnavailable(f"{self.url}: journalctl (systemd) is not installed")
        if directory is not None and not Path(directory).is_dir():
            raise CollectorUnavailable(f"{self.url}: {directory} is not a directory")
        self.gpus = host_gpus(self.hostname, gpus, nvml, self._notes)
        # the journal is this node's: its events are hostname's, whatever _HOSTNAME says
        self._lines = LineEvents(self.hostname, self.gpus, self.url, line_host=False)
        self._cursor = ""  # of the last entry read
        self._proc: subprocess.Popen[bytes] | None = None
        self._said: IO[bytes] | None = None  # the file journalctl's stderr goes to
        self._partial = b""
        self._start()

    @classmethod
    def from_url(cls, url: str) -> JournalCollector:
        """``journal://`` (this host's journal) or ``journal:///var/log/journal`` (a journal
        directory, e.g. the host's mounted into a pod); options ``hostname=``, ``since=``
        (journalctl's ``--since``: ``-24h`` by default, ``now``, a date), ``cursor_file=``."""
        parts, params = url_options(url, ("hostname", "since", "cursor_file"))
        return cls(
            unquote(parts.netloc + parts.path) or None,
            hostname=params.get("hostname") or None,
            since=params.get("since") or DEFAULT_SINCE,
            cursor_file=params.get("cursor_file") or None,
            url=url,
        )

    def _start(self) -> None:
        assert self._binary is not None
        argv = [self._binary, "--follow", "-o", "json", "--all", "--no-pager", "-q"]
        argv += [f"--directory={self.directory}"] if self.directory else []
        cursor = self._cursor or self._saved_cursor()
        argv += [f"--after-cursor={cursor}"] if cursor else [f"--since={self.since}"]
        self._said = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [*argv, *_KERNEL_MATCHES], stdout=subprocess.PIPE, stderr=self._said
        )
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)
        self._partial = b""

    def _saved_cursor(self) -> str:
        if self.cursor_file is None:
            return ""
        try:
            return Path(self.cursor_file).read_text().strip()
        except OSError:
            return ""

    def _keep_place(self, lines: list[bytes], problems: list[str]) -> None:
        """Note the cursor of the last entry read (and write it to ``cursor_file``): where a
        restart goes on. Kept here, not by journalctl's own ``--cursor-file``, which a
        follower stopped by a signal does not write (systemd 252)."""
        for raw in reversed(lines):
            if (m := _CURSOR.search(raw)) is not None:
                self._cursor = m.group(1).decode(errors="replace")
                break
        else:
            return
        if self.cursor_file is None:
            return
        try:
            tmp = Path(f"{self.cursor_file}.tmp")
            tmp.write_text(self._cursor + "\n")
            tmp.replace(self.cursor_file)
        except OSError as exc:
            problems.append(f"{self.url}: cannot write the cursor to {self.cursor_file}: {exc}")

    def _read(self, problems: list[str]) -> list[bytes]:
        proc = self._proc
        if proc is None or proc.stdout is None:
            self._start()
            return []
        chunks = []
        while True:
            try:
                chunk = os.read(proc.stdout.fileno(), 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        data = self._partial + b"".join(chunks)
        *lines, self._partial = data.split(b"\n")
        if proc.poll() is not None:  # exited: say why, and start again next time
            assert self._said is not None
            self._said.seek(0)
            err = self._said.read().decode(errors="replace").strip()[-300:]
            problems.append(f"{self.url}: journalctl exited ({proc.returncode}): {err or '-'}")
            self._stop()
        return lines

    def collect(self) -> Batch:
        now = self.clock()
        problems, self._notes = list(self._notes), []
        events: list[Event] = []
        read = self._read(problems)
        self._keep_place(read, problems)
        for raw in read:
            if not raw.strip() or not any(w.encode() in raw for w in _WORTH):
                continue
            try:
                entry = json.loads(raw)
                kernel = isinstance(entry, dict) and _kernels(entry)  # as kernel_lines reads
                lines = entry_lines(entry) if kernel else []
            except ValueError as exc:  # JSONDecodeError, or a stamp that does not read
                problems.append(f"{self.url}: an entry that does not read: {exc}")
                continue
            events += [e for x in lines if (e := self._lines.feed(x, now, problems)) is not None]
        problems += self._lines.unmatched()
        return Batch(now, events=tuple(events), problems=tuple(problems))

    def _stop(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait(timeout=5)
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None
        if self._said is not None:
            self._said.close()
            self._said = None

    def close(self) -> None:
        self._stop()


__all__ = [
    "DEFAULT_SINCE",
    "JOURNAL_MAGIC",
    "JournalCollector",
    "JournalLines",
    "entry_lines",
    "export_entries",
    "journal_format",
    "kernel_lines",
]
