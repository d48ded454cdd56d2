"""Load history from files, as exported from Prometheus (dcgm-exporter) or InfluxDB.

Three kinds of file, CSV (plain or gzip) or Parquet, one row per record:

    telemetry   timestamp, hostname, gpu, UUID[, modelName, pci_bus_id, rack], one column per
                metric named by its dcgm-exporter name (DCGM_FI_DEV_GPU_TEMP, or a legacy alias
                such as DCGM_FI_DEV_CLOCK_THROTTLE_REASONS) or by our field name (gpu_temp_c)
    Xid events  timestamp, hostname, gpu, UUID, xid
    failures    timestamp, hostname, gpu, UUID, kind[, repair_s, xid]

Also nvidia-smi's own CSV log (``ingest_smi_csv``, read by ``collectors.smi_csv``) and kernel
logs (``ingest_kernel_log``).

``timestamp`` is RFC 3339 (``2024-05-01T12:00:00Z``; without an offset it is taken as UTC) or
Unix seconds. Column names match case-insensitively. Every cell is judged against the field
catalogue, with the rules of ``gpuwarden.readings``:

- A line whose time, host, GPU or UUID does not read (empty; a GPU index that is no integer in
  0..2^32-1; a time that is neither RFC 3339 nor Unix seconds, or lies outside 2000..2100; a
  boolean or a list where a time belongs; too few or too many cells) is no record: it is
  reported with its line number in the file (the header is line 1) and not stored.
- A metric cell that is empty is missing (NaN), never 0. One that is no number (``hot``, a
  list) or an impossible reading (infinity, a DCGM blank sentinel such as 9223372036854775794,
  a memory temperature on a GDDR board, a value outside the field's range, a negative counter)
  is missing too, and counted as a rejected reading with its reason; the rest of the line is
  stored.

Every good line is stored, whatever comes after it. ``on_bad_line(line, reason)`` hears of each
bad line as it is found (the report keeps the first ``MAX_BAD_ROWS``). A file that cannot be
read at all raises ``InputError`` and stores nothing. Writes are idempotent, so loading a fixed
file again after an error is safe.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from gpuwarden._ingest_cells import Cells
from gpuwarden._ingest_read import FileChunks
from gpuwarden._ingest_report import BadLineReport, report_path
from gpuwarden.collectors.base import iter_log_lines, read_log_text
from gpuwarden.collectors.journal import JournalLines, kernel_lines
from gpuwarden.errors import InputError
from gpuwarden.readings import NOT_A_NUMBER, check_columns
from gpuwarden.store.base import Store
from gpuwarden.telemetry import (
    DCGM_XID_COUNT_METRIC,
    FIELD_BY_DCGM,
    FIELDS_BY_NAME,
    REJECT_REASONS,
    Batch,
    Event,
    Failure,
    GpuId,
    Rejection,
)
from gpuwarden.wording import plural

if TYPE_CHECKING:
    from gpuwarden.collectors.kmsg import KernelXid
    from gpuwarden.collectors.lineproto import Point

#: Bad rows kept in a report; ``bad_rows_total`` counts them all.
MAX_BAD_ROWS = 1000
CHUNK_ROWS = 100_000

#: Lines of line protocol read, mapped and stored at a time.
LINE_CHUNK = 50_000

#: Told of each bad line as it is found: (line number, reason).
BadLineSink = Callable[[int, str], None]


@dataclass(frozen=True)
class IngestReport:
    """What one file load did. ``bad_rows``: (line, reason), the first ``MAX_BAD_ROWS``.
    ``rejected``: (field, reason) -> readings stored as missing because they were impossible."""

    rows_stored: int
    bad_rows: list[tuple[int, str]] = field(default_factory=list)
    unknown_columns: list[str] = field(default_factory=list)
    bad_rows_total: int = 0
    #: Kernel logs: (line, PCI bus id, host) of Xids that matched no known GPU (the first
    #: ``MAX_BAD_ROWS``), stored as ``xid_unmatched``; ``unmatched_total`` counts them all.
    unmatched: list[tuple[int, str, str]] = field(default_factory=list)
    unmatched_total: int = 0
    #: Kernel logs: lines read (journal entries: ``read_unit``; ``-q`` logs: outputs, or XML
    #: documents), and the SXid events among those stored.
    lines_read: int = 0
    read_unit: str = "line"
    sxids: int = 0
    rejected: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Line protocol: points of measurements that hold no GPU telemetry, by measurement.
    ignored: dict[str, int] = field(default_factory=dict)
    #: Line protocol and InfluxQL: Xid events made from dcgm-exporter's last-Xid gauge.
    events: int = 0


class IngestWarning(UserWarning):
    """A file had columns ingest does not know; they were ignored."""


# role -> accepted column names (lower case)
_ROLES = {
    "timestamp": ("timestamp", "time", "ts"),
    "hostname": ("hostname",),
    "gpu": ("gpu",),
    "uuid": ("uuid",),
    "model": ("modelname", "model"),
    "pci_bus_id": ("pci_bus_id",),
    "rack": ("rack",),
    "xid": ("xid",),
    "kind": ("kind",),
    "repair_s": ("repair_s",),
}
_SHOWN = {"uuid": "UUID"}  # as the file formats spell it
_ID = ("timestamp", "hostname", "gpu", "uuid")
_PLACE = ("model", "pci_bus_id", "rack")
_FIELD_BY_LOWER = {k.lower(): v for k, v in FIELD_BY_DCGM.items()} | {
    name.lower(): name for name in FIELDS_BY_NAME
}
_GPU_INDEX = "a GPU index (an integer 0..4294967295)"
_XID = "an Xid number (an integer 0..4294967295)"


@dataclass
class _Columns:
    names: list[str]  # the file's columns, in order
    roles: dict[str, int]  # role -> column position
    fields: dict[str, list[int]]  # field name -> columns (a name and its legacy alias)
    unknown: list[str]


def _resolve(
    path: object,
    columns: list[str],
    required: tuple[str, ...],
    optional: tuple[str, ...],
    metrics: bool,
) -> _Columns:
    by_name = {alias: role for role in (*required, *optional) for alias in _ROLES[role]}
    out = _Columns(columns, {}, defaultdict(list), [])
    for i, col in enumerate(columns):
        key = col.strip().lower()
        if key in by_name:
            role = by_name[key]
            if role in out.roles:
                raise InputError(
                    f"{path}: columns {columns[out.roles[role]]!r} and {col!r} both give {role}"
                )
            out.roles[role] = i
        elif metrics and key in _FIELD_BY_LOWER:
            out.fields[_FIELD_BY_LOWER[key]].append(i)
        else:
            out.unknown.append(col)
    missing = [_SHOWN.get(r, r) for r in required if r not in out.roles]
    if missing:
        raise InputError(
            f"{path}: missing required {plural(len(missing), 'column')} {', '.join(missing)} "
            f"(found: {', '.join(columns) or 'none'})"
        )
    if out.unknown:
        warnings.warn(
            f"{path}: ignoring unknown {plural(len(out.unknown), 'column')} {', '.join(out.unknown)}",
            IngestWarning,
            stacklevel=4,
        )
    return out


def _gpus(cells: Cells, cols: _Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ts, hostname, gpu index, uuid of every row (checked)."""
    r = cols.roles
    ts = cells.time(r["timestamp"])
    hostname = cells.text(r["hostname"], cols.names[r["hostname"]])
    gpu = cells.index(r["gpu"], _GPU_INDEX)
    uuid = cells.text(r["uuid"], cols.names[r["uuid"]])
    return ts, hostname, gpu, uuid


