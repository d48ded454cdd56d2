"""VictoriaMetrics as a store that reads and writes.

    open_store("victoriametrics://vm:8428")
    open_store("victoriametrics+https://user:pw@vm.example?timeout=60&lookback=30d")

Reads are ``PrometheusStore``'s (PromQL over its Prometheus API, rollups on the server),
except that raw samples (the kept hourly rollups, the hour under way) come as the server's own
blocks (``/api/v1/export/native``, read by ``_vmnative``) instead of JSON text: about a sixth
of the bytes, nothing for the server to unpack or format, and a few numpy passes here.
Writes go to its JSON line import API (``/api/v1/import``), each call one request, checked
whole before anything is sent: a batch or frame with a bad value stores nothing of it. After a
write the server is asked to make it searchable at once (``/internal/force_flush``; ``flush=0``
leaves that to its own second or so).

Run VictoriaMetrics with ``-dedup.minScrapeInterval=1ms``: it then keeps one sample per series
and millisecond, the last written, so writing a sample again replaces it as it does in SQLite.
Its ``-retentionPeriod`` (one month by default) decides how long history stays. ``compact``
keeps the hourly rollups as series (``_prom_rollups``), so hourly reads of rolled-up hours
read 168 points per GPU and field a week instead of every sample.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from gpuwarden.errors import InputError, StoreRejected
from gpuwarden.health import Verdict
from gpuwarden.store import (
    _prom_reads,
    _prom_records,
    _prom_rollups,
    _series,
    verdict_series,
    window,
)
from gpuwarden.store._frames import frame_rows
from gpuwarden.store._promapi import Flat, PromApi, time_spans
from gpuwarden.store._promql import matcher, selector
from gpuwarden.store._records import batch_rows, rows_from
from gpuwarden.store._schema import ROLLUP_FIELDS
from gpuwarden.store._vmnative import decode
from gpuwarden.store.prometheus import PARAMS, PrometheusStore
from gpuwarden.telemetry import (
    FRAME_ID_COLUMNS,
    Batch,
    Event,
    Failure,
    Rejection,
    samples_to_frame,
)

logger = logging.getLogger(__name__)

SCHEMES = {
    "victoriametrics": ("http", 8428),
    "victoriametrics+http": ("http", 8428),
    "victoriametrics+https": ("https", 8428),
}
ROLLED = _prom_rollups.RESOLUTION
#: How far back the first rollup layout is looked for (its series are deleted whole).
YEARS_S = 20 * 365 * 86400.0
#: Bytes of JSON lines sent in one import request.
IMPORT_CHUNK_BYTES = 16 << 20


class NativeApi(PromApi):
    """``PromApi`` whose raw reads (``select_flat``) are VictoriaMetrics' native export: one
    request for all the selectors, its blocks decoded here. Where a series repeats a
    millisecond (parts not merged yet: which sample counts is the server's deduplication's
    choice) the query is asked instead; a server without the export (404) is asked by
    queries from then on.

    Blocks come whole (up to 8,192 samples of a series each), so a short window can bring many
    times the samples it holds: the kept rollups' week is mostly inside its blocks, the hour
    under way may be a sliver of blocks a day or a week long, and so is a week before the
    store's first week (its blocks run on into the next). Where the blocks' headers say they
    hold more than ``QUERY_OVERREAD`` times the samples in the window, nothing is decoded and
    the window is asked by a query, which the server cuts before sending; above
    ``MAX_OVERREAD``, windows as short are asked by queries from then on, without the export.
    """

    native = True
    #: samples in the blocks per sample in the window above which the window is asked by a
    #: query instead (``bench/bench_report.py``, 10,000 GPUs: decoding costs about 0.26 us a
    #: sample in the blocks, a query about 1.6 us a sample in the window, client and server)
    QUERY_OVERREAD = 8
    #: ... above which short windows go to queries without the export first
    MAX_OVERREAD = 64
    #: the longest window found too short for whole blocks (s)
    short_s = 0.0

    def select_flat(self, selectors: Sequence[str], start: float, end: float) -> list[Flat]:
        if not self.native or not selectors or end - start <= self.short_s:
            return super().select_flat(selectors, start, end)
        lo, hi = int(round(start * 1000)), int(round(end * 1000))
        # a second either side: the server reads its times as float seconds and truncates;
        # blocks come whole anyway and are cut to [lo, hi) here
        form = {
            "match[]": list(selectors),
            "start": f"{lo // 1000 - 1}",
            "end": f"{hi // 1000 + 1}",
        }
        path = self.prefix + "/api/v1/export/native"
        self.queries += 1
        try:
            got = self.http.fetch(
                "POST",
                path,
                lambda r: decode(r.content, lo, hi, max_overread=self.QUERY_OVERREAD),
                data=form,
                headers=self._plain,
            )
        except StoreRejected as exc:
            if exc.status != 404:
                raise
            self.native = False
            return super().select_flat(selectors, start, end)
        kept = got.estimate if got.skipped else len(got.flat.ts)
        if got.rows > self.MAX_OVERREAD * max(1.0, kept):
            self.short_s = max(self.short_s, end - start)
        if got.repeats or got.skipped:
            return super().select_flat(selectors, start, end)
        return [got.flat]


class VictoriaMetricsStore(PrometheusStore):
    """The ``Store`` protocol over VictoriaMetrics (single node): ``PrometheusStore``'s reads
    and writes through ``/api/v1/import``. ``flush``: make each write searchable at once."""

    what = "VictoriaMetrics"
    api_class = NativeApi

    def __init__(self, base: str, *, flush: bool = True, **kwargs: Any) -> None:
        super().__init__(base, **kwargs)
        self.flush = flush
        #: the earliest time written since ``compact`` last ran (its hours are rolled up again)
        self._dirty_from = math.inf

    @classmethod
    def schemes(cls) -> dict[str, tuple[str, int]]:
        return SCHEMES

    @classmethod
    def params(cls) -> tuple[str, ...]:
        return (*PARAMS, "flush")

    @classmethod
    def from_url(cls, url: str) -> VictoriaMetricsStore:
        """``victoriametrics://host:8428`` (``+https``, ``user:password@``, a bearer token in
        ``$GPUWARDEN_STORE_TOKEN``; ``?flush=0`` for bulk loads)."""
        parsed, kwargs = cls.url_options(url)
        kwargs["flush"] = parsed.params.get("flush", "1") not in ("0", "false", "no")
        return cls(parsed.base, **kwargs)

    # -- sending ---------------------------------------------------------------------------

    def _send(self, series: Iterable[_series.Series], *, progress: bool = False) -> None:
        series = list(series)
        oldest = min((int(s.ts_ms.min()) for s in series if len(s.ts_ms)), default=None)
        """Import ``series`` (JSON lines, ``IMPORT_CHUNK_BYTES`` a request), then flush."""
        with tqdm(unit="B", unit_scale=True, disable=not progress, desc="import") as bar:
            for body in _bodies(_series.import_lines(series)):
                self.http.request("POST", "/api/v1/import", content=body)
                bar.update(len(body))
        if self.flush:
            try:
                self.http.request("GET", "/internal/force_flush")
            except StoreRejected:  # a proxy or a cluster's vminsert without it: data shows later
                self.flush = False
        with self._lock:
            self._inv_at = -math.inf  # new GPUs may have appeared, at any time written
            if oldest is not None:
                self._written_from = min(self._written_from, oldest / 1000.0)

    # -- the writes ------------------------------------------------------------------------

    def write_batch(self, batch: Batch) -> None:
        """Store one collector batch (samples, events, assignments, node versions, rejected
        readings) in one import; a sample with no finite time refuses the whole batch."""
        samples = batch.samples
        ts, _ = batch_rows(batch)  # every GPU named, every time finite: or nothing is sent
        series: list[_series.Series] = []
        if samples:
            frame = samples_to_frame(samples).assign(rack=[s.gpu.rack for s in samples])
            series += _series.frame_series(frame_rows(frame))
            self._dirty_from = min(self._dirty_from, float(ts.min()))
        series += _series.event_series(batch.events)
        series += _series.assignment_series(batch.assignments)
        series += _series.node_series(batch.nodes)
        series += _series.rejection_series(batch.rejected)
        if series:
            self._send(series)

    def write_frame(self, frame: pd.DataFrame, *, progress: bool = False) -> int:
        """Bulk-write a wide frame (simulator output, ingest); returns rows written. The frame
        is checked first (``InputError`` naming the column): a bad one sends nothing."""
        plan = frame_rows(frame)
        if len(plan.ts) == 0:
            return 0
        self._send(_series.frame_series(plan), progress=progress)
        self._dirty_from = min(self._dirty_from, float(plan.ts.min()))
        return len(plan.ts)

    def write_events(self, events: Iterable[Event]) -> int:
        """Store events; returns how many were new (an identical event is kept once)."""
        events = list(events)
        if not events:
            return 0
        rows_from([(e.ts, e.gpu) for e in events])
        lo, hi = min(e.ts for e in events), max(e.ts for e in events)
        have = {
            (t, g.uuid, k, c, d)
            for t, g, k, c, d in _prom_records.event_rows(
                self._records(_series.EVENT, lo, hi + 0.001)
            )
        }
        new = {}
        for e in events:
            ts = round(e.ts * 1000) / 1000
            key = (ts, e.gpu.uuid, e.kind, e.code, e.detail)
            if key not in have:
                new[key] = e
        if new:
            self._send(_series.event_series(new.values()))
        return len(new)

    def write_failures(self, failures: Iterable[Failure], *, source: str | None = None) -> int:
        """Store failures; one of the same GPU, time and kind replaces the earlier record."""
        failures = list(failures)
        rows_from([(f.ts, f.gpu) for f in failures])
        if failures:
            self._send(_series.failure_series(failures, source))
        return len(failures)

    def write_rejections(self, rejections: Iterable[Rejection]) -> int:
        rejections = list(rejections)
        rows_from([(r.ts, r.gpu) for r in rejections])
        if rejections:
            self._send(_series.rejection_series(rejections))
        return len(rejections)

    def write_verdicts(self, verdicts: Iterable[Verdict]) -> int:
        """Store verdicts; a second one for the same GPU and time replaces the first."""
        verdicts = list(verdicts)
        if verdicts:
            # the verdicts whole, and as the series Grafana's risk panels read
            self._send([*_series.verdict_series(verdicts), *_points(verdicts)])
        return len(verdicts)

    def compact(self, now: float, *, progress: bool = False) -> None:
        """Keep the hourly rollups of every whole hour before ``now`` not rolled up yet (and of
        the hours written since the last compact) as series (``_prom_rollups``): the server
        rolls them up, a day at a time, and they are written back. Retention is the server's
        ``-retentionPeriod``."""
        end = float(np.floor(now / ROLLED) * ROLLED)
        self.migrate_first_layout(progress=progress)
        with self._lock:
            self._until_at = -math.inf
        until = self.rolled_until()
        inv = self._inventory()
        if inv.empty:
            return
        start = until if until is not None else float(inv["first_ts"].min())
        start = float(np.floor(min(start, self._dirty_from) / ROLLED) * ROLLED)
        target = _prom_reads.Target(inv.set_index("uuid", drop=False))
        fields = list(ROLLUP_FIELDS)
        # a bitmask's OR is a subquery per bit on the server, ten times a plain field's cost:
        # its raw samples (one field) are read instead and ORed here, as SQLite's compact does
        bitmasks = [f for f in fields if _prom_reads.is_bitmask(f)]
        plain = [f for f in fields if f not in bitmasks]
        interval = self.scrape_interval_s()
        for a, b in tqdm(time_spans(start, end, 86400.0), disable=not progress, desc="compact"):
            frame = _prom_reads.rollups(
                self.api, target, first=a, end=b, fields=plain, resolution_s=ROLLED,
                bit_step_s=self._bit_step(ROLLED), whole=True, interval_s=interval,
                sequential=True,
            )  # fmt: skip
            if bitmasks:
                raw = _prom_reads.raw(
                    self.api, target, start=a, end=b, fields=bitmasks, interval_s=interval
                )
                frame = _with(frame, window.bucketed(raw, bitmasks, ROLLED), bitmasks)
            frame = frame[frame["ts"] < b]
            done = _prom_rollups.markers(b, interval) if b > (until or -math.inf) else []
            self._send([*_prom_rollups.series(frame, target.gpus, fields), *done])
        self._dirty_from = math.inf
        with self._lock:
            self._until_at = -math.inf

    def migrate_first_layout(self, *, progress: bool = False) -> int:
        """Rewrite hourly rollups kept in the first layout (``_prom_rollups.FIRST``: one series
        per GPU and field) as today's series, a day at a time, then delete the old series;
        ``compact`` runs it first. Returns the (GPU, hour) rows moved. Every hour is written
        before anything is deleted (a failure leaves the old series, to be moved again), and
        the days moved run from the old series' first sample, so none is deleted unread."""
        sel = selector([_prom_rollups.FIRST], [matcher("resolution", [str(ROLLED)])])
        now = self.clock() + 1.0
        # the earliest sample of any old series: VictoriaMetrics deletes series whole
        got = self.api.query(f"min(tfirst_over_time({sel}[{YEARS_S:.0f}s]))", now)
        if not got or not len(got[0].values) or not np.isfinite(got[0].values[-1]):
            return 0
        first = float(np.floor(float(got[0].values[-1]) / ROLLED) * ROLLED)
        moved = 0
        spans = time_spans(first, now, 86400.0)
        for a, b in tqdm(spans, disable=not progress, desc="rollups' first layout"):
            for flat in self.api.select_flat([sel], a, b):
                frame, ids = _prom_rollups.first_layout(flat)
                fields = [f for f in ROLLUP_FIELDS if f in frame.columns]
                if fields:
                    self._send(_prom_rollups.series(frame, ids, fields))
                    moved += len(frame)
        try:
            self.http.request("POST", "/api/v1/admin/tsdb/delete_series", data={"match[]": sel})
        except StoreRejected as exc:  # e.g. vmauth keeps /api/v1/admin from us: moved again
            logger.warning("rollups moved to the current layout, the old series kept: %s", exc)
        logger.info("moved %d GPU-hours of rollups from the first layout", moved)
        with self._lock:
            self._until_at = -math.inf
        return moved

    def write_rollups(
        self,
        frame: pd.DataFrame,
        end: float,
        *,
        gpus: pd.DataFrame | None = None,
        interval_s: float | None = None,
        progress: bool = False,
    ) -> int:
        """Keep hourly rollups made elsewhere (another store's ``read_window`` at 3600 s: ts
        the hour, identity, ``ROLLUP_FIELDS``) as ``compact`` keeps its own, and mark the hours
        before ``end`` rolled up: moving a SQLite history here without the server rolling up
        every raw hour again. ``gpus``: that store's ``gpus()``, for the labels the frame lacks
        (rack); ``interval_s``: the scrape interval of the samples rolled up, when known (it
        decides how the GPUs are listed: ``_prom_inventory``). Returns the rows kept."""
        if not frame.empty and float(frame["ts"].max()) >= end:
            raise InputError(f"write_rollups: rollups at or after end {end!r}")
        fields = [f for f in ROLLUP_FIELDS if f in frame.columns]
        if not fields:
            raise InputError("write_rollups: the frame has none of the rollup fields")
        ids = frame.drop_duplicates("uuid").set_index("uuid", drop=False)
        ids["rack"] = (
            "" if gpus is None else ids["uuid"].map(gpus.set_index("uuid")["rack"]).fillna("")
        )
        series = _prom_rollups.series(frame, ids, fields)
        self._send([*series, *_prom_rollups.markers(float(end), interval_s)], progress=progress)
        with self._lock:
            self._until_at = -math.inf
        return len(frame)


