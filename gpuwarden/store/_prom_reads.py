"""Telemetry reads over the Prometheus API: raw samples and server-side rollups, chunked.

Both cut the GPUs into chunks of whole hosts (selected by ``Hostname`` or ``hostname``,
whichever the GPU's series carry) and the window into spans, so that no query returns more
than ``PromApi.max_points`` points or more than 11,000 steps per series, and no query text is
longer than ``MAX_QUERY_LEN`` (VictoriaMetrics' default limit is 16 KiB). What comes back is
put together into the wide frame every store returns.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from gpuwarden.readings import check_columns
from gpuwarden.store import _prom_rollups, window
from gpuwarden.store._prom_rollups import FIELDS_LABEL, holding, split_ms
from gpuwarden.store._promapi import MAX_STEPS, Flat, PromApi, chunks, time_spans
from gpuwarden.store._promql import (
    BITMASK_BITS,
    FIELD_LABEL,
    Dialect,
    base_field,
    matcher,
    rollup,
    selector,
)
from gpuwarden.store._schema import ROLLUP_FIELDS, rollup_agg
from gpuwarden.store._series import gpu_of
from gpuwarden.telemetry import FIELD_BY_DCGM, FIELDS_BY_NAME, FRAME_ID_COLUMNS, MIG_INSTANCE_FIELDS

MAX_QUERY_LEN = 15_000
#: Raw samples one rollup query should make the server scan (a few seconds of its time).
MAX_SCAN = 3_000_000
#: GPUs from which a raw read is split across ``PromApi.concurrency`` queries at least.
MIN_SPLIT_GPUS = 128
_ID = [c for c in FRAME_ID_COLUMNS if c != "ts"]
#: The most cells (columns x buckets x GPUs) a read fills in place (``_Long.on_grid``): 4 GB.
MAX_GRID_CELLS = 500_000_000


@dataclass(frozen=True)
class Target:
    """The GPUs a read is about: the inventory rows selected (``uuid`` index), and how to
    select their series: hosts per host label, uuids of GPUs with no host label."""

    gpus: pd.DataFrame  # hostname, gpu, uuid, model, pci_bus_id, host_label; index uuid
    #: series of a field a selected GPU's hosts hold per GPU (MIG instances add theirs): what
    #: a query's answer size is reckoned with
    series_per_gpu: float = 1.0

    @property
    def host_size(self) -> int:
        """The most GPUs one host has: a group of whole hosts holds at least this many."""
        return int(self.gpus.groupby("hostname").size().max()) if len(self.gpus) else 1

    def groups(self, per_group: int) -> list[list[list[str]]]:
        """Matcher sets per chunk of about ``per_group`` GPUs, whole hosts together: each
        chunk is a list of alternatives (one per host label spelling)."""
        g = self.gpus
        hosts = g.groupby("hostname", sort=True).size()
        out: list[list[list[str]]] = []
        batch: list[str] = []
        count = 0
        for host, n in hosts.items():
            if batch and count + n > per_group:
                out.append(self._matchers(batch))
                batch, count = [], 0
            batch.append(str(host))
            count += int(n)
        if batch:
            out.append(self._matchers(batch))
        return out

    def _matchers(self, hosts: list[str]) -> list[list[str]]:
        rows = self.gpus[self.gpus["hostname"].isin(hosts)]
        alternatives = []
        for label, part in rows.groupby("host_label", sort=True):
            if label:
                alternatives.append([matcher(str(label), sorted(set(part["hostname"])))])
            else:
                alternatives.append([matcher("UUID", sorted({_parent(u) for u in part.index}))])
        return alternatives


def _parent(uuid: str) -> str:
    return uuid[4:].rpartition("/")[0] if uuid.startswith("MIG-") else uuid


def _key(labels: dict[str, str], field: str) -> str | None:
    """The uuid a value of ``field`` from a series with ``labels`` belongs to: a MIG
    instance's own fields to its key, everything else to the whole GPU."""
    gpu = gpu_of(labels, whole=field not in MIG_INSTANCE_FIELDS)
    return None if gpu is None else gpu.uuid


