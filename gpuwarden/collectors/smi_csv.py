"""Reading nvidia-smi's own CSV: what people keep as history.

    nvidia-smi --query-gpu=timestamp,index,uuid,name,pci.bus_id,temperature.gpu,... \\
        --format=csv -l 60 > log.csv

``read_query_csv(text, hostname=...)`` reads ``--format=csv`` output (a header row; with or
without ``nounits``) into a screened ``Batch``:

- each header (``power.draw [W]`` -> ``power.draw``) is matched to a catalogue field by its
  ``Field.smi`` name, or by the name nvidia-smi prints for an alias we ask by
  (``clocks.current.sm`` for ``clocks.sm``, ``clocks_throttle_reasons.active`` before r535);
  other columns are ignored;
- values lose their unit (``72.35 W`` -> 72.35, ``81559 MiB``, ``1980 MHz``, ``45 %``);
  ``[N/A]``, ``N/A``, ``[Not Supported]``, ``[Unknown Error]`` are absent (``smi.parse_cell``);
  ``Yes``/``Enabled`` read 1, ``No``/``Disabled`` 0;
- the GPU is ``uuid``, ``index`` (without that column: the order the GPUs first appear in the
  file), ``name`` and ``pci.bus_id``; the sample time is ``timestamp``
  (``2026/07/14 08:12:53.353``, the host's local time, taken in ``tz``, UTC unless told);
- ``driver_version`` becomes a ``NodeInfo`` in ``Batch.nodes`` (the last one read).

A row that does not read (wrong number of cells, no time, a catalogue cell that is neither a
number nor a known marker) is left out and named in ``bad_rows`` with its line number (the
header is line 1); ``Batch.problems`` says the same as ``"line N: reason"``. Impossible
readings are screened (``readings.screen``). A repeated header line (two logs concatenated)
is skipped.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo

from gpuwarden.collectors.smi_cells import normalise_bus_id, parse_cell
from gpuwarden.errors import InputError
from gpuwarden.readings import MAX_GPU_INDEX, gpu_index, is_time, screen, time_problem
from gpuwarden.telemetry import FIELDS, Batch, GpuId, NodeInfo, Sample

#: nvidia-smi header name -> our field. The header shows the canonical name of an alias.
HEADER_FIELDS: dict[str, str] = {f.smi: f.name for f in FIELDS if f.smi} | {
    "clocks.current.sm": "sm_clock_mhz",
    "clocks.current.memory": "mem_clock_mhz",
    "clocks_throttle_reasons.active": "clock_event_reasons",
    "retired_pages.sbe": "retired_pages_sbe",
    "retired_pages.dbe": "retired_pages_dbe",
}
_IDENTITY = ("timestamp", "index", "uuid", "name", "pci.bus_id", "driver_version")
_HEADER_UNIT = re.compile(r"^(?P<name>.*?)\s*\[(?P<unit>[^\]]*)\]$")
_WITH_UNIT = re.compile(r"^(?P<num>[-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*(?P<unit>[A-Za-z%/]+)$")
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


@dataclass(frozen=True)
class QueryCsv:
    """What a query CSV gave: the screened batch, and the rows left out as (line, reason)."""

    batch: Batch
    bad_rows: list[tuple[int, str]] = field(default_factory=list)
    rows_read: int = 0


def split_header(cell: str) -> tuple[str, str]:
    """``power.draw [W]`` -> (``power.draw``, ``W``); ``temperature.gpu`` -> (it, "")."""
    text = cell.strip()
    match = _HEADER_UNIT.match(text)
    return (match["name"].strip(), match["unit"].strip()) if match else (text, "")


def value(cell: str, unit: str = "") -> float | None:
    """One cell with or without its unit (``72.35 W``) as a number; None when missing.

    Raises ValueError for text that is neither."""
    text = cell.strip()
    match = _WITH_UNIT.match(text)
    if match is not None and (not unit or match["unit"] == unit):
        text = match["num"]
    return parse_cell(text)


def parse_timestamp(cell: str, tz: tzinfo = UTC) -> float:
    """nvidia-smi's ``2026/07/14 08:12:53.353`` (local time, read in ``tz``) -> Unix seconds."""
    text = cell.strip()
    for fmt in _TIME_FORMATS:
        try:
            stamp = datetime.strptime(text, fmt)
        except ValueError:
            continue
        return stamp.replace(tzinfo=tz).timestamp()
    raise ValueError(f"timestamp {text!r} is not nvidia-smi's YYYY/MM/DD HH:MM:SS.mmm")


