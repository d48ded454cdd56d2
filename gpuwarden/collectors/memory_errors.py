"""Per-address HBM error logs, read as ``memory_error`` events (``gpuwarden ingest
--memory-errors``).

The format is Calchas's (Wu et al., "Removing Obstacles before Breaking Through the Memory Wall:
A Close Look at HBM Errors in the Field", USENIX ATC '24), one error per line:

    Datacenter,Server,Name,Stack,SID,PcId,BankGroup,BankArray,Col,Row,Time,EccType
    Datacenter8,0.108.38.22,DSA3,0x3,0x0,0x1,0x2,0x1,0x54,0x3e2b,1650690000,UER

``Server`` + ``Name`` is one accelerator; ``Stack``, ``SID`` (stack id), ``PcId``
(pseudo-channel), ``BankGroup``, ``BankArray``, ``Row`` and ``Col`` locate the error in HBM
(hexadecimal, ``0x`` optional); ``Time`` is Unix seconds (or RFC 3339); ``EccType`` is ``CE``
(corrected), ``UER`` (uncorrectable, recoverable) or ``UEO`` (uncorrectable, other).

An accelerator becomes a gpuwarden GPU: hostname = Server, index = the number that ends its
Name (``DSA3`` -> 3; a name without one is filed at index -1, which ``Store.gpus()`` does not
list, and the load says so), uuid = ``ACC-`` + a UUID derived from Server and Name, so the same
accelerator gets the same uuid in every load. Each line is one event of kind ``memory_error``:
``code`` is the index of its type in ``ECC_TYPES`` and ``detail`` keeps the whole address
(``ecc=UER dc=Datacenter8 stack=0x3 sid=0x0 pc=0x1 bg=0x2 ba=0x1 row=0x3e2b col=0x54``);
``memory_error_frame`` reads them back as columns.

NVIDIA GPUs report no such addresses: only counts (volatile and aggregate SBE / DBE), remapped
rows and Xids 48, 63, 64, 94 and 95. docs/real-data.md says what carries over.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import uuid as uuidlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol
from urllib.parse import quote, unquote

import numpy as np
import pandas as pd

from gpuwarden.collectors.base import read_log_text
from gpuwarden.errors import InputError
from gpuwarden.telemetry import Event, GpuId
from gpuwarden.wording import plural

#: The event kind these are stored under.
KIND = "memory_error"
#: Error types, by ``Event.code``: corrected, uncorrectable recoverable, uncorrectable other.
ECC_TYPES: tuple[str, ...] = ("CE", "UER", "UEO")
UNCORRECTABLE = frozenset({"UER", "UEO"})
#: The address fields, as ``detail`` names them, and the file's columns they come from.
ADDRESS_COLUMNS: dict[str, str] = {
    "stack": "Stack",
    "sid": "SID",
    "pc": "PcId",
    "bg": "BankGroup",
    "ba": "BankArray",
    "row": "Row",
    "col": "Col",
}
#: The columns that locate a bank (an error's row and column are within it).
BANK_FIELDS: tuple[str, ...] = ("stack", "sid", "pc", "bg", "ba")
COLUMNS: tuple[str, ...] = (
    "Datacenter",
    "Server",
    "Name",
    *ADDRESS_COLUMNS.values(),
    "Time",
    "EccType",
)
MAX_BAD_ROWS = 1000
#: Namespace of the derived uuids (a fixed random UUID: the same accelerator, the same uuid).
_NAMESPACE = uuidlib.UUID("5b0f3f4e-55a1-4f63-9a52-6c2f0f2b7d1e")
_NUMBER_AT_END = re.compile(r"(\d+)$")


@dataclass(frozen=True)
class HbmError:
    """One HBM error: when, which accelerator, its type (``ECC_TYPES``), and where in HBM."""

    ts: float
    gpu: GpuId
    ecc: str
    stack: int
    sid: int
    pc: int
    bg: int
    ba: int
    row: int
    col: int
    datacenter: str = ""

    @property
    def uncorrectable(self) -> bool:
        return self.ecc in UNCORRECTABLE

    def to_event(self) -> Event:
        return Event(self.ts, self.gpu, KIND, ECC_TYPES.index(self.ecc), encode_detail(self))


def encode_detail(e: HbmError) -> str:
    """The event's ``detail``: ``ecc=CE dc=<datacenter, %-quoted> stack=0x0 ... col=0x58``."""
    address = " ".join(f"{k}={getattr(e, k):#x}" for k in ADDRESS_COLUMNS)
    return f"ecc={e.ecc} dc={quote(e.datacenter, safe='')} {address}"


def decode_detail(detail: str) -> dict[str, object]:
    """``encode_detail`` read back: ecc, datacenter, and each address field as an int."""
    parts = dict(p.split("=", 1) for p in detail.split() if "=" in p)
    out: dict[str, object] = {
        "ecc": parts.get("ecc", ""),
        "datacenter": unquote(parts.get("dc", "")),
    }
    for k in ADDRESS_COLUMNS:
        out[k] = int(parts[k], 16) if k in parts else -1
    return out


