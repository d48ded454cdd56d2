"""Flux for the ``influxdb://`` store: literals, the queries' shared start, and InfluxDB's
annotated CSV answer read into one pandas frame.

Every query starts the same way::

    from(bucket: "gpu")
      |> range(start: 2024-05-01T12:00:00Z, stop: 2024-05-02T12:00:00Z)     [start, stop)
      |> filter(fn: (r) => r._measurement == "gpuwarden_sample")
      |> filter(fn: (r) => r._field == "power_w" or r._field == "gpu_temp_c")
      |> filter(fn: (r) => r.uuid == "GPU-a" or r.uuid == "GPU-b")

equality tests joined by ``or``, which InfluxDB pushes down to its storage (``contains()`` is
not), and then shapes the answer (``aggregateWindow``, ``pivot``, ``keep``, ``last``).

The answer is annotated CSV (docs.influxdata.com, "Annotated CSV"): tables, each under a
``#datatype`` / ``#group`` / ``#default`` header and a row of column names; tables of another
shape start a new header after a blank line; an error mid-stream is a table with the columns
``error`` and ``reference``. ``read_csv`` types each column by its ``#datatype`` (times become
Unix seconds, exact to the microsecond the store writes) and stacks every table into one frame.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from gpuwarden.errors import StoreError

#: ``range(stop:)`` when a read has no end: far past any reading, inside InfluxDB's time range
FAR_FUTURE = "2200-01-01T00:00:00Z"
_TIME_TYPES = ("dateTime:RFC3339", "dateTime:RFC3339Nano")


def string(text: str) -> str:
    """A Flux string literal (``${`` would start an interpolation: escaped)."""
    body = text.replace("\\", "\\\\").replace('"', '\\"').replace("${", "\\${")
    return '"' + body.replace("\n", "\\n").replace("\r", "\\r") + '"'


def time(ts: float | None) -> str:
    """A Flux time literal (RFC 3339, to the microsecond) for Unix seconds; None: far future.
    Times before 1970 are read from 1970."""
    if ts is None:
        return FAR_FUTURE
    micros = max(0, int(round(ts * 1e6)))
    seconds, frac = divmod(micros, 1_000_000)
    text = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{frac:06d}Z" if frac else f"{text}Z"


def any_of(column: str, values: Iterable[str]) -> str:
    """``(r["col"] == "a" or r["col"] == "b")``."""
    tests = [f"r[{string(column)}] == {string(v)}" for v in values]
    return "(" + " or ".join(tests) + ")" if tests else "false"


def select(
    bucket: str,
    measurement: str,
    *,
    start: float | None = None,
    stop: float | None = None,
    fields: Sequence[str] | None = None,
    tags: dict[str, Sequence[str]] | None = None,
) -> str:
    """The start every query shares (see the module docstring)."""
    lines = [
        f"from(bucket: {string(bucket)})",
        f"  |> range(start: {time(start if start is not None else 0.0)}, stop: {time(stop)})",
        f"  |> filter(fn: (r) => r._measurement == {string(measurement)})",
    ]
    if fields is not None:
        lines.append(f"  |> filter(fn: (r) => {any_of('_field', fields)})")
    for column, values in (tags or {}).items():
        lines.append(f"  |> filter(fn: (r) => {any_of(column, values)})")
    return "\n".join(lines)


def keep(columns: Sequence[str]) -> str:
    return f"  |> keep(columns: [{', '.join(string(c) for c in columns)}])"


PIVOT = '  |> pivot(rowKey: ["_time"], columnKey: ["_field"], valueColumn: "_value")'


def read_csv(rows: Iterable[Sequence[str]]) -> pd.DataFrame:
    """Annotated CSV rows (``csv.reader``'s lists) -> one frame of every table's rows, the
    ``result`` and ``table`` columns dropped. Raises ``StoreError`` for an error table."""
    parts: list[pd.DataFrame] = []
    types: list[str] = []
    defaults: list[str] = []
    header: list[str] | None = None
    body: list[Sequence[str]] = []

    def finish() -> None:
        if header is not None and body:
            parts.append(_typed(header, types, defaults, body))
        body.clear()

    for row in rows:
        if not row or (len(row) == 1 and not row[0]):
            continue  # the blank line between tables of different shapes
        first = row[0]
        if first.startswith("#"):
            if header is not None:  # a new header: the previous shape's rows are complete
                finish()
                header = None
            if first == "#datatype":
                types = list(row)
            elif first == "#default":
                defaults = list(row)
            continue
        if header is None:
            header = list(row)
            if header[1:3] == ["error", "reference"]:
                header = ["", "error", "reference"]
            continue
        if header[1:3] == ["error", "reference"]:
            reference = f" (reference {row[2]})" if len(row) > 2 and row[2] else ""
            raise StoreError(f"the query failed on the server: {row[1]}{reference}")
        body.append(row)
    finish()
    if not parts:
        return pd.DataFrame()
    if len(parts) == 1:
        return parts[0]
    return pd.concat(parts, ignore_index=True, sort=False)


def _typed(
    header: list[str], types: list[str], defaults: list[str], body: list[Sequence[str]]
) -> pd.DataFrame:
    raw = pd.DataFrame.from_records(body, columns=header)
    out = {}
    for i, name in enumerate(header):
        if i == 0 or name in ("result", "table"):
            continue
        kind = types[i] if i < len(types) else "string"
        column = raw.iloc[:, i].astype(object)
        default = defaults[i] if i < len(defaults) else ""
        if default:
            column = column.where(column != "", default)
        out[name] = _convert(column, kind)
    return pd.DataFrame(out)


def _convert(column: pd.Series, kind: str) -> pd.Series:
    empty = (column == "").to_numpy()
    if kind in _TIME_TYPES:
        stamps = pd.to_datetime(column.where(~empty, None), utc=True, format="ISO8601")
        micros = stamps.to_numpy(dtype="datetime64[us]").astype(np.int64)
        return pd.Series(np.where(empty, np.nan, micros / 1e6), index=column.index)
    if kind in ("double", "long", "unsignedLong", "duration"):
        return pd.to_numeric(column.where(~empty, None), errors="coerce").astype(np.float64)
    if kind == "boolean":
        return pd.Series(np.where(empty, np.nan, (column == "true").astype(float)))
    return column.astype(str)