class _Long:
    """Points gathered from query answers as flat arrays: the GPU's slot in ``target``, the
    column's index in ``columns``, ts, value. A (GPU, column) met in two series is noted, and
    its cells combined when the frame is made."""

    def __init__(self, columns: Sequence[str], target: Target) -> None:
        self.columns = list(columns)
        self.target = target
        self.slot = {u: i for i, u in enumerate(target.gpus.index)}
        self.where = {c: j for j, c in enumerate(self.columns)}
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._cells: set[tuple[int, int]] = set()
        self.once = True
        #: ``on_grid``: (first bucket, bucket length, buckets), the cells (column x slot, a
        #: slot one per bucket and GPU in output order) and which slots hold a point
        self._grid: tuple[float, float, int] | None = None
        self._by_column: np.ndarray | None = None
        self._present: np.ndarray | None = None

    @functools.cached_property
    def _order(self) -> tuple[pd.DataFrame, np.ndarray]:
        """The GPUs in output order (hostname, gpu, uuid; index: their slot in ``target``),
        and each slot's place in it (sorted once: the grid needs it per answer and at the end)."""
        gpus = self.target.gpus
        rank = gpus.reset_index(drop=True).sort_values(["hostname", "gpu", "uuid"], kind="stable")
        order_of = np.empty(len(gpus), dtype=np.int64)
        order_of[rank.index.to_numpy()] = np.arange(len(gpus))
        return rank, order_of

    def on_grid(self, start: float, end: float, step: float) -> bool:
        """Put the points ``add_packed`` is given straight into the frame's cells, one row per
        bucket of ``step`` in ``[start, end)`` and GPU, instead of keeping them until
        ``wide``: a week of a fleet's rollups is tens of millions of points, and each pass
        over them as arrays costs more in fresh memory (page faults) than in arithmetic.
        False (nothing changed) when the grid would be more than ``MAX_GRID_CELLS``."""
        first = math.floor(start / step) * step
        buckets = max(1, math.ceil((end - first) / step))
        if buckets * len(self.target.gpus) * len(self.columns) > MAX_GRID_CELLS:
            return False
        self._grid = (first, step, buckets)
        return True

    def _note(self, g: int, columns: Iterable[int]) -> None:
        for c in columns:
            self.once &= (g, c) not in self._cells
            self._cells.add((g, c))

    def add_flat(
        self, flat: Flat, keys: Sequence[tuple[str, str] | None], lo: float, hi: float
    ) -> None:
        """Every series of ``flat`` whose key (uuid, column) is not None, points in
        ``[lo, hi)``."""
        g_of = np.full(len(keys) + 1, -1, dtype=np.int64)
        c_of = np.full(len(keys) + 1, -1, dtype=np.int64)
        for i, key in enumerate(keys):
            if key is not None:
                g, c = self.slot.get(key[0]), self.where.get(key[1])
                if g is not None and c is not None:
                    g_of[i], c_of[i] = g, c
                    self._note(g, [c])
        series = np.repeat(np.arange(len(keys)), flat.counts)
        keep = (c_of[series] >= 0) & (flat.ts >= lo) & (flat.ts < hi)
        s = series[keep]
        self.parts.append((g_of[s], c_of[s], flat.ts[keep], flat.values[keep]))

    def add_packed(self, flat: Flat, lo: float, hi: float) -> None:
        """Every rollup series of ``flat`` (``_prom_rollups``: one per GPU, each sample's
        column its offset into the hour), hours in ``[lo, hi)``."""
        hour_ms, k = split_ms(flat.milliseconds())
        series = np.repeat(np.arange(len(flat.labels)), flat.counts)
        width = max((len(lab.get(FIELDS_LABEL, "").split(",")) for lab in flat.labels), default=0)
        g_of = np.full(len(flat.labels), -1, dtype=np.int64)
        lookup = np.full((len(flat.labels), width + 1), -1, dtype=np.int64)
        tables: dict[str, np.ndarray] = {}
        for i, labels in enumerate(flat.labels):
            gpu = gpu_of(labels)
            g = None if gpu is None else self.slot.get(gpu.uuid)
            if g is None:
                continue
            names = labels.get(FIELDS_LABEL, "")
            if names not in tables:
                tables[names] = np.array(
                    [self.where.get(n, -1) for n in names.split(",")], dtype=np.int64
                )
            table = tables[names]
            g_of[i] = g
            lookup[i, : len(table)] = table
            self._note(g, table[table >= 0].tolist())
        kk = np.where((k >= 0) & (k < width), k, width)  # past a series' fields: none
        c = lookup[series, kk]
        # (hours in ms against seconds: exact, both well inside float64's integers)
        keep = (g_of[series] >= 0) & (c >= 0) & (hour_ms >= lo * 1000) & (hour_ms < hi * 1000)
        values = flat.values
        if not keep.all():  # (the usual read keeps every point: no copies then)
            series, c, hour_ms, values = series[keep], c[keep], hour_ms[keep], values[keep]
        if self._grid is None:
            self.parts.append((g_of[series], c, hour_ms / 1000.0, values))
            return
        first, step, buckets = self._grid
        if float(first * 1000).is_integer() and float(step * 1000).is_integer():
            bucket = hour_ms - int(first * 1000)
            bucket //= int(step * 1000)
        else:
            bucket = np.floor((hour_ms / 1000.0 - first) / step).astype(np.int64)
        inside = (bucket >= 0) & (bucket < buckets)
        if not inside.all():
            series, c, bucket, values = series[inside], c[inside], bucket[inside], values[inside]
        n = len(self.target.gpus)
        if self._by_column is None:
            self._by_column = np.full((len(self.columns), buckets * n), np.nan)
            self._present = np.zeros(buckets * n, dtype=bool)
        assert self._present is not None
        slot = bucket * n + self._order[1][g_of[series]]
        self._present[slot] = True
        cells = self._by_column.reshape(-1)
        cell = c * (buckets * n) + slot
        if self.once:
            cells[cell] = values
        else:  # a GPU's field in two series: the larger, as ``wide`` combines them
            np.fmax.at(cells, cell, values)

    def wide(self, means: set[str], step: float | None = None) -> pd.DataFrame:
        """One row per (uuid, ts) of the selected GPUs, identity from the inventory, sorted
        by ts, hostname, gpu; a (uuid, ts, column) read twice is combined (mean for
        ``means``, else the larger). ``step``: the times are buckets this long."""
        gpus = self.target.gpus
        columns, where = self.columns, self.where
        if self._grid is not None:
            return self._grid_frame(means)
        parts = [p for p in self.parts if len(p[2])]
        if not parts:
            return empty(columns)
        g = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
        c = np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False)
        ts = np.concatenate([p[2] for p in parts])
        values = np.concatenate([p[3] for p in parts])
        # rows: one per (GPU, time), in time order, then the GPUs' slot order
        rank, order_of = self._order
        r = order_of[g]
        row, key_ts, key_rank = _rows(ts, r, len(gpus), step)
        # a column of the grid is one contiguous array: the screen and the frame read them so
        by_column = np.full((len(columns), len(key_ts)), np.nan)
        cell = c * len(key_ts) + row  # into by_column
        cells = by_column.reshape(-1)  # a view: indexing it is many times faster than .flat
        if self.once:  # one series per GPU and column
            cells[cell] = values
        else:  # a GPU's series split in two (a relabel, MIG copies): combine per cell
            combined = pd.DataFrame(
                {
                    "cell": cell,
                    "v": values,
                    "mean": np.isin(c, [where[m] for m in means if m in where]),
                }
            )
            avg = combined[combined["mean"]].groupby("cell")["v"].mean()
            top = combined[~combined["mean"]].groupby("cell")["v"].max()
            for part in (avg, top):
                cells[part.index.to_numpy()] = part.to_numpy()
        return self._frame(by_column, key_ts, rank.index.to_numpy()[key_rank])

    def _grid_frame(self, means: set[str]) -> pd.DataFrame:
        """``wide`` of the points put in the grid (``on_grid``): the buckets and GPUs with a
        point, each column's cells as they are (no copy when every slot has one)."""
        if means & set(self.columns):
            raise ValueError("a grid combines cells by their larger value, not by a mean")
        if self._by_column is None or self._present is None or self._grid is None:
            return empty(self.columns)
        first, step, _ = self._grid
        n = len(self.target.gpus)
        taken = np.flatnonzero(self._present)
        by_column = (
            self._by_column if len(taken) == len(self._present) else self._by_column[:, taken]
        )
        rank = self._order[0]
        return self._frame(by_column, first + (taken // n) * step, rank.index.to_numpy()[taken % n])

    def _frame(self, by_column: np.ndarray, ts: np.ndarray, at: np.ndarray) -> pd.DataFrame:
        """The wide frame: ``by_column`` (a row per column) its readings, ``ts`` and ``at``
        (each row's inventory row) its rows; readings no GPU gives made missing
        (``_screen``). The readings stay one block, as they are (pandas would copy columns
        given one by one into one)."""
        gpus, columns = self.target.gpus, self.columns
        model_at, models = pd.factorize(gpus["model"])  # the inventory's, then each row's
        _screen(by_column.T, columns, (np.asarray(models, dtype=str), model_at[at]))
        frame = pd.DataFrame(by_column.T, columns=columns, copy=False)
        frame.insert(0, "ts", np.asarray(ts, dtype=np.float64))
        for j, col in enumerate(_ID, start=1):
            frame.insert(j, col, _taken(gpus.index if col == "uuid" else gpus[col], at,
                                        whole=col == "gpu"))  # fmt: skip
        return frame


def _taken(column: pd.Index | pd.Series, at: np.ndarray, *, whole: bool) -> Any:
    """``column``'s items at ``at``: a string column taken as it is kept (no string made
    again for each of millions of rows), anything else as numpy (int64 if ``whole``)."""
    if isinstance(column.dtype, pd.StringDtype):
        return column.array.take(at)
    values = column.to_numpy()[at]
    return values.astype(np.int64) if whole else values


def _rows(
    ts: np.ndarray, rank: np.ndarray, n: int, step: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each point's output row (one per time and GPU, by time then ``rank``), and each row's
    time and rank. Bucket times (``step``) index a dense grid of times x GPUs, with no sort of
    the millions of points a week of a fleet has; any other times are sorted."""
    if step and len(ts):
        t0 = float(ts.min())
        ti = np.rint((ts - t0) / step).astype(np.int64)
        slots = (int(ti.max()) + 1) * n
        if np.array_equal(t0 + ti * step, ts) and slots <= 4 * len(ts) + 1_000_000:
            key = ti * n + rank
            present = np.zeros(slots, dtype=bool)
            present[key] = True
            taken = np.flatnonzero(present)
            index = np.empty(slots, dtype=np.int64)
            index[taken] = np.arange(len(taken))
            return index[key], t0 + (taken // n) * step, taken % n
    idx = np.lexsort((rank, ts))
    ts_s, r_s = ts[idx], rank[idx]
    new = np.r_[True, (ts_s[1:] != ts_s[:-1]) | (r_s[1:] != r_s[:-1])]
    row = np.empty(len(idx), dtype=np.int64)
    row[idx] = np.cumsum(new) - 1
    return row, ts_s[new], r_s[new]


def _screen(grid: np.ndarray, columns: Sequence[str], coded: tuple[np.ndarray, np.ndarray]) -> None:
    """Readings no GPU gives (a DCGM sentinel, out of range: ``readings.check_columns``) made
    missing in place, as ingest and the collectors leave them out: a store written by
    dcgm-exporter or anything else holds what it was sent. A rollup column is judged as its
    field (a sentinel in an hour makes its peak, and its mean, impossible too). ``coded``:
    the boards (names, and each row's index into them)."""
    plain: dict[str, int] = {}
    peaks: dict[str, int] = {}
    for j, name in enumerate(columns):
        base = base_field(name)
        if base in FIELDS_BY_NAME:
            (plain if base == name else peaks)[base] = j
    for group in (plain, peaks):
        if group:
            bad = check_columns({n: grid[:, j] for n, j in group.items()}, None, coded=coded)
            for n, codes in bad.items():
                grid[codes != 0, group[n]] = np.nan


def empty(columns: Sequence[str]) -> pd.DataFrame:
    dtypes = {c: object for c in _ID} | {"ts": np.float64, "gpu": np.int64}
    return pd.DataFrame(
        {c: pd.Series(dtype=dtypes.get(c, np.float64)) for c in [*FRAME_ID_COLUMNS, *columns]}
    )


def raw(
    api: PromApi,
    target: Target,
    *,
    start: float,
    end: float,
    fields: Sequence[str],
    interval_s: float,
    progress: bool = False,
    rolled: tuple[str, str] | None = None,
) -> pd.DataFrame:
    """Raw samples of ``fields`` in ``[start, end)``: ``PromApi.select_flat``, chunked. ``rolled``:
    read the rollup series (``_prom_rollups``: metric name, resolution) instead, one per GPU,
    each sample's column its offset into its hour."""
    if target.gpus.empty or not fields:
        return empty(fields)
    if rolled is None:
        names = [
            n for f in fields for n in (FIELDS_BY_NAME[f].dcgm, *FIELDS_BY_NAME[f].dcgm_aliases)
        ]
        extra: list[str] = []
    else:  # the packed series holding a field asked for carry the rest of theirs too
        names = [rolled[0]]
        extra = [matcher("resolution", [rolled[1]]), holding(fields)]
    per_series = len(fields)
    if rolled is not None:
        per_series = sum(
            len(g) for g in _prom_rollups.groups(ROLLUP_FIELDS) if set(g) & set(fields)
        )
    # points one GPU gives per scrape interval, and in the whole window (a half-open window
    # of k intervals holds at most k samples of a series)
    interval = max(interval_s, 1e-3)
    per_step = per_series * target.series_per_gpu
    whole = per_step * math.ceil((end - start) / interval)
    # whole windows for as many GPUs as fit (each series then comes back once), and the
    # window cut in time only when one GPU's is too much
    per_group = max(1, min(len(target.gpus), int(api.max_points / max(whole, 1.0))))
    # at least ``concurrency`` queries for a large read: the server answers them on all its
    # cores while the answers already in are parsed here
    if len(target.gpus) >= MIN_SPLIT_GPUS:
        per_group = min(per_group, -(-len(target.gpus) // api.concurrency))
    # a group is whole hosts: when one host is more than the budget, time spans cut it
    least = target.host_size if per_group < target.host_size else 1
    fits = whole * least <= api.max_points
    span = (end - start) if fits else interval * max(1, int(api.max_points // (per_step * least)))
    groups = target.groups(per_group)
    work = [(alt, a, b) for alt in groups for a, b in time_spans(start, end, span)]
    out = _Long(fields, target)
    if rolled is not None and float(rolled[1]) == _prom_rollups.RESOLUTION:
        out.on_grid(start, end, float(rolled[1]))

    def one(item: tuple[list[list[str]], float, float]) -> list[Flat]:
        alternatives, a, b = item
        return api.select_flat([selector(names, [*m, *extra]) for m in alternatives], a, b)

    for flats in tqdm(api.imap(one, work), total=len(work), disable=not progress, desc="reading"):
        for flat in flats:
            if rolled is not None:
                out.add_packed(flat, start, end)
                continue
            keys: list[tuple[str, str] | None] = []
            for labels in flat.labels:
                field = FIELD_BY_DCGM.get(labels.get("__name__", ""))
                key = None if field is None or field not in fields else _key(labels, field)
                keys.append(None if key is None or field is None else (key, field))
            out.add_flat(flat, keys, start, end)
    return out.wide(set(), step=None if rolled is None else float(rolled[1]))


def rollups(
    api: PromApi,
    target: Target,
    *,
    first: float,
    end: float,
    fields: Sequence[str],
    resolution_s: int,
    bit_step_s: int,
    whole: bool = False,
    progress: bool = False,
    interval_s: float = 60.0,
    sequential: bool = False,
) -> pd.DataFrame:
    """One row per GPU and bucket from the bucket at ``first`` to the one holding ``end``,
    computed by the server; the last bucket stops at ``end`` unless ``whole``. Each query
    returns at most ``api.max_points`` points and scans about ``MAX_SCAN`` raw samples
    (``interval_s`` apart; a bitmask counts ``BITMASK_BITS`` times). ``sequential``: one
    query at a time (a long roll-up must not crowd the server's queue)."""
    if target.gpus.empty or not fields:
        return empty(fields)
    dialect = api.dialect
    r = resolution_s
    whole_end = float(np.floor(end / r) * r)
    if whole and whole_end < end:
        whole_end += r
    masks = [f for f in fields if is_bitmask(f)]
    if masks and not dialect.tfuncs:
        # Prometheus' engine ORs a bitmask's bits over time with a subquery per bit, each
        # reading every raw sample again: reading the raw samples once and ORing them here
        # (``window.bucketed``, as for the hour under way) costs it several times less
        rest = [f for f in fields if f not in masks]
        gauges = rollups(
            api, target, first=first, end=end, fields=rest, resolution_s=r,
            bit_step_s=bit_step_s, whole=whole, progress=progress, interval_s=interval_s,
            sequential=sequential,
        )  # fmt: skip
        samples = raw(api, target, start=first, end=max(end, whole_end), fields=masks,
                      interval_s=interval_s)  # fmt: skip
        return _joined(gauges, window.bucketed(samples, masks, r), fields)
    # raw samples one GPU's bucket scans: a bitmask field steps through it once per bit;
    # Prometheus' engine gets a query per field (``_queries``), so a query's share is one's
    weights = [BITMASK_BITS if is_bitmask(f) else 1 for f in fields]
    per_gpu, weight = (len(fields), sum(weights)) if dialect.tfuncs else (1, max(weights))
    scan = weight * max(1.0, r / max(interval_s, 1e-3)) * target.series_per_gpu
    # points one GPU's answer gives per bucket (its series, MIG instances' too)
    points = per_gpu * target.series_per_gpu
    steps = max(1, min(MAX_STEPS, int(round((whole_end - first) / r)), 168))
    per_group = min(int(api.max_points // (points * steps)), int(MAX_SCAN // (scan * steps)))
    host = target.host_size  # groups are whole hosts
    if per_group < host:  # one host's window is too much: fewer buckets a query
        fit = min(api.max_points // (points * host), MAX_SCAN // (scan * host))
        steps = max(1, min(steps, int(fit)))
    per_group = max(1, min(len(target.gpus), per_group))
    groups = _fit(target, per_group, fields, r, dialect, bit_step_s)
    spans = [(a, b, float(r)) for a, b in time_spans(first, whole_end, steps * r)]  # eval a+r..b
    if end > whole_end:
        spans.append((whole_end, end, end - whole_end))  # the partial bucket
    work = [
        (query, a, b, width)
        for alt in groups
        for matchers in alt
        for a, b, width in spans
        for query in _queries(fields, matchers, width, dialect, bit_step_s, partial=width != r)
    ]
    out = _Long(fields, target)
    means = {f for f in fields if f in FIELDS_BY_NAME and rollup_agg(FIELDS_BY_NAME[f]) == "mean"}

    def one(item: tuple[str, float, float, float]) -> Flat:
        query, a, b, width = item
        if width == r:
            flat = api.query_range_flat(query, a + r, b, r)
        else:
            flat = api.query_flat(query, b)
        # each point at its bucket's start
        return Flat(flat.labels, flat.counts, np.round(flat.ts - width, 3), flat.values)

    answers = map(one, work) if sequential else api.imap(one, work)
    for flat in tqdm(answers, total=len(work), disable=not progress, desc="rollups"):
        keys: list[tuple[str, str] | None] = []
        for labels in flat.labels:
            column = labels.get(FIELD_LABEL, "")
            key = _key(labels, base_field(column)) if column in fields else None
            keys.append(None if key is None else (key, column))
        out.add_flat(flat, keys, -np.inf, np.inf)
    return out.wide(means, step=float(r))


def _joined(a: pd.DataFrame, b: pd.DataFrame, fields: Sequence[str]) -> pd.DataFrame:
    """Two wide rollup frames of different fields as one: a row per GPU and bucket in either."""
    if b.empty:
        return a.reindex(columns=[*FRAME_ID_COLUMNS, *fields])
    if a.empty:
        return b.reindex(columns=[*FRAME_ID_COLUMNS, *fields])
    out = a.merge(b, on=FRAME_ID_COLUMNS, how="outer")[[*FRAME_ID_COLUMNS, *fields]]
    return out.sort_values(["ts", "hostname", "gpu", "uuid"], kind="stable", ignore_index=True)


def is_bitmask(name: str) -> bool:
    field = FIELDS_BY_NAME.get(base_field(name))
    return field is not None and name == field.name and rollup_agg(field) == "or"


def _queries(
    fields: Sequence[str],
    matchers: list[str],
    width: float,
    dialect: Dialect,
    bit_step_s: int,
    *,
    partial: bool,
) -> list[str]:
    """The rollup of every field as few queries as fit ``MAX_QUERY_LEN`` each; one query per
    field on Prometheus' engine, whose ``a or b or c ...`` hashes the labels of every series
    on its left at each step, again for each ``or``: quadratic in the fields (a week of 25
    fields cost its server 3.5 times the CPU of 25 queries)."""
    parts = [
        f"({rollup(f, matchers, width, dialect, bit_step_s, partial=partial)})" for f in fields
    ]
    if not dialect.tfuncs:
        return parts
    out: list[str] = []
    current: list[str] = []
    for part in parts:
        if current and sum(len(p) + 4 for p in current) + len(part) > MAX_QUERY_LEN:
            out.append(" or ".join(current))
            current = []
        current.append(part)
    if current:
        out.append(" or ".join(current))
    return out


def _fit(
    target: Target,
    per_group: int,
    fields: Sequence[str],
    resolution_s: int,
    dialect: Dialect,
    bit_step_s: int,
) -> list[list[list[str]]]:
    """Host groups whose longest single-field query fits ``MAX_QUERY_LEN``."""
    while True:
        groups = target.groups(per_group)
        longest = max(
            len(rollup(f, m, resolution_s, dialect, bit_step_s, partial=True))
            for alt in groups
            for m in alt
            for f in fields
        )
        if longest <= MAX_QUERY_LEN or per_group == 1:
            return groups
        per_group = max(1, per_group // 2)


__all__ = ["Target", "chunks", "empty", "is_bitmask", "raw", "rollups"]
