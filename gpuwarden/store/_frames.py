"""Wide frames in and out of the SQLite store: checking a frame before it is written, and
building the frames the read methods return."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.store._records import GpuRow
from gpuwarden.telemetry import FIELDS_BY_NAME, FRAME_ID_COLUMNS
from gpuwarden.wording import plural

_REQUIRED = ("ts", "hostname", "gpu", "uuid")
_OPTIONAL_TEXT = ("model", "pci_bus_id", "rack")


@dataclass(frozen=True)
class FrameRows:
    """A checked frame, column-wise: ``codes[i]`` indexes ``gpus`` for row ``i``."""

    ts: np.ndarray
    codes: np.ndarray
    gpus: list[GpuRow]
    fields: list[str]
    values: list[np.ndarray]


def _first_row(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _as_float(column: pd.Series, name: str) -> np.ndarray:
    if not (pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column)):
        converted = pd.to_numeric(column, errors="coerce")
        bad = converted.isna().to_numpy() & column.notna().to_numpy()
        if bad.any():
            row = _first_row(bad)
            raise InputError(
                f"frame column {name!r} is not numeric: row {row} holds {column.iloc[row]!r}"
            )
        column = converted
    return column.to_numpy(dtype=np.float64, na_value=np.nan)


def _require_text(column: pd.Series, name: str) -> None:
    empty = (column.isna() | (column == "")).to_numpy()
    if empty.any():
        raise InputError(f"frame column {name!r} is empty in row {_first_row(empty)}")


def _text_at(frame: pd.DataFrame, name: str, rows: np.ndarray) -> list[str]:
    """``frame[name]`` at positions ``rows`` as text, "" where absent (only a few rows: cheap)."""
    if name not in frame.columns:
        return [""] * len(rows)
    return ["" if pd.isna(v) else str(v) for v in frame[name].iloc[rows].tolist()]


def frame_rows(frame: pd.DataFrame) -> FrameRows:
    """Check a wide frame and split it into arrays; raises ``InputError`` naming the problem.

    ``model``, ``pci_bus_id`` and ``rack`` are optional; columns that are neither identity nor
    catalogue fields are ignored with a warning.
    """
    missing = [c for c in _REQUIRED if c not in frame.columns]
    if missing:
        raise InputError(f"frame lacks {plural(len(missing), 'column')} {', '.join(missing)}")
    unknown = [
        str(c)
        for c in frame.columns
        if c not in _REQUIRED and c not in _OPTIONAL_TEXT and c not in FIELDS_BY_NAME
    ]
    if unknown:
        warnings.warn(
            f"ignoring frame {plural(len(unknown), 'column')} {', '.join(unknown)}", stacklevel=3
        )
    ts = _as_float(frame["ts"], "ts")
    if not np.isfinite(ts).all():
        raise InputError(
            f"frame column 'ts' is not a finite time in row {_first_row(~np.isfinite(ts))}"
        )
    gpu = _as_float(frame["gpu"], "gpu")
    bad_gpu = ~np.isfinite(gpu) | (gpu < 0) | (gpu != np.floor(gpu))
    if bad_gpu.any():
        row = _first_row(bad_gpu)
        raise InputError(f"frame column 'gpu' is not a GPU index in row {row}: {gpu[row]!r}")
    _require_text(frame["uuid"], "uuid")
    _require_text(frame["hostname"], "hostname")
    codes, uniques = pd.factorize(frame["uuid"])
    by_gpu = pd.Series(ts).groupby(codes)
    latest = by_gpu.idxmax().to_numpy()  # identity comes from each GPU's newest row
    first, last = by_gpu.min().to_numpy(), by_gpu.max().to_numpy()
    text = {c: _text_at(frame, c, latest) for c in ("hostname", *_OPTIONAL_TEXT)}
    gpus: list[GpuRow] = [
        (
            str(uniques[k]),
            text["hostname"][k],
            int(gpu[pos]),
            text["pci_bus_id"][k],
            text["model"][k],
            text["rack"][k],
            float(first[k]),
            float(last[k]),
        )
        for k, pos in enumerate(latest.tolist())
    ]
    fields = [c for c in FIELDS_BY_NAME if c in frame.columns]
    values = [_as_float(frame[c], c) for c in fields]
    return FrameRows(ts, codes.astype(np.int64), gpus, fields, values)


def check_fields(fields: Sequence[str] | None, allowed: Sequence[str]) -> list[str]:
    """The value columns a read asked for, all of them when ``fields`` is None."""
    if fields is None:
        return list(allowed)
    unknown = [f for f in fields if f not in allowed]
    if unknown:
        raise InputError(
            f"unknown {plural(len(unknown), 'field')} {', '.join(unknown)}; known: {', '.join(allowed)}"
        )
    return list(dict.fromkeys(fields))


def wide_frame(rows: list[tuple], fields: list[str], gpus: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``(gpu_id, ts, *fields)`` -> the wide frame, sorted by ts, hostname, gpu.

    ``gpus`` is the gpus table indexed by id; identity columns come from it, so they show the
    slot each GPU was last seen in.
    """
    data = np.array(rows, dtype=np.float64).reshape(len(rows), 2 + len(fields))
    gpu_ids = data[:, 0].astype(np.int64)
    ts = data[:, 1]
    slot_rank = gpus["slot_rank"].reindex(gpu_ids).to_numpy()
    order = np.lexsort((slot_rank, ts))
    ident = gpus.reindex(gpu_ids[order])
    cols: dict[str, object] = {
        "ts": ts[order],
        "hostname": ident["hostname"].to_numpy(dtype=object),
        "gpu": ident["gpu"].to_numpy(dtype=np.int64),
        "uuid": ident["uuid"].to_numpy(dtype=object),
        "model": ident["model"].to_numpy(dtype=object),
        "pci_bus_id": ident["pci_bus_id"].to_numpy(dtype=object),
    }
    for j, name in enumerate(fields):
        cols[name] = data[order, 2 + j]
    out = pd.DataFrame(cols)
    for c in ("hostname", "uuid", "model", "pci_bus_id"):
        out[c] = out[c].astype(str)
    return out[[*FRAME_ID_COLUMNS, *fields]]