def read_query_csv_rows(text: str, *, hostname: str, tz: tzinfo = UTC) -> QueryCsv:
    """``read_query_csv`` with the bad rows as (line, reason) pairs (ingest's report).

    Raises ``InputError`` when the text has no header row naming ``timestamp``."""
    lines = text.splitlines()
    header_at = next((n for n, line in enumerate(lines) if line.strip()), None)
    if header_at is None:
        raise InputError("no nvidia-smi CSV: the text is empty")
    header_line = lines[header_at]
    names = [split_header(c) for c in next(csv.reader([header_line], skipinitialspace=True))]
    where = {name: i for i, (name, _) in enumerate(names)}
    if "timestamp" not in where:
        raise InputError(
            "not nvidia-smi --format=csv output with a header naming timestamp (first line "
            f"{header_line.strip()[:80]!r}); ask nvidia-smi for timestamp and leave out noheader"
        )
    columns = [(i, HEADER_FIELDS[name], unit) for i, (name, unit) in enumerate(names)
               if name in HEADER_FIELDS]  # fmt: skip
    samples: list[Sample] = []
    bad: list[tuple[int, str]] = []
    order: dict[str, int] = {}  # GPU (uuid, else bus id) -> index, when there is no index column
    node: NodeInfo | None = None
    rows = 0
    for n in range(header_at + 1, len(lines)):
        line = lines[n]
        if not line.strip() or line == header_line:
            continue
        rows += 1
        cells = next(csv.reader([line], skipinitialspace=True))
        if len(cells) != len(names):
            bad.append((n + 1, f"{len(cells)} cells, the header has {len(names)}"))
            continue
        try:
            ts = parse_timestamp(cells[where["timestamp"]], tz)
        except ValueError as exc:
            bad.append((n + 1, str(exc)))
            continue
        if not is_time(ts):
            bad.append(
                (n + 1, f"timestamp {cells[where['timestamp']].strip()!r} {time_problem(ts)}")
            )
            continue
        got = {k: cells[i].strip() for k, i in where.items() if k in _IDENTITY}
        bus_text = got.get("pci.bus_id", "")
        try:
            bus = normalise_bus_id(bus_text) if bus_text and "[" not in bus_text else ""
        except ValueError:
            bad.append((n + 1, f"pci.bus_id {bus_text!r} is not a PCI address"))
            continue
        uuid = got.get("uuid", "")
        uuid = uuid if uuid.startswith(("GPU-", "MIG-")) else ""
        index_text = got.get("index")
        if index_text is not None:
            read = gpu_index(index_text)
            if read is None:
                bad.append((n + 1, f"index {index_text!r} is not a GPU index (0..{MAX_GPU_INDEX})"))
                continue
            index = read
        else:
            index = order.setdefault(uuid or bus or "", len(order))
        model = got.get("name", "")
        gpu = GpuId(hostname, index, uuid, bus, "" if model.startswith("[") else model)
        values: dict[str, float] = {}
        problem = ""
        for i, name, unit in columns:
            try:
                v = value(cells[i], unit)
            except ValueError:
                problem = f"{names[i][0]} {cells[i].strip()!r} is not a number"
                break
            if v is not None:
                values[name] = v
        if problem:
            bad.append((n + 1, problem))
            continue
        driver = got.get("driver_version", "")
        if driver and not driver.startswith("["):
            node = NodeInfo(ts, hostname, driver_version=driver)
        if values:
            samples.append(Sample(ts, gpu, values))
    batch = Batch(
        ts=max((s.ts for s in samples), default=0.0),
        samples=tuple(samples),
        problems=tuple(f"line {n}: {why}" for n, why in bad),
        nodes=(node,) if node is not None else (),
    )
    return QueryCsv(screen(batch), bad, rows)


def read_query_csv(text: str, *, hostname: str, tz: tzinfo = UTC) -> Batch:
    """nvidia-smi ``--query-gpu=... --format=csv`` output -> a screened ``Batch`` (see the
    module's doc); rows that do not read are named in ``problems`` as ``line N: reason``."""
    return read_query_csv_rows(text, hostname=hostname, tz=tz).batch


__all__ = [
    "HEADER_FIELDS",
    "QueryCsv",
    "parse_timestamp",
    "read_query_csv",
    "read_query_csv_rows",
    "split_header",
    "value",
]
