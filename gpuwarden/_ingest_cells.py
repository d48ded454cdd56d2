"""One chunk of a history file read cell by cell: which cells read, and why the others do not.

A cell is judged by what its column is for. Time, host, GPU and UUID say which record a line
is: when one of them does not read (empty, not a number, a GPU index of 2^32 or -1, a time of
-5 or a boolean, a list), the line is no record and its reasons are noted against it
(``Cells.flag``). A metric cell that is no number (``hot``, ``NA``, a list or a boolean in a
Parquet column) is missing and marked ``unreadable``, to be counted, and the rest of its line is
kept; whether a number is a possible reading is ``gpuwarden.readings``' to say.

CSV cells arrive as text and are parsed by pyarrow, which takes a clean column whole; a column
with a bad cell is parsed again cell by cell, with ``_NUMBER`` deciding what is a number, so a
cell reads the same whatever its neighbours. Parquet cells keep their own types.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpuwarden._ingest_read import Chunk
from gpuwarden.readings import MAX_GPU_INDEX, bad_gpu_indices, bad_times, time_problem

#: What a text cell must look like to be a number: Arrow's float syntax (decimal, exponent,
#: inf, infinity, nan), case-insensitive. Python's float() accepts more ("1_000", Arabic digits);
#: those are no number here, whichever way the column is parsed.
_NUMBER = (
    r"^[+-]?(?:[0-9]+\.?[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
    r"|(?i:inf|infinity|nan(?:\([0-9A-Za-z_]*\))?))$"
)
_SECONDS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}


def _num(v: float) -> str:
    """A number as a report shows it: 1714564800000, -5, 1.5, inf."""
    return f"{v:.0f}" if abs(v) < 1e20 and v == np.floor(v) else f"{v:g}"


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _floats(arr: pa.Array) -> np.ndarray:
    """A numeric array as float64, NaN where null."""
    values = pc.cast(arr, pa.float64(), safe=False)
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)


def _text_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _parse(text: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Trimmed text (null where empty) -> (float64, NaN where empty or no number; which cells
    are no number), cell by cell."""
    ok = pc.fill_null(pc.match_substring_regex(text, _NUMBER), False)
    numbers = pc.if_else(ok, text, pa.scalar(None, pa.string()))
    try:
        values = _floats(numbers)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # Arrow refused what _NUMBER took
        values = np.array([np.nan if c is None else float(c) for c in numbers.to_pylist()])
    ok_np = np.asarray(ok.to_numpy(zero_copy_only=False), dtype=bool)
    return values, ~ok_np & np.asarray(text.is_valid().to_numpy(zero_copy_only=False), bool)