def _with(frame: pd.DataFrame, extra: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """A rollup window's uuid, ts and fields, with ``columns`` of ``extra`` joined on (uuid,
    ts): an hour either has is kept (only these columns are written back)."""
    keys = ["uuid", "ts"]
    fields = [c for c in frame.columns if c not in FRAME_ID_COLUMNS]
    if extra.empty:
        return frame[[*keys, *fields]].assign(**{c: np.nan for c in columns})
    return frame[[*keys, *fields]].merge(extra[[*keys, *columns]], on=keys, how="outer")


def _points(verdicts: list[Verdict]) -> list[_series.Series]:
    """``verdict_series.points`` (risk score, state, transitions) as series to import."""
    return [
        _series.Series(
            {"__name__": p.name, **dict(p.labels)},
            np.array([int(round(p.ts * 1000))], dtype=np.int64),
            np.array([p.value], dtype=np.float64),
        )
        for p in verdict_series.points(verdicts)
    ]


def _bodies(lines: Iterator[str]) -> Iterator[bytes]:
    chunk: list[str] = []
    size = 0
    for line in lines:
        chunk.append(line)
        size += len(line)
        if size >= IMPORT_CHUNK_BYTES:
            yield "".join(chunk).encode()
            chunk, size = [], 0
    if chunk:
        yield "".join(chunk).encode()


__all__ = ["VictoriaMetricsStore"]