def accelerator_gpu(server: str, name: str) -> GpuId:
    """The GPU identity of a Calchas accelerator: hostname Server, index the number ending
    Name (-1 if it has none), uuid ``ACC-`` + UUID5 of Server and Name."""
    m = _NUMBER_AT_END.search(name)
    uuid = f"ACC-{uuidlib.uuid5(_NAMESPACE, f'{server}/{name}')}"
    return GpuId(server, int(m.group(1)) if m else -1, uuid)


@dataclass(frozen=True)
class MemoryErrorLog:
    """What one file held: the errors that read, and (line, reason) for those that did not
    (the first ``MAX_BAD_ROWS``; ``bad_rows_total`` counts them all). ``repeats``: lines
    identical to an earlier one (accelerator, time, type, address), kept once. ``notes``:
    things the user should know (ignored columns, accelerators without an index)."""

    errors: list[HbmError]
    bad_rows: list[tuple[int, str]] = field(default_factory=list)
    bad_rows_total: int = 0
    lines_read: int = 0
    repeats: int = 0
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Errors per type, in ``ECC_TYPES`` order."""
        return {t: sum(1 for e in self.errors if e.ecc == t) for t in ECC_TYPES}


def _time(text: str) -> float:
    try:
        ts = float(text)
    except ValueError:
        try:
            stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"Time {text!r} is neither Unix seconds nor RFC 3339") from None
        ts = (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    if not math.isfinite(ts):
        raise ValueError(f"Time {text!r} is not a finite time")
    if abs(ts) > 1e11:  # year 5138: milliseconds
        raise ValueError(f"Time {text!r} looks like milliseconds; expected Unix seconds")
    return ts


def _hex(column: str, text: str) -> int:
    try:
        value = int(text, 16)
    except ValueError:
        raise ValueError(f"{column} {text!r} is not a hexadecimal number") from None
    if value < 0:
        raise ValueError(f"{column} {text!r} is negative")
    return value


def _parse(cells: dict[str, str], gpus: dict[tuple[str, str], GpuId]) -> HbmError:
    problems = [f"missing {c}" for c in ("Server", "Name", "Time", "EccType") if not cells[c]]
    if problems:
        raise ValueError("; ".join(problems))
    ecc = cells["EccType"].upper()
    if ecc not in ECC_TYPES:
        raise ValueError(f"EccType {cells['EccType']!r} is not CE, UER or UEO")
    address = {k: _hex(c, cells[c]) for k, c in ADDRESS_COLUMNS.items()}
    key = (cells["Server"], cells["Name"])
    gpu = gpus.get(key)
    if gpu is None:
        gpu = gpus[key] = accelerator_gpu(*key)
    return HbmError(_time(cells["Time"]), gpu, ecc, datacenter=cells["Datacenter"], **address)


def _rows(text: str) -> Iterator[tuple[int, list[str]]]:
    reader = csv.reader(io.StringIO(text))
    for cells in reader:
        yield reader.line_num, cells


def read_calchas_csv(path: str | os.PathLike[str]) -> MemoryErrorLog:
    """Read a Calchas HBM error log (plain or gzip). Columns match by name, in any order and
    any case; all of ``COLUMNS`` are required (``Datacenter`` may be empty). A line that does
    not read is listed by its line number (the header is line 1) and skipped; a file without
    the columns raises ``InputError``."""
    rows = _rows(read_log_text(path))
    line, header = next(rows, (0, []))
    names = [h.strip().lower() for h in header]
    where = {c: names.index(c.lower()) for c in COLUMNS if c.lower() in names}
    missing = [c for c in COLUMNS if c not in where]
    if missing:
        raise InputError(
            f"{path}: not a Calchas HBM error log: missing {plural(len(missing), 'column')} {', '.join(missing)} "
            f"(found: {', '.join(header) or 'none'})"
        )
    notes = []
    extra = [h for h, n in zip(header, names, strict=True) if n not in {c.lower() for c in COLUMNS}]
    if extra:
        notes.append(f"ignored unknown {plural(len(extra), 'column')} {', '.join(extra)}")
    gpus: dict[tuple[str, str], GpuId] = {}
    errors: list[HbmError] = []
    bad: list[tuple[int, str]] = []
    bad_total = lines = repeats = 0
    seen: set[HbmError] = set()
    for line, cells in rows:
        if not any(c.strip() for c in cells):
            continue  # a blank line is no record
        lines += 1
        try:
            if len(cells) != len(header):
                raise ValueError(f"expected {len(header)} fields, got {len(cells)}")
            error = _parse({c: cells[i].strip() for c, i in where.items()}, gpus)
        except ValueError as exc:
            bad_total += 1
            if len(bad) < MAX_BAD_ROWS:
                bad.append((line, str(exc)))
            continue
        if error in seen:
            repeats += 1
            continue
        seen.add(error)
        errors.append(error)
    for (server, name), gpu in sorted(gpus.items()):
        if gpu.index < 0:
            notes.append(
                f"accelerator {name!r} of server {server!r} has no number in its name: "
                "filed at GPU index -1 (its events are kept; Store.gpus() does not list it)"
            )
    return MemoryErrorLog(errors, bad, bad_total, lines, repeats, notes)


class EventWriter(Protocol):
    """What loading needs of a store (``store.base.WritableStore.write_events``)."""

    def write_events(self, events: Iterable[Event]) -> int: ...


def ingest_memory_errors(
    store: EventWriter, path: str | os.PathLike[str], *, chunk: int = 100_000
) -> MemoryErrorLog:
    """Read ``path`` (``read_calchas_csv``) and store its errors as ``memory_error`` events,
    ``chunk`` at a time, each one transaction. Nothing is stored when the file cannot be read
    at all; bad lines are skipped and returned. Writing the same file again changes nothing."""
    log = read_calchas_csv(path)
    for start in range(0, len(log.errors), chunk):
        store.write_events(e.to_event() for e in log.errors[start : start + chunk])
    return log


#: Columns of ``memory_error_frame``.
FRAME_COLUMNS: tuple[str, ...] = (
    "ts",
    "hostname",
    "gpu",
    "uuid",
    "ecc",
    "uncorrectable",
    "datacenter",
    *ADDRESS_COLUMNS,
)


def memory_error_frame(events: pd.DataFrame) -> pd.DataFrame:
    """The ``memory_error`` events of a ``Store.read_events`` frame, one column per address
    field (ints), sorted by time; other kinds are left out."""
    ev = events[events["kind"] == KIND] if len(events) else events
    if not len(ev):
        return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in FRAME_COLUMNS})
    decoded = pd.DataFrame([decode_detail(str(d)) for d in ev["detail"]])
    out = pd.DataFrame(
        {
            "ts": ev["ts"].to_numpy(np.float64),
            "hostname": ev["hostname"].astype(str).to_numpy(),
            "gpu": ev["gpu"].to_numpy(np.int64),
            "uuid": ev["uuid"].astype(str).to_numpy(),
            "ecc": decoded["ecc"].astype(str).to_numpy(),
            "datacenter": decoded["datacenter"].astype(str).to_numpy(),
        }
    )
    out["uncorrectable"] = out["ecc"].isin(sorted(UNCORRECTABLE))
    for k in ADDRESS_COLUMNS:
        out[k] = decoded[k].to_numpy(np.int64)
    return out[list(FRAME_COLUMNS)].sort_values("ts", kind="stable").reset_index(drop=True)


def errors_frame(errors: Iterable[HbmError]) -> pd.DataFrame:
    """``HbmError`` records as the frame ``memory_error_frame`` returns (no store)."""
    rows = [
        (e.ts, e.gpu.hostname, e.gpu.index, e.gpu.uuid, e.ecc, e.uncorrectable, e.datacenter)
        + tuple(getattr(e, k) for k in ADDRESS_COLUMNS)
        for e in errors
    ]
    out = pd.DataFrame(rows, columns=list(FRAME_COLUMNS))
    out = out.astype({c: _dtype(c) for c in FRAME_COLUMNS})
    return out.sort_values("ts", kind="stable").reset_index(drop=True)


def _dtype(column: str) -> object:
    if column == "ts":
        return np.float64
    if column == "uncorrectable":
        return bool
    if column in ("gpu", *ADDRESS_COLUMNS):
        return np.int64
    return object


__all__ = [
    "ADDRESS_COLUMNS",
    "BANK_FIELDS",
    "COLUMNS",
    "ECC_TYPES",
    "FRAME_COLUMNS",
    "KIND",
    "UNCORRECTABLE",
    "EventWriter",
    "MemoryErrorLog",
    "HbmError",
    "accelerator_gpu",
    "decode_detail",
    "encode_detail",
    "errors_frame",
    "ingest_memory_errors",
    "memory_error_frame",
    "read_calchas_csv",
]


def by_ecc_type(events: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """The ``memory_error`` events of a ``Store.read_events`` frame per ECC type (CE, UER, UEO,
    as the detail's ``ecc=`` says): (errors, devices that logged them), in ``ECC_TYPES`` order."""
    mem = events[events["kind"] == KIND] if len(events) else events
    if not len(mem):
        return {}
    ecc = mem["detail"].str.extract(r"\becc=(\w+)", expand=False).fillna("?")
    out = {}
    for name in (*ECC_TYPES, *sorted(set(ecc) - set(ECC_TYPES))):
        sel = mem[ecc == name]
        if len(sel):
            out[name] = (len(sel), int(sel["uuid"].nunique()))
    return out
