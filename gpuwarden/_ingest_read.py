"""Reading a user's history file in chunks, each row tagged with its line in the file.

CSV (plain or gzip, told by the file's first bytes, not its name) is read by pandas in chunks,
every cell as text; rows with too many cells are skipped by the parser and reported as bad rows.
Parquet is read in record batches; its "line" is the row number plus 2, the line the row would
have in a CSV export with a header. Line numbers assume one record per line (no line breaks
inside quoted cells).
"""

from __future__ import annotations

import gzip
import os
import re
import warnings
import zlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError

_SKIPPED = re.compile(r"Skipping line (\d+): (.*)")
_READ_ERRORS = (
    pd.errors.ParserError,
    UnicodeDecodeError,
    EOFError,
    OSError,
    zlib.error,
    ValueError,
)


@dataclass
class Chunk:
    """Rows of the file as read (original column names) and their 1-based line numbers."""

    frame: pd.DataFrame
    lines: np.ndarray
    #: Lines the parser could not split into the header's columns: (line, reason).
    malformed: list[tuple[int, str]]


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
        self.chunk_rows = chunk_rows
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
            try:
                header = self._read_csv(nrows=0)
            except pd.errors.EmptyDataError as exc:
                raise InputError(f"{self.path}: the file is empty") from exc
            except _READ_ERRORS as exc:
                raise InputError(f"{self.path}: not a readable CSV file: {exc}") from exc
            self.columns = [str(c) for c in header.columns]

    def _read_csv(
        self,
        *,
        nrows: int | None = None,
        chunksize: int | None = None,
        text: Collection[str] = (),
    ) -> Any:
        return pd.read_csv(
            self.path,
            nrows=nrows,
            chunksize=chunksize,
            # Identity columns stay text (a hostname "007" is not 7); the rest are left to the
            # C parser, which reads a clean numeric column fast. A column with a bad cell comes
            # back as text and is checked cell by cell.
            dtype={c: str for c in text},
            keep_default_na=False,
            na_values=[""],  # only an empty cell is missing; "NA" or "null" is a bad value
            skip_blank_lines=False,  # keep blank lines so row numbers stay line numbers
            on_bad_lines="warn",
            compression="gzip" if self.kind == "gzip" else None,
            encoding="utf-8",
        )

    def chunks(self, *, text: Collection[str] = ()) -> Iterator[Chunk]:
        """The rows, ``chunk_rows`` at a time; CSV columns named in ``text`` are read as text."""
        if self.kind == "parquet":
            yield from self._parquet_chunks()
        else:
            yield from self._csv_chunks(text)

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
            frame = batch.to_pandas()
            yield Chunk(frame, np.arange(first, first + len(frame), dtype=np.int64) + 2, [])
            first += len(frame)

    def _csv_chunks(self, text: Collection[str]) -> Iterator[Chunk]:
        skipped = np.empty(0, dtype=np.int64)  # lines the parser skipped so far, ascending
        reader = self._read_csv(chunksize=self.chunk_rows, text=text)
        with reader:
            while True:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", pd.errors.ParserWarning)
                    try:
                        frame = next(reader)
                    except StopIteration:
                        return
                    except _READ_ERRORS as exc:
                        raise InputError(f"{self.path}: unreadable: {exc}") from exc
                malformed = [
                    (int(m.group(1)), m.group(2).strip())
                    for w in caught
                    for m in _SKIPPED.finditer(str(w.message))
                ]
                if malformed:
                    skipped = np.sort(np.concatenate([skipped, [m[0] for m in malformed]]))
                # Data row k sits on line k + 2 (header is line 1) plus one for every skipped
                # line before it; shift[i] is the row index at which skipped line i takes effect.
                rows = frame.index.to_numpy(dtype=np.int64)
                shift = skipped - np.arange(len(skipped)) - 2
                lines = rows + 2 + np.searchsorted(shift, rows, side="right")
                yield Chunk(frame.reset_index(drop=True), lines, malformed)
