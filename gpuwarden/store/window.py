"""One read of a time window at a resolution, for every backend: rollups stitched to the raw tail.

    store.read_window(start=t0, end=t1, fields=["power_w", "mem_temp_c_max"], resolution_s=3600)

``compact`` rolls raw samples up into buckets (``ROLLUP_RESOLUTIONS``); until it has, the newest
stretch exists only as raw samples. A window read at a resolution therefore takes every whole
bucket the store has rolled up, and aggregates the raw samples after them *here*, with
``aggregate``: the one implementation of the rollup, which ``compact`` uses too. A bucket read
from both agrees to the bit.

    counters        the last value read in the bucket (not a difference: increases are taken
                    later, reset-aware, with ``gpuwarden.counters``)
    bitmasks        the OR of the bits set in the bucket (clock-event reasons)
    other gauges    the mean; ``<field>_max`` the peak, for ``ROLLUP_MAX_FIELDS``

The last bucket the store rolled up is read again from raw samples: ``compact`` may have rolled
it up while it was still filling. Raw samples win over a rollup of the same GPU and bucket; a
rollup with no raw samples left (past raw retention) stays.

A backend with only ``read_samples`` gets all this by calling ``read_window`` below from its
``read_window`` method (``SqliteStore`` does); one that downsamples natively (PromQL
``*_over_time``, InfluxDB ``aggregateWindow``) may answer it itself, and the conformance suite
(``tests/store/conformance.py``) checks it gives the same frame.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError, StoreError
from gpuwarden.store._frames import check_fields
from gpuwarden.store._schema import ROLLUP_FIELDS, ROLLUP_MAX_FIELDS, rollup_agg
from gpuwarden.telemetry import FIELDS_BY_NAME, FRAME_ID_COLUMNS

if TYPE_CHECKING:
    from gpuwarden.store.base import ReadableStore

#: Raw samples after the rollups are read this much at a time (whole buckets, so no bucket is
#: split between two reads).
TAIL_CHUNK_S = 86400.0
_MAX_SUFFIX = "_max"
_ID = [c for c in FRAME_ID_COLUMNS if c != "ts"]


def raw_fields(fields: Iterable[str]) -> list[str]:
    """The raw fields a read of rollup ``fields`` needs: ``<field>_max`` needs ``field``."""
    out = []
    for f in fields:
        base = f.removesuffix(_MAX_SUFFIX)
        out.append(base if f not in FIELDS_BY_NAME and base in ROLLUP_MAX_FIELDS else f)
    return list(dict.fromkeys(out))


def _bitwise_or(frame: pd.DataFrame, keys: list[str], column: str) -> pd.Series:
    """OR of the bits set in ``column`` per group; NaN where the group read no value."""
    raw = frame[column].to_numpy()
    valid = np.isfinite(raw) & (raw >= 0)
    ints = np.where(valid, raw, 0).astype(np.int64)
    width = max(int(ints.max()).bit_length(), 1) if len(ints) else 1
    bits = pd.DataFrame({k: frame[k] for k in keys})
    for b in range(width):
        bits[b] = np.where(valid, (ints >> b) & 1, np.nan)
    per_bit = bits.groupby(keys, sort=True).max()
    weights = np.array([float(1 << b) for b in range(width)])
    out = per_bit.to_numpy() @ weights  # NaN propagates where no value was read
    return pd.Series(out, index=per_bit.index)


def aggregate(
    frame: pd.DataFrame,
    resolution_s: int,
    fields: Sequence[str] = ROLLUP_FIELDS,
    *,
    key: str = "uuid",
) -> pd.DataFrame:
    """Raw samples -> one row per (``key``, bucket), as ``compact`` rolls them up: ``key``,
    ``ts`` (the bucket start), ``n_samples``, then ``fields`` (rollup fields: catalogue fields
    and ``<field>_max`` peaks; a field the frame lacks is NaN). ``frame`` must be in time order
    within each ``key`` (``last`` is the latest reading). Sorted by ``key``, then ``ts``."""
    fields = list(fields)
    wanted = set(fields)
    base = [f for f in raw_fields(fields) if f in FIELDS_BY_NAME]
    frame = frame.assign(
        **{f: np.nan for f in base if f not in frame.columns},
        _bucket=np.floor(frame["ts"].to_numpy() / resolution_s) * resolution_s,
    )
    kinds = {f: rollup_agg(FIELDS_BY_NAME[f]) for f in base}
    mean = [f for f in base if kinds[f] == "mean" and f in wanted]
    last = [f for f in base if kinds[f] == "last" and f in wanted]
    peaks = [f for f in ROLLUP_MAX_FIELDS if f + _MAX_SUFFIX in wanted]
    keys = [key, "_bucket"]
    grouped = frame.groupby(keys, sort=True)
    parts: list[pd.DataFrame | pd.Series] = [grouped.size().rename("n_samples")]
    if mean:
        parts.append(grouped[mean].mean())
    if last:
        parts.append(grouped[last].last())  # last non-missing reading; rows are in time order
    if peaks:
        parts.append(grouped[peaks].max().add_suffix(_MAX_SUFFIX))
    parts += [
        _bitwise_or(frame, keys, f).rename(f) for f in base if kinds[f] == "or" and f in wanted
    ]
    out = pd.concat(parts, axis=1).reset_index().rename(columns={"_bucket": "ts"})
    return out[[key, "ts", "n_samples", *fields]]


def read_rolled(
    store: ReadableStore,
    *,
    start: float,
    end: float,
    fields: Sequence[str],
    resolution_s: int,
    uuids: Sequence[str] | None = None,
    hostnames: Sequence[str] | None = None,
) -> tuple[pd.DataFrame, float]:
    """The rolled-up buckets wholly inside ``[start's bucket, end)``, and where the raw tail
    starts: the last rolled-up bucket (read again, it may have been rolled up half full), or
    ``start``'s bucket when there are no rollups (a backend without them: raw samples only)."""
    first = float(np.floor(start / resolution_s) * resolution_s)
    whole_end = float(np.floor(end / resolution_s) * resolution_s)
    if whole_end <= first:
        return pd.DataFrame(), first
    try:
        rolled = store.read_samples(
            start=first,
            end=whole_end,
            uuids=uuids,
            hostnames=hostnames,
            fields=fields,
            resolution_s=resolution_s,
        )
    except (InputError, StoreError, NotImplementedError):
        # a backend without rollups (or without a peak column): everything comes from raw
        return pd.DataFrame(), first
    if rolled.empty:
        return rolled, first
    return rolled, float(rolled["ts"].max())


def read_tail(
    store: ReadableStore,
    *,
    start: float,
    end: float,
    fields: Sequence[str],
    resolution_s: int,
    uuids: Sequence[str] | None = None,
    hostnames: Sequence[str] | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Raw samples in ``[start, end)`` (``start`` on a bucket boundary) aggregated to
    ``resolution_s``, read ``TAIL_CHUNK_S`` at a time."""
    from tqdm import tqdm

    names = raw_fields(fields)
    spans = max(0, int(np.ceil((end - start) / TAIL_CHUNK_S)))
    parts = []
    lo = start
    for _ in tqdm(range(spans), desc="reading raw samples", unit="day", disable=not progress):
        hi = min(end, lo + TAIL_CHUNK_S)
        raw = store.read_samples(start=lo, end=hi, uuids=uuids, hostnames=hostnames, fields=names)
        parts.append(bucketed(raw, fields, resolution_s))
        lo = hi
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame()
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def bucketed(raw: pd.DataFrame, fields: Sequence[str], resolution_s: int) -> pd.DataFrame:
    """A wide frame of raw samples (``read_samples``) aggregated to ``resolution_s``, in the
    wide layout of a rollup read: identity columns, then ``fields``."""
    if raw.empty:
        return raw
    ident = raw.drop_duplicates("uuid", keep="last").set_index("uuid")
    out = aggregate(raw, resolution_s, fields)
    for c in _ID:
        if c != "uuid":
            out[c] = ident[c].reindex(out["uuid"]).to_numpy()
    return out[["ts", *_ID, *fields]]


def stitch(rolled: pd.DataFrame, tail: pd.DataFrame, resolution_s: int) -> pd.DataFrame:
    """Rollups, then the tail read after them (bucketed or raw rows): a GPU's rolled-up bucket
    that the tail has samples in is replaced by them. Sorted by ts, then hostname, gpu, uuid."""
    if tail.empty:
        return rolled
    if rolled.empty:
        return tail.sort_values(["ts", "hostname", "gpu", "uuid"], kind="stable", ignore_index=True)
    cut = float(tail["ts"].min())
    cut = float(np.floor(cut / resolution_s) * resolution_s)
    late = rolled["ts"].to_numpy() >= cut
    head, overlap = rolled[~late], rolled[late]
    if len(overlap):
        bucket = np.floor(tail["ts"].to_numpy() / resolution_s) * resolution_s
        covered = pd.MultiIndex.from_arrays([tail["uuid"].to_numpy(), bucket])
        mine = pd.MultiIndex.from_arrays([overlap["uuid"].to_numpy(), overlap["ts"].to_numpy()])
        overlap = overlap[~mine.isin(covered)]
    rest = pd.concat([overlap, tail], ignore_index=True) if len(overlap) else tail
    rest = rest.sort_values(["ts", "hostname", "gpu", "uuid"], kind="stable")
    return pd.concat([head, rest], ignore_index=True)


def read_window(
    store: ReadableStore,
    *,
    start: float,
    end: float,
    fields: Sequence[str] | None = None,
    resolution_s: int | None = None,
    uuids: Sequence[str] | None = None,
    hostnames: Sequence[str] | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """``ReadableStore.read_window`` built on ``read_samples``, for any backend.

    ``resolution_s`` None reads raw samples in ``[start, end)``. Otherwise one row per GPU and
    bucket from ``start``'s bucket to the bucket holding ``end``, nothing read at or after
    ``end``: whole buckets the store rolled up, then raw samples aggregated by ``aggregate``
    (``fields``, default all rollup fields, may name ``<field>_max`` peaks). ``progress``
    shows a bar over the days of raw samples read.
    """
    if not end > start:
        raise InputError(f"read_window: start {start!r} is not before end {end!r}")
    if not resolution_s:
        return store.read_samples(
            start=start, end=end, uuids=uuids, hostnames=hostnames, fields=fields
        )
    wanted = check_fields(fields, ROLLUP_FIELDS)
    rolled, raw_from = read_rolled(
        store,
        start=start,
        end=end,
        fields=wanted,
        resolution_s=resolution_s,
        uuids=uuids,
        hostnames=hostnames,
    )
    rest = read_tail(
        store,
        start=raw_from,
        end=end,
        fields=wanted,
        resolution_s=resolution_s,
        uuids=uuids,
        hostnames=hostnames,
        progress=progress,
    )
    out = stitch(rolled, rest, resolution_s)
    if out.empty:
        return empty(wanted)
    return out[[*FRAME_ID_COLUMNS, *wanted]].reset_index(drop=True)


def empty(fields: list[str]) -> pd.DataFrame:
    """An empty window frame: the identity columns and ``fields``, typed."""
    dtypes = {c: object for c in _ID} | {"ts": np.float64, "gpu": np.int64}
    return pd.DataFrame(
        {c: pd.Series(dtype=dtypes.get(c, np.float64)) for c in [*FRAME_ID_COLUMNS, *fields]}
    )
