"""Reading a user's history file in chunks of Arrow columns, each row tagged with its line.

CSV (plain or gzip, told by the file's first bytes, not its name) is cut into blocks of whole
lines here and each block is parsed by pyarrow, every cell as text (empty: null). A line with
more or fewer cells than the header is no row: it is reported as malformed with its line number.
One record is one line: a line break inside a quoted cell splits the record, and each part is
reported. A block the parser cannot read as one (a stray quote that runs to the end of the block,
bytes that are not UTF-8) is read again in halves, down to single lines, so one broken line costs
that line only. Parquet is read in record batches of its own types; its "line" is the row number
plus 2, the line the row would have in a CSV export with a header.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

from gpuwarden.errors import InputError

#: Bytes of CSV read at a time; a chunk of rows never spans two reads.
READ_BYTES = 4 << 20
#: The header must end within this many bytes.
_HEADER_BYTES = 1 << 20
#: Below this many lines a block that does not read is split into single lines at once.
_SMALL_BLOCK = 16


@dataclass
class Chunk:
    """Rows of the file as read: one Arrow array per file column (in the header's order),
    and each row's 1-based line number."""

    columns: list[pa.Array]
    lines: np.ndarray
    #: Lines that are no row: (line, reason).
    malformed: list[tuple[int, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lines)


def _sniff(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    suffixes = [s.lower() for s in path.suffixes]
    if magic == b"PAR1":
        return "parquet"
    if suffixes and suffixes[-1] in (".parquet", ".pq"):
        raise InputError(f"{path}: named .parquet but is not a Parquet file")
    if magic[:2] == b"\x1f\x8b":
        return "gzip"
    if suffixes and suffixes[-1] == ".gz":
        raise InputError(f"{path}: named .gz but is not gzip-compressed")
    return "csv"


def _check_gzip(path: Path) -> None:
    # Decompress once up front: a truncated or corrupt archive is refused before any row is
    # stored, rather than failing halfway through the load.
    try:
        with gzip.open(path, "rb") as fh:
            while fh.read(1 << 20):
                pass
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: bad gzip file: {exc}") from exc


class FileChunks:
    """``columns`` (the header) and ``chunks()``, an iterator of ``Chunk``, for one file.

    Raises ``InputError`` naming the file when it cannot be read at all: missing, empty, bad
    gzip, not Parquet, not text. A read error partway through is raised from the iteration.
    """

    def __init__(self, path: str | os.PathLike[str], *, chunk_rows: int = 100_000) -> None:
        self.path = Path(path)
        self.chunk_rows = max(int(chunk_rows), 1)
        self.kind = _sniff(self.path)
        if self.kind == "gzip":
            _check_gzip(self.path)
        if self.kind == "parquet":
            import pyarrow.parquet as pq

            try:
                self._parquet = pq.ParquetFile(self.path)
            except Exception as exc:  # pyarrow raises several types for a damaged file
                raise InputError(f"{self.path}: not a readable Parquet file: {exc}") from exc
            self.columns = [str(c) for c in self._parquet.schema_arrow.names]
        else:
            self._header_bytes, self.columns = self._read_header()

    def _open(self) -> IO[bytes]:
        opener: Callable[..., Any] = gzip.open if self.kind == "gzip" else open
        try:
            return opener(self.path, "rb")
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read: {exc.strerror or exc}") from exc

    def _read_header(self) -> tuple[int, list[str]]:
        """The header line's length in bytes (with its newline) and its column names."""
        with self._open() as fh:
            first = fh.readline(_HEADER_BYTES)
        if not first.strip():
            raise InputError(f"{self.path}: the file is empty")
        if not first.endswith(b"\n") and len(first) >= _HEADER_BYTES:
            raise InputError(f"{self.path}: not a readable CSV file: no header line")
        try:
            text = first.decode("utf-8-sig").removesuffix("\n").removesuffix("\r")
            names = next(csv.reader([text], strict=True))
        except (UnicodeDecodeError, csv.Error, StopIteration) as exc:
            raise InputError(f"{self.path}: not a readable CSV file: {exc}") from exc
        return len(first), [name.strip() for name in names]

    def chunks(self) -> Iterator[Chunk]:
        """The rows, up to ``chunk_rows`` at a time."""
        if self.kind == "parquet":
            yield from self._parquet_chunks()
        else:
            yield from self._csv_chunks()

    def _parquet_chunks(self) -> Iterator[Chunk]:
        first = 0
        batches = self._parquet.iter_batches(batch_size=self.chunk_rows)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except Exception as exc:
                raise InputError(f"{self.path}: unreadable after row {first}: {exc}") from exc
            n = batch.num_rows
            yield Chunk(list(batch.columns), np.arange(first, first + n, dtype=np.int64) + 2)
            first += n

    def _csv_chunks(self) -> Iterator[Chunk]:
        parser = _BlockParser(len(self.columns))
        line = 2  # the header is line 1
        try:
            with self._open() as fh:
                fh.read(self._header_bytes)
                for block, count in _line_blocks(fh, self.chunk_rows):
                    yield parser.parse(block, line, count)
                    line += count
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"{self.path}: unreadable after line {line - 1}: {exc}") from exc


def _line_blocks(fh: IO[bytes], most_lines: int) -> Iterator[tuple[bytes, int]]:
    """The rest of ``fh`` as blocks of whole lines (each ends in a newline), at most
    ``most_lines`` lines each, with their number of lines."""
    rest = b""
    while True:
        data = fh.read(READ_BYTES)
        buf = rest + data if rest else data
        if not data:
            if buf:
                yield from _split_lines(buf + b"\n", most_lines)
            return
        cut = buf.rfind(b"\n") + 1
        rest = buf[cut:]
        if cut:
            yield from _split_lines(buf[:cut], most_lines)


def _split_lines(buf: bytes, most_lines: int) -> Iterator[tuple[bytes, int]]:
    ends = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 10)
    start, done = 0, 0
    for k in range(most_lines - 1, len(ends), most_lines):
        stop = int(ends[k]) + 1
        yield buf[start:stop], k + 1 - done
        start, done = stop, k + 1
    if start < len(buf):
        yield buf[start:], len(ends) - done


class _BlockParser:
    """Parse blocks of whole CSV lines into ``Chunk`` s, every cell as text."""

    def __init__(self, width: int) -> None:
        import pyarrow.csv as pcsv

        self._csv = pcsv
        self.width = width
        names = [f"c{i}" for i in range(width)]
        self._read = pcsv.ReadOptions(column_names=names, use_threads=False)
        self._convert = pcsv.ConvertOptions(
            column_types={n: pa.string() for n in names},
            strings_can_be_null=True,
            null_values=[""],  # only an empty cell is missing; "NA" or "null" is a bad value
            quoted_strings_can_be_null=True,
        )

    def parse(self, block: bytes, first_line: int, count: int | None = None) -> Chunk:
        """``block``'s rows, its first line being ``first_line`` of the file; ``count``: its
        number of lines, when known."""
        count = block.count(b"\n") if count is None else count
        got = self._try(block, count) if _utf8(block) else None
        if got is not None:
            table, invalid = got
            return _chunk(table, invalid, first_line, count, self.width)
        return self._split(block, first_line)

    def _try(self, block: bytes, count: int) -> tuple[pa.Table, list[tuple[int, int]]] | None:
        """The rows and the (line in the block, cells) of lines that are no row; None when
        the block does not read as one, or a row ran over several lines (a quote that runs on)."""
        invalid: list[tuple[int, int]] = []
        runs_on = False

        def skip(row: Any) -> str:
            nonlocal runs_on
            if row.number is None or "\n" in (row.text or "") or "\r" in (row.text or ""):
                runs_on = True
            else:
                invalid.append((int(row.number), int(row.actual_columns)))
            return "skip"

        read = self._read
        read.block_size = max(len(block) + 1, 1 << 16)
        try:
            table = self._csv.read_csv(
                io.BytesIO(block),
                read_options=read,
                parse_options=self._csv.ParseOptions(
                    invalid_row_handler=skip, ignore_empty_lines=False
                ),
                convert_options=self._convert,
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        if runs_on or table.num_rows + len(invalid) != count:
            return None
        return table, invalid

    def _split(self, block: bytes, first_line: int) -> Chunk:
        """A block that does not read as one, read in halves down to single lines."""
        lines = _lines(block)
        if len(lines) <= 1:
            return self._one_line(block, first_line)
        if len(lines) <= _SMALL_BLOCK:
            parts = [self.parse(line, first_line + k) for k, line in enumerate(lines)]
        else:
            half = len(lines) // 2
            top = b"".join(lines[:half])
            parts = [
                self.parse(top, first_line),
                self.parse(b"".join(lines[half:]), first_line + half),
            ]
        return Chunk(
            [pa.concat_arrays([p.columns[i] for p in parts]) for i in range(self.width)],
            np.concatenate([p.lines for p in parts]),
            [m for p in parts for m in p.malformed],
        )

    def _one_line(self, line: bytes, number: int) -> Chunk:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            why = "not UTF-8 text"
        else:
            why = "cells that do not read (a quote that is never closed?)"
        if b"\r" in line.rstrip(b"\r\n"):
            why = "a carriage return inside the line"
        empty = [pa.array([], type=pa.string()) for _ in range(self.width)]
        return Chunk(empty, np.empty(0, dtype=np.int64), [(number, why)])


def _utf8(block: bytes) -> bool:
    """Whether ``block`` is UTF-8 text. Checked before pyarrow sees it: pyarrow fails to
    decode a malformed line that is not, and prints the error on stderr."""
    if block.isascii():
        return True
    try:
        block.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _lines(block: bytes) -> list[bytes]:
    """``block`` cut after each newline (a carriage return alone does not end a line here)."""
    parts = block.split(b"\n")
    return [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _chunk(
    table: pa.Table, invalid: list[tuple[int, int]], first_line: int, count: int, width: int
) -> Chunk:
    """Line numbers for ``table``'s rows: every line of the block not among ``invalid``."""
    malformed = [
        (first_line + n - 1, f"expected {width} fields, saw {cells}") for n, cells in invalid
    ]
    keep = np.ones(count, dtype=bool)
    if invalid:
        keep[[n - 1 for n, _ in invalid]] = False
    lines = np.flatnonzero(keep).astype(np.int64) + first_line
    columns = [table.column(i).combine_chunks() for i in range(width)]
    return Chunk(columns, lines, malformed)