class Cells:
    """One chunk's columns, read as the caller asks; each problem is noted against its row."""

    def __init__(self, chunk: Chunk, names: list[str]) -> None:
        self.columns, self.lines, self.names = chunk.columns, chunk.lines, names
        self.n = len(chunk)
        self.reasons: dict[int, list[str]] = defaultdict(list)
        self._text: dict[int, pa.Array | None] = {}
        self._objects: dict[int, np.ndarray] = {}
        self._empty: dict[int, np.ndarray] = {}
        # A blank line: every cell empty. It is no record, so it is neither stored nor reported.
        self.blank = np.ones(self.n, dtype=bool)
        for i in range(len(self.columns)):
            self.blank &= self.empty(i)

    # -- the cells as text ----------------------------------------------------------------------

    def text_of(self, i: int) -> pa.Array | None:
        """Column ``i`` as trimmed text, null where empty; None when it has no text form (a
        list, a boolean, a time)."""
        if i not in self._text:
            self._text[i] = self._as_text(self.columns[i])
        return self._text[i]

    @staticmethod
    def _as_text(arr: pa.Array) -> pa.Array | None:
        t = arr.type
        if pa.types.is_dictionary(t):
            arr, t = arr.dictionary_decode(), t.value_type
        if pa.types.is_null(t):
            return pa.nulls(len(arr), pa.string())
        if not (_text_type(t) or _numeric(t)):
            if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
                return None
        try:
            text = pc.utf8_trim_whitespace(pc.cast(arr, pa.string()))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None  # binary that is not UTF-8
        return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)

    def empty(self, i: int) -> np.ndarray:
        """Which cells of column ``i`` are empty: null, or text that is only spaces. (A NaN in
        a Parquet number column is a value, read as missing where a metric may be missing.)"""
        if i not in self._empty:
            arr = self.columns[i]
            if pa.types.is_dictionary(arr.type):
                arr = arr.dictionary_decode()
            if _text_type(arr.type):
                blank = pc.or_(pc.equal(pc.binary_length(arr), 0), pc.utf8_is_space(arr))
                empty = pc.or_kleene(arr.is_null(), blank)
            elif _numeric(arr.type) or pa.types.is_boolean(arr.type):
                empty = arr.is_null()
            else:
                empty = (self.text_of(i) or arr).is_null()
            self._empty[i] = np.asarray(empty.to_numpy(zero_copy_only=False), dtype=bool)
        return self._empty[i]

    def shown(self, i: int, pos: int) -> str:
        """A cell as the file has it, quoted: '1.5', 'hot', '[1.0, 2.0]', 'True'."""
        text = self.text_of(i)
        cell = text[pos].as_py() if text is not None else self.columns[i][pos].as_py()
        if isinstance(cell, float) and cell.is_integer():
            cell = int(cell)
        return repr(str(cell))

    # -- noting problems ------------------------------------------------------------------------

    def flag(self, mask: np.ndarray, reason: Callable[[int], str]) -> None:
        mask = mask & ~self.blank
        for pos in np.flatnonzero(mask).tolist():
            self.reasons[pos].append(reason(pos))

    def good(self) -> np.ndarray:
        bad = np.zeros(self.n, dtype=bool)
        bad[list(self.reasons)] = True
        return ~bad & ~self.blank

    def bad_rows(self) -> list[tuple[int, str]]:
        return [(int(self.lines[pos]), "; ".join(why)) for pos, why in sorted(self.reasons.items())]

    # -- reading columns ------------------------------------------------------------------------

    def text(self, i: int, label: str) -> np.ndarray:
        """A required text column (host, UUID, kind): a line without it is no record."""
        if self.text_of(i) is None:
            self.flag(~self.empty(i), lambda p: f"{label} {self.shown(i, p)} is not text")
        self.flag(self.empty(i), lambda _: f"missing {label}")
        return self.optional_text(i)

    def optional_text(self, i: int | None) -> np.ndarray:
        """A text column as Python strings, "" where empty (or no text: unknown)."""
        if i is None:
            return np.full(self.n, "", dtype=object)
        if i not in self._objects:
            text = self.text_of(i)
            self._objects[i] = (
                np.full(self.n, "", dtype=object)
                if text is None
                else np.asarray(pc.fill_null(text, "").to_numpy(zero_copy_only=False), object)
            )
        return self._objects[i]

    def number(self, i: int, *, bools: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Column ``i`` as float64 (NaN where empty or unreadable) and which cells are no
        number. ``bools``: a boolean column reads 0/1 (a flag field), else it is no number."""
        arr = self.columns[i]
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        t = arr.type
        if _numeric(t) or (bools and pa.types.is_boolean(t)):
            return _floats(arr), np.zeros(self.n, dtype=bool)
        if _text_type(t):
            try:  # a clean column reads whole; empty cells are null already
                return _floats(arr), np.zeros(self.n, dtype=bool)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass  # a cell is no number, or has spaces around it: judge them one by one
        text = self.text_of(i)
        if text is None:  # lists, booleans, times: no cell of it is a number
            return np.full(self.n, np.nan), ~self.empty(i)
        return _parse(text)

    def index(
        self, i: int, what: str, *, required: bool = True, most: int = MAX_GPU_INDEX
    ) -> np.ndarray:
        """Integers 0..``most`` (a GPU index, an Xid); -1 where the cell is empty (allowed when
        not ``required``) or bad (the line is flagged)."""
        col = self.names[i]
        values, unreadable = self.number(i)
        bad = unreadable | bad_gpu_indices(values, most) | (np.isnan(values) & ~self.empty(i))
        self.flag(bad, lambda p: f"{col} {self.shown(i, p)} is not {what}")
        if required:
            self.flag(self.empty(i), lambda _: f"missing {col}")
        good = ~bad & ~np.isnan(values)
        return np.where(good, values, -1.0).astype(np.int64)

    def time(self, i: int) -> np.ndarray:
        """Unix seconds from RFC 3339 text, Unix seconds, or a Parquet time or date column."""
        col, arr = self.names[i], self.columns[i]
        t = arr.type
        unreadable = np.zeros(self.n, dtype=bool)
        if pa.types.is_timestamp(t):
            ts = _floats(pc.cast(arr, pa.int64())) / _SECONDS[t.unit]
        elif pa.types.is_date32(t):
            ts = _floats(pc.cast(arr, pa.int32())) * 86400.0
        elif pa.types.is_date64(t):
            ts = _floats(pc.cast(arr, pa.int64())) / 1e3
        else:
            ts, unreadable = self.number(i)
            text = self.text_of(i)
            what = "is neither RFC 3339 nor Unix seconds" if text is not None else "is not a time"
            if text is not None and unreadable.any():
                ts[unreadable] = _rfc3339(text.filter(pa.array(unreadable)))
                unreadable &= np.isnan(ts)
            unreadable |= np.isnan(ts) & ~self.empty(i)  # "nan" is no time
            self.flag(unreadable, lambda p: f"{col} {self.shown(i, p)} {what}")
        self.flag(np.isnan(ts) & ~unreadable, lambda _: f"missing {col}")
        self.flag(bad_times(ts), lambda p: f"{col} {_num(ts[p])} {time_problem(ts[p])}")
        return ts


def _rfc3339(text: pa.Array) -> np.ndarray:
    """RFC 3339 text (without an offset: UTC) -> Unix seconds, NaN where it is not."""
    stamps = pd.to_datetime(
        pd.Series(text.to_pylist(), dtype=object), utc=True, format="ISO8601", errors="coerce"
    )
    seconds = (stamps - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)
    return seconds.to_numpy(dtype=np.float64, na_value=np.nan)


__all__ = ["Cells"]
