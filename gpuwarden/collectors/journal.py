"""Kernel logs kept by systemd's journal, read as lines the kernel-log parser knows.

    kernel_lines("node7.json")        journalctl -o json (json-seq, json-pretty too)
    kernel_lines("node7.export")      journalctl -o export, systemd's binary-safe stream
    kernel_lines("system.journal")    the journal's own file, read through journalctl
    kernel_lines("/srv/n7/journal")   a journal directory copied from a node

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
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuwarden.collectors.base import iter_log_lines, read_log_bytes, read_log_text
from gpuwarden.errors import InputError

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


__all__ = [
    "JOURNAL_MAGIC",
    "JournalLines",
    "entry_lines",
    "export_entries",
    "journal_format",
    "kernel_lines",
]