def _field_values(cells: Cells, name: str, columns: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """One field's values, and which cells were no number. A name and its legacy alias are
    merged (an export that spans a dcgm-exporter upgrade has both, each filled in part)."""
    flag = FIELDS_BY_NAME[name].bounds.allowed == {0.0, 1.0}  # a boolean column reads 0/1
    merged, unreadable = cells.number(columns[0], bools=flag)
    first = cells.names[columns[0]]
    for i in columns[1:]:
        values, other_unreadable = cells.number(i, bools=flag)
        clash = ~np.isnan(merged) & ~np.isnan(values) & (merged != values)
        cells.flag(clash, _disagree(f"{first} and {cells.names[i]}", merged, values))
        merged = np.where(np.isnan(merged), values, merged)
        unreadable = unreadable | other_unreadable
    return merged, unreadable & np.isnan(merged)


def _disagree(names: str, a: np.ndarray, b: np.ndarray) -> Callable[[int], str]:
    return lambda p: f"{names} disagree ({a[p]:g} vs {b[p]:g})"


def _place(cells: Cells, cols: _Columns, good: np.ndarray) -> dict[str, np.ndarray]:
    return {p: cells.optional_text(cols.roles.get(p))[good] for p in _PLACE}


def _run(
    path: str | os.PathLike[str],
    required: tuple[str, ...],
    optional: tuple[str, ...],
    metrics: bool,
    store_rows: Callable[[Cells, _Columns, Counter[tuple[str, str]]], int],
    *,
    progress: bool = False,
    chunk_rows: int = CHUNK_ROWS,
    on_bad_line: BadLineSink | None = None,
) -> IngestReport:
    from tqdm import tqdm

    chunks = FileChunks(path, chunk_rows=chunk_rows)
    cols = _resolve(path, chunks.columns, required, optional, metrics)
    stored, total = 0, 0
    bad: list[tuple[int, str]] = []
    rejected: Counter[tuple[str, str]] = Counter()
    with tqdm(unit="rows", disable=not progress, desc=os.path.basename(path)) as bar:
        try:
            for chunk in chunks.chunks():
                cells = Cells(chunk, cols.names)
                stored += store_rows(cells, cols, rejected)
                found = sorted(chunk.malformed + cells.bad_rows())
                total += len(found)
                bad.extend(found[: max(MAX_BAD_ROWS - len(bad), 0)])
                if on_bad_line is not None:
                    for line, reason in found:
                        on_bad_line(line, reason)
                bar.update(len(chunk))
        except InputError as exc:
            raise InputError(
                f"{exc}; {stored} rows before it were stored (loading the fixed file again is safe)"
            ) from exc
    return IngestReport(stored, bad, cols.unknown, total, rejected=dict(rejected))


def ingest_telemetry(
    store: Store,
    path: str | os.PathLike[str],
    *,
    progress: bool = False,
    chunk_rows: int = CHUNK_ROWS,
    on_bad_line: BadLineSink | None = None,
) -> IngestReport:
    """Load a telemetry file (one row per GPU per timestamp) into ``store``, ``chunk_rows``
    rows at a time; ``progress`` shows a tqdm bar counting rows."""

    def store_rows(cells: Cells, cols: _Columns, rejected: Counter[tuple[str, str]]) -> int:
        ts, hostname, gpu, uuid = _gpus(cells, cols)
        values: dict[str, np.ndarray] = {}
        unreadable: dict[str, np.ndarray] = {}
        for name, c in cols.fields.items():
            values[name], unreadable[name] = _field_values(cells, name, c)
        good = cells.good()
        found = _reject(cells, cols, good, (ts, hostname, gpu, uuid), values, unreadable)
        if found:
            rejected.update((r.field, r.reason) for r in found)
            store.write_rejections(found)
        frame = pd.DataFrame(
            {
                "ts": ts[good],
                "hostname": hostname[good],
                "gpu": gpu[good],
                "uuid": uuid[good],
                **_place(cells, cols, good),
                **{n: v[good] for n, v in values.items()},
            }
        )
        return store.write_frame(frame) if len(frame) else 0

    return _run(
        path,
        _ID,
        _PLACE,
        True,
        store_rows,
        progress=progress,
        chunk_rows=chunk_rows,
        on_bad_line=on_bad_line,
    )


def _reject(
    cells: Cells,
    cols: _Columns,
    good: np.ndarray,
    ids: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    values: dict[str, np.ndarray],
    unreadable: dict[str, np.ndarray],
) -> list[Rejection]:
    """The good rows' cells that are no number or an impossible reading, set to NaN in
    ``values``; one ``Rejection`` each."""
    model = cells.optional_text(cols.roles.get("model"))
    codes = check_columns({n: v[good] for n, v in values.items()}, model[good])
    where = np.flatnonzero(good)
    nan_code = np.int8(REJECT_REASONS.index(NOT_A_NUMBER) + 1)
    for name, cells_bad in unreadable.items():
        mask = cells_bad[good]
        if mask.any():
            code = codes.get(name, np.zeros(len(where), dtype=np.int8))
            code[mask] = nan_code
            codes[name] = code
    if not codes:
        return []
    ts, hostname, gpu, uuid = ids
    place = {p: cells.optional_text(cols.roles.get(p)) for p in _PLACE}
    gpu_at: dict[int, GpuId] = {}

    def gpu_id(i: int) -> GpuId:
        if i not in gpu_at:
            gpu_at[i] = GpuId(
                str(hostname[i]),
                int(gpu[i]),
                str(uuid[i]),
                pci_bus_id=str(place["pci_bus_id"][i]),
                model=str(place["model"][i]),
                rack=str(place["rack"][i]),
            )
        return gpu_at[i]

    found: list[Rejection] = []
    for name, code in codes.items():
        for k in np.flatnonzero(code).tolist():
            i = int(where[k])
            reason = REJECT_REASONS[code[k] - 1]
            found.append(Rejection(float(ts[i]), gpu_id(i), name, reason, float(values[name][i])))
        values[name] = col = values[name].copy()  # may be a read-only view of the file's chunk
        col[where[code > 0]] = np.nan
    return found


def _gpu_ids(
    cells: Cells,
    cols: _Columns,
    good: np.ndarray,
    hostname: np.ndarray,
    gpu: np.ndarray,
    uuid: np.ndarray,
) -> list[GpuId]:
    place = _place(cells, cols, good)
    return [
        GpuId(h, int(g), u, pci_bus_id=p, model=m, rack=k)
        for h, g, u, p, m, k in zip(
            hostname[good],
            gpu[good],
            uuid[good],
            place["pci_bus_id"],
            place["model"],
            place["rack"],
            strict=True,
        )
    ]


def ingest_xids(
    store: Store,
    path: str | os.PathLike[str],
    *,
    chunk_rows: int = CHUNK_ROWS,
    on_bad_line: BadLineSink | None = None,
) -> IngestReport:
    """Load an Xid events file (``timestamp,hostname,gpu,UUID,xid``) as ``xid`` events."""

    def store_rows(cells: Cells, cols: _Columns, _: object) -> int:
        ts, hostname, gpu, uuid = _gpus(cells, cols)
        xid = cells.index(cols.roles["xid"], _XID)
        good = cells.good()
        ids = _gpu_ids(cells, cols, good, hostname, gpu, uuid)
        events = [
            Event(float(t), g, "xid", code=int(x))
            for t, g, x in zip(ts[good], ids, xid[good], strict=True)
        ]
        store.write_events(events)
        return len(events)

    return _run(
        path,
        (*_ID, "xid"),
        _PLACE,
        False,
        store_rows,
        chunk_rows=chunk_rows,
        on_bad_line=on_bad_line,
    )


def ingest_failures(
    store: Store,
    path: str | os.PathLike[str],
    *,
    chunk_rows: int = CHUNK_ROWS,
    on_bad_line: BadLineSink | None = None,
) -> IngestReport:
    """Load a failures file (``timestamp,hostname,gpu,UUID,kind``, optionally ``repair_s``
    and ``xid``): the ground truth a model is scored against."""

    def store_rows(cells: Cells, cols: _Columns, _: object) -> int:
        ts, hostname, gpu, uuid = _gpus(cells, cols)
        kind = cells.text(cols.roles["kind"], cols.names[cols.roles["kind"]])
        repair = np.full(len(ts), np.nan)
        if "repair_s" in cols.roles:
            i = cols.roles["repair_s"]
            repair, unreadable = cells.number(i)
            cells.flag(unreadable, lambda p: f"repair_s {cells.shown(i, p)} is not a number")
            bad = (repair < 0) | np.isinf(repair)
            cells.flag(bad, lambda p: f"repair_s {repair[p]:g} is not a duration in seconds")
        xid = cells.index(cols.roles["xid"], _XID, required=False) if "xid" in cols.roles else None
        good = cells.good()
        ids = _gpu_ids(cells, cols, good, hostname, gpu, uuid)
        failures = [
            Failure(
                float(ts[i]),
                g,
                str(kind[i]),
                repair_s=None if np.isnan(repair[i]) else float(repair[i]),
                xid=None if xid is None or xid[i] < 0 else int(xid[i]),
            )
            for i, g in zip(np.flatnonzero(good).tolist(), ids, strict=True)
        ]
        store.write_failures(failures)
        return len(failures)

    optional = (*_PLACE, "repair_s", "xid")
    return _run(
        path,
        (*_ID, "kind"),
        optional,
        False,
        store_rows,
        chunk_rows=chunk_rows,
        on_bad_line=on_bad_line,
    )


def ingest_smi_csv(
    store: Store,
    path: str | os.PathLike[str],
    *,
    host: str | None = None,
    tz: tzinfo = UTC,
    chunk_rows: int = CHUNK_ROWS,
    on_bad_line: BadLineSink | None = None,
) -> IngestReport:
    """Load nvidia-smi's own CSV log (``--query-gpu=timestamp,uuid,...`` ``--format=csv``, with
    or without ``nounits``; plain or gzip) through ``collectors.smi_csv``: one sample per row,
    timed by its ``timestamp`` (local time, read in ``tz``), the driver version as the node's.

    The GPUs belong to ``host`` (nvidia-smi names no host), this machine's name when None.
    Rows that do not read are bad rows; impossible readings are stored as rejected. A file with
    no header naming ``timestamp`` raises ``InputError`` and stores nothing."""
    import socket

    from gpuwarden.collectors.smi_csv import read_query_csv_rows

    lines = read_log_text(path).splitlines()
    try:
        got = read_query_csv_rows("\n".join(lines), hostname=host or socket.gethostname(), tz=tz)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from exc
    batch = got.batch
    # in slices, each one transaction: a store error partway keeps the slices written before
    for start in range(0, max(len(batch.samples), 1), chunk_rows):
        part = batch.samples[start : start + chunk_rows]
        first = start == 0
        store.write_batch(
            dataclasses.replace(
                batch,
                samples=part,
                rejected=batch.rejected if first else (),
                nodes=batch.nodes if first else (),
            )
        )
    rejected = Counter((r.field, r.reason) for r in batch.rejected)
    if on_bad_line is not None:
        for line, why in got.bad_rows:
            on_bad_line(line, why)
    return IngestReport(
        len(batch.samples),
        got.bad_rows[:MAX_BAD_ROWS],
        bad_rows_total=len(got.bad_rows),
        lines_read=got.rows_read,
        rejected=dict(rejected),
    )


#: The line each ``nvidia-smi -q`` output starts with; a log of ``nvidia-smi -q -l N`` repeats it.
_Q_START = "==============NVSMI LOG=============="
#: ``nvidia-smi -q`` outputs read and mapped before they are stored.
Q_CHUNK = 500


def ingest_smi_query_text(
    store: Store,
    path: str | os.PathLike[str],
    *,
    host: str | None = None,
    tz: tzinfo = UTC,
    on_bad_line: BadLineSink | None = None,
) -> IngestReport:
    """Load ``nvidia-smi -q`` output, as text or as XML (``-q -x``), one or a log of
    ``-q -l N`` (many; plain or gzip), through ``collectors.smi_text`` (``smi_xml`` puts the
    XML into the text's names): one sample per GPU per output, timed by its ``Timestamp``
    (read in ``tz``), the driver and CUDA versions as the node's.

    An output whose time does not read, or an XML document that does not parse, is a bad line
    (named by the line it starts on) and is not stored; impossible readings are stored as
    rejected. A file that is neither form raises ``InputError`` and stores nothing."""
    import socket

    from gpuwarden.collectors.smi_text import read_query_text
    from gpuwarden.collectors.smi_xml import QueryXmlError, read_query_xml

    hostname = host or socket.gethostname()
    bad: list[tuple[int, str]] = []
    batches: list[Batch] = []
    total, outputs, xml = IngestReport(0), 0, False
    for first, output, xml in _q_outputs(path):
        outputs += 1
        form = "nvidia-smi -q -x document" if xml else "nvidia-smi -q output"
        try:
            reader = read_query_xml if xml else read_query_text
            batch = reader(output, hostname=hostname, tz=tz)
        except QueryXmlError as exc:
            bad.append((first, f"{form}: {exc}"))
            continue
        untimed = [p for p in batch.problems if "time 0" in p]
        if untimed:
            bad.append((first, f"{form} without a readable time: {untimed[0]}"))
            continue
        batches.append(batch)
        if len(batches) >= Q_CHUNK:
            total = _add(total, _store_batches(store, batches, [], None, lines_read=0))
            batches.clear()
    if not outputs:
        raise InputError(
            f"{path}: no {_Q_START!r} line and no <nvidia_smi_log>: not nvidia-smi -q output, "
            "as text or as XML (-q -x)"
        )
    last = _store_batches(
        store, batches, bad, on_bad_line, lines_read=outputs,
        read_unit="document" if xml else "output",
    )  # fmt: skip
    merged = _add(total, last)
    return dataclasses.replace(
        last, rows_stored=merged.rows_stored, rejected=merged.rejected, events=merged.events
    )


def _q_outputs(path: str | os.PathLike[str]) -> Iterator[tuple[int, str, bool]]:
    """(line it starts on, text, whether XML) of each ``nvidia-smi -q`` output of a file, read
    as they come (a day's ``-q -x -l 60`` log of a node is hundreds of MB): text outputs start at
    their ``NVSMI LOG`` header, XML documents at their ``<?xml`` declaration (or, without one,
    at ``<nvidia_smi_log``), also within a line (a loop killed mid-document, and the next run's
    output written on after it)."""
    from gpuwarden.collectors.base import read_log_bytes
    from gpuwarden.collectors.smi_xml import is_query_xml

    head = read_log_bytes(path, limit=4096).decode("utf-8-sig", errors="replace")
    xml = is_query_xml(head)
    mark = _Q_START
    if xml:
        mark = "<?xml" if head.lstrip("\ufeff \t\r\n").startswith("<?xml") else "<nvidia_smi_log"
    first = 0
    held: list[str] = []
    for n, line in enumerate(iter_log_lines(path), 1):
        if not xml:
            pieces = ["", line] if line.strip() == _Q_START else [line]
        else:  # a piece per declaration: the text before the first, then one from each on
            pieces = line.split(mark)
            pieces[1:] = [mark + p for p in pieces[1:]]
        for k, piece in enumerate(pieces):
            if k:  # a new output starts here
                if held and any(x.strip() for x in held):
                    yield first, "\n".join(held), xml
                first, held = n, []
            if first and (piece or k):
                held.append(piece)
    if held:
        yield first, "\n".join(held), xml


def ingest_influxql(
    store: Store,
    url: str,
    *,
    start: float,
    end: float,
    host: str | None = None,
    chunk_s: float = 3_600.0,
    progress: bool = False,
    on_bad_line: BadLineSink | None = None,
    client: object = None,
) -> IngestReport:
    """Copy the GPU telemetry Telegraf wrote to an InfluxDB 1.x database (``url``:
    ``influxql://host:8086?db=telegraf``, ``store.influxql``) from ``start`` to ``end`` (Unix
    seconds) into ``store``: the ``nvidia_smi`` measurement and dcgm-exporter's series from the
    prometheus input, mapped by ``collectors.telegraf``. A query reads ``chunk_s`` (an hour: a
    1,000-GPU fleet polled every 10 s answers 360,000 points), and the points are stored
    ``LINE_CHUNK`` at a time, so memory holds an hour's answer, not the range's.

    A GPU point without an index tag is named as a bad line (its number counts the points
    read); a database without GPU telemetry raises ``InputError`` and stores nothing."""
    import socket

    from tqdm import tqdm

    from gpuwarden.collectors.telegraf import NVIDIA_SMI, XID_SERIES
    from gpuwarden.store.influxql import InfluxQLSource

    if not end > start:
        raise InputError("the range to read ends before it starts")
    source = InfluxQLSource(url, client=client)
    try:
        names = source.measurements()
        reads: list[tuple[str, list[str] | None]] = []
        if NVIDIA_SMI in names:
            reads.append((NVIDIA_SMI, None))
        if any(m in FIELD_BY_DCGM for m in names):  # metric_version 1: one query for them all
            reads.append(("/^DCGM_FI_/", None))
        if DCGM_XID_COUNT_METRIC in names:  # 4.x's windowed Xid count, metric_version 1
            reads.append((DCGM_XID_COUNT_METRIC, None))
        if "prometheus" in names:  # metric_version 2: only its dcgm-exporter fields
            dcgm = [
                k for k in source.field_keys("prometheus") if k in FIELD_BY_DCGM or k in XID_SERIES
            ]
            reads += [("prometheus", dcgm)] if dcgm else []
        if not reads:
            raise InputError(
                f"{source.shown}: no GPU telemetry (Telegraf's nvidia_smi measurement, or "
                f"DCGM_FI_* series from its prometheus input); measurements: "
                f"{', '.join(sorted(names)[:20]) or 'none'}"
            )
        sink = _TelegrafSink(store, host or socket.gethostname())
        # only the hours that hold points: a month's history in a year's range reads a month
        spans = [x for m, _ in reads if (x := source.span(m, start, end)) is not None]
        if spans:
            start = max(start, min(lo for lo, _ in spans))
            end = min(end, max(hi for _, hi in spans) + 1.0)  # the last point itself
        chunks = int(np.ceil((end - start) / chunk_s)) if spans else 0
        with tqdm(total=chunks, unit="h" if chunk_s == 3_600 else "chunk",
                  disable=not progress, desc=source.shown) as bar:  # fmt: skip
            k = 0
            while k < chunks:
                lo, hi = start + k * chunk_s, min(end, start + (k + 1) * chunk_s)
                before = sink.read
                for measurement, fields in reads:
                    for p in source.points(measurement, lo, hi, fields):
                        sink.add(sink.read + 1, p)  # a point's number: how many came before it
                sink.flush()
                step = 1
                if sink.read == before:  # a gap: on to the chunk of the next point
                    nxt = [t for m, _ in reads if (t := source.first(m, hi, end)) is not None]
                    step = int((min(nxt) - start) // chunk_s) - k if nxt else chunks - k
                bar.update(step)
                k += max(step, 1)
    finally:
        source.close()
    return sink.report(sink.read, on_bad_line)


class _TelegrafSink:
    """Telegraf's points into ``store``, ``LINE_CHUNK`` at a time (a point's fields for one GPU
    and time may come in two chunks: the store merges them, as it does Telegraf's one line per
    series), with the source's Xid history across the chunks and what was left out."""

    def __init__(self, store: Store, host: str) -> None:
        from gpuwarden.collectors.telegraf import XidHistory

        self.store, self.host, self.xids = store, host, XidHistory()
        self.points: list[tuple[int, Point]] = []  # (line or point number, point)
        self.bad: list[tuple[int, str]] = []
        self.other: Counter[str] = Counter()
        self.total = IngestReport(0)
        self.read = 0

    def add(self, number: int, point: Point) -> None:
        self.read += 1
        self.points.append((number, point))
        if len(self.points) >= LINE_CHUNK:
            self.flush(between_times=True)

    def flush(self, *, between_times: bool = False) -> None:
        """Map and store the points gathered; ``between_times``: keep those of the newest time
        for the next chunk, so that no time (a scrape) is cut in two (the Xid history reads
        each time whole). A chunk all of one time is stored once it is four chunks long."""
        from gpuwarden.collectors.telegraf import points_to_batches

        points: list[tuple[int, Point]] = self.points
        held: list[tuple[int, Point]] = []
        if between_times:
            newest = max((p.ts for _, p in points if p.ts is not None), default=None)
            last = [x for x in points if newest is not None and x[1].ts == newest]
            if len(last) == len(points) and len(points) < 4 * LINE_CHUNK:
                return  # all of one time: gather more
            if len(last) < len(points):
                points = [x for x in points if newest is None or x[1].ts != newest]
                held = last
        read = points_to_batches(points, host=self.host, xids=self.xids)
        self.bad.extend(read.unplaced)
        self.other.update(read.other)
        stored = _store_batches(self.store, read.batches, [], None, lines_read=0)
        self.total = _add(self.total, stored)
        self.points = held

    def report(self, lines_read: int, on_bad_line: BadLineSink | None) -> IngestReport:
        self.bad.sort()
        if on_bad_line is not None:
            for line, why in self.bad:
                on_bad_line(line, why)
        return IngestReport(
            self.total.rows_stored,
            self.bad[:MAX_BAD_ROWS],
            bad_rows_total=len(self.bad),
            lines_read=lines_read,
            rejected=self.total.rejected,
            ignored=dict(self.other),
            events=self.total.events,
        )


def _add(a: IngestReport, b: IngestReport) -> IngestReport:
    rejected = Counter(a.rejected)
    rejected.update(b.rejected)
    return IngestReport(
        a.rows_stored + b.rows_stored, rejected=dict(rejected), events=a.events + b.events
    )


def _store_batches(
    store: Store,
    batches: list[Batch],
    bad: list[tuple[int, str]],
    on_bad_line: BadLineSink | None,
    *,
    lines_read: int,
    ignored: dict[str, int] | None = None,
    read_unit: str = "line",
) -> IngestReport:
    """Write screened ``batches``, tell ``on_bad_line`` of each of ``bad``, and report."""
    stored = events = 0
    rejected: Counter[tuple[str, str]] = Counter()
    for batch in batches:
        store.write_batch(batch)
        stored += len(batch.samples)
        events += len(batch.events)
        rejected.update((r.field, r.reason) for r in batch.rejected)
    if on_bad_line is not None:
        for line, why in bad:
            on_bad_line(line, why)
    return IngestReport(
        stored,
        bad[:MAX_BAD_ROWS],
        bad_rows_total=len(bad),
        lines_read=lines_read,
        rejected=dict(rejected),
        ignored=dict(ignored or {}),
        events=events,
        read_unit=read_unit,
    )


def ingest_line_protocol(
    store: Store,
    path: str | os.PathLike[str],
    *,
    host: str | None = None,
    precision: str = "ns",
    on_bad_line: BadLineSink | None = None,
) -> IngestReport:
    """Load InfluxDB line protocol (plain or gzip) as Telegraf writes GPU telemetry: its
    ``nvidia_smi`` measurement, and dcgm-exporter's series through its prometheus input
    (``collectors.telegraf``). Times are in ``precision`` units; ``host`` names the GPUs of
    points without a ``host`` tag (default: this machine).

    A line that does not read, or a GPU point without a time, is a bad line and is not stored;
    impossible readings are stored as rejected; other measurements are counted in ``ignored``.
    A file without one GPU point raises ``InputError`` and stores nothing."""
    import socket

    from gpuwarden.collectors.lineproto import PRECISIONS, parse_line

    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    sink = _TelegrafSink(store, host or socket.gethostname())
    lines_read = 0
    for n, line in enumerate(iter_log_lines(path), start=1):
        lines_read = n
        try:
            point = parse_line(line, precision)
        except InputError as exc:
            sink.bad.append((n, f"not line protocol: {exc}"))
            continue
        if point is not None:
            sink.add(n, point)
    sink.flush()
    if not sink.total.rows_stored and not sink.total.events:
        seen = ", ".join(sorted(sink.other)) or "none"
        raise InputError(
            f"{path}: no GPU telemetry in line protocol (Telegraf's nvidia_smi measurement, or "
            f"DCGM_FI_* series from its prometheus input); measurements found: {seen}"
        )
    return sink.report(lines_read, on_bad_line)


def _kernel_log_lines(path: str | os.PathLike[str]) -> JournalLines:
    """A kernel log's lines, numbered: a text log's own, or the kernel's entries of a journal
    (``collectors.journal``: ``journalctl -o json`` / ``-o export``, its files)."""
    journal = kernel_lines(path)
    if journal is not None:
        return journal
    text = read_log_text(path).splitlines()
    return JournalLines(lines=list(enumerate(text, 1)), entries=len(text), unit="line")


def ingest_kernel_log(
    store: Store,
    path: str | os.PathLike[str],
    *,
    host: str | None = None,
    boot_time: float | None = None,
    tz: tzinfo = UTC,
    now: float | None = None,
    on_bad_line: BadLineSink | None = None,
) -> IngestReport:
    """Load the ``NVRM: Xid`` and ``SXid`` lines of a kernel log (dmesg, dmesg -T, syslog,
    journalctl -k, a copy of /dev/kmsg; plain or gzip; or the journal: ``journalctl -o json``
    or ``-o export``, a journal file or directory) as events.

    Each Xid goes to the GPU at its PCI address on its host (the line's own host, else
    ``host``), as the store's inventory (``Store.gpus()``) knows them; one that matches no GPU
    is stored as ``xid_unmatched`` and listed in ``unmatched``. SXids are ``sxid`` events of
    the switch (``collectors.kmsg.switch_id``). Seconds-since-boot stamps need ``boot_time``.
    Nothing is stored when the file needs ``host`` or ``boot_time`` and lacks it
    (``InputError`` naming the option); an Xid line that does not read is a bad row."""
    from gpuwarden.collectors.kmsg import (
        FallenOffBus,
        GpuDirectory,
        KernelLineError,
        parse_line,
        to_event,
    )

    log = _kernel_log_lines(path)
    found: list[tuple[int, KernelXid]] = []
    bad: list[tuple[int, str]] = list(log.bad)
    fallen = FallenOffBus()
    for n, line in log.lines:
        try:
            notice = fallen.feed(line, boot_time=boot_time, tz=tz, now=now)
            x = notice or parse_line(line, boot_time=boot_time, tz=tz, now=now)
        except KernelLineError as exc:
            bad.append((n, str(exc)))
            continue
        if x is None:
            continue
        if x.ts is None and x.since_boot is None:
            bad.append((n, "an Xid line without a time stamp"))
            continue
        found.append((n, x))
    since_boot = next(((n, x) for n, x in found if x.ts is None), None)
    if since_boot is not None:
        n, x = since_boot
        raise InputError(
            f"{path}:{n}: {x.stamp!r} is seconds since boot; give --boot-time (that boot's "
            "time, RFC 3339 or Unix seconds: `uptime -s` on the host, or btime in /proc/stat)"
        )
    no_host = next((n for n, x in found if not x.host), None)
    if no_host is not None and not host:
        raise InputError(
            f"{path}:{no_host}: the line names no host (a dmesg log); give --host NAME"
        )
    gpus = GpuDirectory.from_frame(store.gpus())
    events: list[Event] = []
    unmatched: list[tuple[int, str, str]] = []
    for n, x in found:
        assert x.ts is not None
        event = to_event(x, x.ts, x.host or str(host), gpus)
        if event.kind == "xid_unmatched":
            unmatched.append((n, x.bus_id, x.host or str(host)))
        events.append(event)
    if events:
        store.write_events(events)
    if on_bad_line is not None:
        for n, why in bad:
            on_bad_line(n, why)
    return IngestReport(
        len(events),
        bad[:MAX_BAD_ROWS],
        bad_rows_total=len(bad),
        unmatched=unmatched[:MAX_BAD_ROWS],
        unmatched_total=len(unmatched),
        lines_read=log.entries,
        sxids=sum(1 for e in events if e.kind == "sxid"),
        ignored={"other programs' journal entry": log.others} if log.others else {},
        read_unit=log.unit,
    )


__all__ = [
    "BadLineReport",
    "BadLineSink",
    "IngestReport",
    "IngestWarning",
    "ingest_failures",
    "ingest_kernel_log",
    "ingest_smi_csv",
    "ingest_telemetry",
    "ingest_xids",
    "report_path",
]
