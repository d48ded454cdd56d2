"""The InfluxDB store: telemetry, events and verdicts in an InfluxDB 2.x bucket.

    open_store("influxdb://influx:8086?org=ops&bucket=gpu")          InfluxDB 2.x (/api/v2)
    open_store("influxdb+https://influx:8086?org=ops&bucket=gpu")    the same over TLS
    open_store("influxdb://influx:8086?org=-&bucket=telegraf/autogen")   InfluxDB 1.8+, v2 API

The token comes from ``$GPUWARDEN_INFLUX_TOKEN`` (or ``$INFLUX_TOKEN``; InfluxDB 1.8 takes
``user:password``), never from the URL, and never appears in a message. URL parameters:
``timeout`` (per request, default 30 s), ``retries`` (default 3, with backoff, on refused
connections, timeouts, 5xx and 429, honouring ``Retry-After``), ``batch`` (lines per write
request, default 5000), ``chunk`` (the longest time span one query reads, default 1d).

Writes are line protocol (``_lines`` names the measurements) through influxdb-client's
write service, gzip-compressed. Every record of a call is checked before the first line
is sent, so a bad record stores nothing; a call that fails partway may leave the requests already
accepted, and writing it again is safe (a point written twice is one point). Reads are Flux
(``_flux``): rollups are computed by the server at read time with ``aggregateWindow`` (counters
``last``, gauges ``mean``, ``<field>_max`` ``max``), and the clock-event bitmask's OR from
the distinct values of each window; ``compact`` has nothing to do (the bucket's retention
policy drops old data). docs/store.md lists where this differs from SQLite.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.errors import ConfigError, InputError
from gpuwarden.health import VERDICT_COLUMNS, Verdict, state_changes
from gpuwarden.store import _assignments, _flux, _lines, window
from gpuwarden.store._codec import verdict_from_json
from gpuwarden.store._frames import check_fields, frame_rows
from gpuwarden.store._influx_http import InfluxHttp
from gpuwarden.store._schema import ROLLUP_FIELDS, SAMPLE_FIELDS, rollup_agg
from gpuwarden.store._url import InfluxUrl, parse_influx_url
from gpuwarden.telemetry import (
    FIELDS_BY_NAME,
    FRAME_ID_COLUMNS,
    Batch,
    Event,
    Failure,
    GpuId,
    Rejection,
    mig_parent,
)

#: uuids per query: equality tests joined by ``or`` stay short enough to push down
UUIDS_PER_QUERY = 200
_GPU_COLUMNS = ["hostname", "gpu", "uuid", "pci_bus_id", "model", "rack", "first_ts", "last_ts"]
_MAX = "_max"


class InfluxStore:
    """A ``Store`` in an InfluxDB bucket (see the module docstring). ``token``: the API token
    (default: from the environment)."""

    def __init__(self, url: str | InfluxUrl, *, token: str | None = None) -> None:
        self.config = parse_influx_url(url) if isinstance(url, str) else url
        self.url = self.config.url
        for name in ("timeout_s", "chunk_s", "batch_lines"):
            if not getattr(self.config, name) > 0:
                raise ConfigError(f"{self.url}: {name} must be positive")
        self._http = InfluxHttp(self.config, token)

    @classmethod
    def from_url(cls, url: str) -> InfluxStore:
        return cls(url)

    # -- plumbing ------------------------------------------------------------------------

    def _send(
        self, lines: Iterable[str], what: str, *, progress: Callable[[int], Any] | None = None
    ) -> int:
        return self._http.send(lines, what, progress=progress)

    def _query(self, flux: str, what: str) -> pd.DataFrame:
        return self._http.query(flux, what)

    def _select(self, measurement: str, **kw: Any) -> str:
        return _flux.select(self.config.bucket, measurement, **kw)

    def _spans(self, start: float, stop: float, align: int = 1) -> Iterator[tuple[float, float]]:
        """``[start, stop)`` in pieces of at most ``chunk_s`` (a multiple of ``align``)."""
        step = max(align, math.floor(self.config.chunk_s / align) * align)
        lo = start
        while lo < stop:
            hi = min(stop, math.floor(lo / align) * align + step)
            yield lo, hi
            lo = hi

    # -- the GPU inventory ---------------------------------------------------------------

    def _inventory(self) -> pd.DataFrame:
        """Every GPU and MIG instance seen, indexed by uuid: the newest sighting's identity,
        first_ts, last_ts, slot_rank (order of hostname, gpu, uuid) and parent_uuid."""
        last = self._query(self._select(_lines.SEEN) + "\n  |> last()", "gpus")
        if last.empty:
            out = pd.DataFrame(columns=_GPU_COLUMNS)
        else:
            values = _by_field(last, "uuid")
            times = last.groupby("uuid")["_time"].max()
            first = self._query(
                self._select(_lines.SEEN, fields=["hostname"]) + "\n  |> first()", "gpus"
            ).set_index("uuid")["_time"]
            out = pd.DataFrame(index=pd.Index(values.index.to_numpy()))
            out["hostname"] = values["hostname"].astype(str)
            out["gpu"] = pd.to_numeric(values["gpu"]).astype(np.int64)
            out["uuid"] = out.index.astype(str)
            for c in ("pci_bus_id", "model", "rack"):
                out[c] = values[c].fillna("").astype(str) if c in values else ""
            out["first_ts"] = first.reindex(out.index).astype(np.float64)
            out["last_ts"] = times.reindex(out.index).astype(np.float64)
        out.index = pd.Index(out["uuid"].astype(str).to_numpy())
        out = out.sort_values(["hostname", "gpu", "uuid"], kind="stable")
        out["slot_rank"] = np.arange(len(out), dtype=np.int64)
        out["parent_uuid"] = [mig_parent(u) for u in out["uuid"]]
        return out

    def _select_uuids(
        self, inv: pd.DataFrame, uuids: Sequence[str] | None, hostnames: Sequence[str] | None
    ) -> list[str] | None:
        """As SQLite selects GPUs: None reads everything (MIG instances dropped after);
        ``hostnames`` are the slots GPUs were last seen in."""
        if uuids is None and hostnames is None:
            return None
        if uuids is not None:
            keep = set(uuids)
            if hostnames is not None:
                hosts = set(hostnames)
                keep = {u for u in keep if u in inv.index and inv.at[u, "hostname"] in hosts}
            return sorted(keep)
        whole = inv[(inv["parent_uuid"] == "") & inv["hostname"].isin(list(hostnames or ()))]
        return sorted(whole["uuid"])

    def _identify(
        self, frame: pd.DataFrame, inv: pd.DataFrame, columns: Sequence[str]
    ) -> pd.DataFrame:
        """``frame`` (with ``uuid``) plus identity ``columns`` from the inventory."""
        ident = inv.reindex(frame["uuid"].to_numpy())
        for c in columns:
            if c == "gpu":
                frame[c] = ident[c].fillna(-1).to_numpy(dtype=np.int64)
            else:
                frame[c] = ident[c].fillna("").to_numpy(dtype=object)
                frame[c] = frame[c].astype(str)
        frame["_rank"] = ident["slot_rank"].fillna(len(inv)).to_numpy()
        return frame

    # -- writes --------------------------------------------------------------------------

    def write_batch(self, batch: Batch) -> None:
        """Store one collector batch; every record is checked before anything is sent."""
        sightings = [(s.ts, s.gpu) for s in batch.samples] + [(e.ts, e.gpu) for e in batch.events]
        sightings += [(a.ts, a.gpu) for a in batch.assignments]
        sightings += [(r.ts, r.gpu) for r in batch.rejected]
        lines = _lines.seen(sightings)
        lines += _lines.samples(batch.samples)
        lines += _lines.events(batch.events)
        lines += _lines.assignments(batch.assignments)
        lines += _lines.nodes(batch.nodes)
        lines += _lines.rejections(batch.rejected)
        self._send(lines, "write_batch")

    def write_frame(self, frame: pd.DataFrame, *, progress: bool = False) -> int:
        """Bulk-write a wide frame (as ``SqliteStore.write_frame``); returns rows written."""
        from tqdm import tqdm

        plan = frame_rows(frame)
        n = len(plan.ts)
        if n == 0:
            return 0
        gpus = [GpuId(g[1], g[2], g[0], g[3], g[4], g[5]) for g in plan.gpus]
        seen = _lines.seen(
            [(g[6], gpu) for g, gpu in zip(plan.gpus, gpus, strict=True)]
            + [(g[7], gpu) for g, gpu in zip(plan.gpus, gpus, strict=True)]
        )
        codes = plan.codes
        uuids = [gpus[c].uuid for c in codes.tolist()]
        hosts = [gpus[c].hostname for c in codes.tolist()]
        slots = [gpus[c].index for c in codes.tolist()]
        lines = _lines.frame_samples(plan.ts, uuids, hosts, slots, plan.fields, plan.values)
        first = list(_take(lines, 1))  # checks the values (infinities) before anything is sent
        self._send(seen, "write_frame")
        with tqdm(total=n, unit="rows", disable=not progress, desc="write") as bar:
            self._send([*first, *lines], "write_frame", progress=bar.update)
        return n

    def write_events(self, events: Iterable[Event]) -> int:
        """Store events; returns how many were new (an identical event is kept once)."""
        events = list(events)
        lines = _lines.events(events)
        if not events:
            return 0
        known = self._event_keys(events)
        fresh = {(e.gpu.uuid, _lines.micros(e.ts), e.kind, _lines.event_key(e)) for e in events}
        self._send(_lines.seen([(e.ts, e.gpu) for e in events]) + lines, "write_events")
        return len(fresh - known)

    def _event_keys(self, events: Sequence[Event]) -> set[tuple[str, int, str, str]]:
        lo = min(e.ts for e in events)
        hi = max(e.ts for e in events) + 1e-6
        uuids = sorted({e.gpu.uuid for e in events})
        out: set[tuple[str, int, str, str]] = set()
        for part in _chunks(uuids, UUIDS_PER_QUERY):
            flux = self._select(
                _lines.EVENT, start=lo, stop=hi, fields=["detail"], tags={"uuid": part}
            )
            got = self._query(
                flux + "\n" + _flux.keep(["_time", "uuid", "kind", "key"]), "write_events"
            )
            if len(got):
                micros = np.round(got["_time"].to_numpy() * 1e6).astype(np.int64)
                out.update(zip(got["uuid"], micros.tolist(), got["kind"], got["key"], strict=True))
        return out

    def write_failures(self, failures: Iterable[Failure], *, source: str | None = None) -> int:
        """Store failures; one per GPU, time and kind (a repeat replaces the fields it has)."""
        failures = list(failures)
        lines = _lines.seen([(f.ts, f.gpu) for f in failures]) + _lines.failures(failures, source)
        self._send(lines, "write_failures")
        return len(failures)

    def write_rejections(self, rejections: Iterable[Rejection]) -> int:
        rejections = list(rejections)
        lines = _lines.seen([(r.ts, r.gpu) for r in rejections]) + _lines.rejections(rejections)
        self._send(lines, "write_rejections")
        return len(rejections)

    def write_verdicts(self, verdicts: Iterable[Verdict]) -> int:
        """Store verdicts (one per GPU and time: a repeat replaces it) and their series."""
        verdicts = list(verdicts)
        self._send(_lines.verdicts(verdicts), "write_verdicts")
        return len(verdicts)

    def compact(self, now: float) -> None:
        """Nothing to do: Flux rolls up at read time, and the bucket's retention policy drops
        old points."""

    # -- reads ---------------------------------------------------------------------------

    def read_samples(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
        hostnames: Sequence[str] | None = None,
        fields: Sequence[str] | None = None,
        resolution_s: int | None = None,
    ) -> pd.DataFrame:
        """Samples in ``[start, end)`` in the wide layout; ``resolution_s``: the buckets that
        start in ``[start, end)``, each rolled up whole by the server."""
        if resolution_s:
            res = _resolution(resolution_s)
            wanted = check_fields(fields, ROLLUP_FIELDS)
            lo = None if start is None else math.ceil(start / res) * res
            hi = None if end is None else math.ceil(end / res) * res
            return self._read(lo, hi, wanted, uuids, hostnames, res)
        wanted = check_fields(fields, SAMPLE_FIELDS)
        return self._read(start, end, wanted, uuids, hostnames, None)

    def read_window(
        self,
        *,
        start: float,
        end: float,
        fields: Sequence[str] | None = None,
        resolution_s: int | None = None,
        uuids: Sequence[str] | None = None,
        hostnames: Sequence[str] | None = None,
        progress: bool = False,
    ) -> pd.DataFrame:
        """``base.ReadableStore.read_window``, rolled up by the server: from ``start``'s
        bucket up to ``end`` (the last bucket only what came before ``end``)."""
        if not end > start:
            raise InputError(f"read_window: start {start!r} is not before end {end!r}")
        if not resolution_s:
            return self.read_samples(
                start=start, end=end, uuids=uuids, hostnames=hostnames, fields=fields
            )
        res = _resolution(resolution_s)
        wanted = check_fields(fields, ROLLUP_FIELDS)
        return self._read(
            math.floor(start / res) * res, end, wanted, uuids, hostnames, res, progress
        )

    def _read(
        self,
        start: float | None,
        end: float | None,
        wanted: list[str],
        uuids: Sequence[str] | None,
        hostnames: Sequence[str] | None,
        res: int | None,
        progress: bool = False,
    ) -> pd.DataFrame:
        from tqdm import tqdm

        inv = self._inventory()
        chosen = self._select_uuids(inv, uuids, hostnames)
        groups: list[list[str] | None] = (
            [None] if chosen is None else list(_chunks(chosen, UUIDS_PER_QUERY))
        )
        align = res or 1
        if start is None:  # from the oldest sighting, not from 1970
            oldest = inv["first_ts"].min() if len(inv) else math.nan
            start = math.floor(oldest / align) * align if math.isfinite(oldest) else 0.0
        lo = start
        hi = _far(inv) if end is None else end
        spans = list(self._spans(lo, hi, align)) if hi > lo else []
        parts = []
        for a, b in tqdm(spans, desc="reading", unit="chunk", disable=not progress):
            for group in groups:
                if group is not None and not group:
                    continue
                if res is None:
                    parts.append(self._raw(a, b, wanted, group))
                else:
                    parts.append(self._rolled(a, b, wanted, group, res))
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        if frame.empty:
            return window.empty(wanted)
        if chosen is None:  # a whole-fleet read counts no MIG instance as one more GPU
            frame = frame[[mig_parent(u) == "" for u in frame["uuid"]]]
        frame = frame.drop_duplicates(["uuid", "ts"], keep="last")
        frame = self._identify(
            frame.reset_index(drop=True), inv, ["hostname", "gpu", "model", "pci_bus_id"]
        )
        frame = frame.sort_values(["ts", "_rank"], kind="stable")
        for f in wanted:
            if f not in frame:
                frame[f] = np.nan
            frame[f] = frame[f].astype(np.float64)
        return frame[[*FRAME_ID_COLUMNS, *wanted]].reset_index(drop=True)

    def _raw(
        self, lo: float, hi: float, wanted: list[str], group: list[str] | None
    ) -> pd.DataFrame:
        every = len(wanted) == len(SAMPLE_FIELDS)
        flux = self._select(
            _lines.SAMPLE,
            start=lo,
            stop=hi,
            fields=None if every else wanted,
            tags=None if group is None else {"uuid": group},
        )
        got = self._query(
            flux + "\n" + _flux.PIVOT + "\n" + _flux.keep(["_time", "uuid", *wanted]),
            "read_samples",
        )
        return got.rename(columns={"_time": "ts"})

    def _rolled(
        self, lo: float, hi: float, wanted: list[str], group: list[str] | None, res: int
    ) -> pd.DataFrame:
        """One piece of a rolled-up read: a query per aggregate, joined on (uuid, bucket)."""
        by_fn: dict[str, list[str]] = {"mean": [], "last": [], "max": [], "or": []}
        for f in wanted:
            if f in FIELDS_BY_NAME:
                by_fn[rollup_agg(FIELDS_BY_NAME[f])].append(f)
            else:  # <field>_max
                by_fn["max"].append(f.removesuffix(_MAX))
        tags = None if group is None else {"uuid": group}
        parts = []
        for fn, names in by_fn.items():
            if not names:
                continue
            flux = self._select(_lines.SAMPLE, start=lo, stop=hi, fields=names, tags=tags)
            if fn == "or":
                part = self._bits(flux, res)
            else:
                flux += (
                    f'\n  |> aggregateWindow(every: {res}s, fn: {fn}, timeSrc: "_start", '
                    "createEmpty: false)\n"
                    + _flux.PIVOT
                    + "\n"
                    + _flux.keep(["_time", "uuid", *names])
                )
                part = self._query(flux, "read_window").rename(columns={"_time": "ts"})
                if fn == "max":
                    part = part.rename(columns={n: n + _MAX for n in names})
            if len(part):
                parts.append(part.set_index(["uuid", "ts"]))
        if not parts:
            return pd.DataFrame()
        out = parts[0].join(parts[1:], how="outer") if len(parts) > 1 else parts[0]
        return out.reset_index()

    def _bits(self, flux: str, res: int) -> pd.DataFrame:
        """The OR of each bitmask field per GPU and bucket, from the distinct values the server
        found in each window (Flux has no bitwise-OR aggregate that runs in its storage)."""
        flux += f'\n  |> window(every: {res}s)\n  |> distinct(column: "_value")\n' + _flux.keep(
            ["_start", "uuid", "_field", "_value"]
        )
        got = self._query(flux, "read_window")
        if got.empty:
            return got
        values = got["_value"].to_numpy(dtype=np.float64)
        valid = np.isfinite(values) & (values >= 0)
        got = got[valid].assign(_bits=values[valid].astype(np.int64))
        ored = got.groupby(["uuid", "_start", "_field"])["_bits"].agg(np.bitwise_or.reduce)
        out = ored.astype(np.float64).unstack("_field").reset_index()
        return out.rename(columns={"_start": "ts"})

    def read_events(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Events in ``[start, end)``: ts, hostname, gpu, uuid, kind, code (Int64), detail."""
        columns = ["ts", "hostname", "gpu", "uuid", "kind", "code", "detail"]
        tags: dict[str, Sequence[str]] = {}
        if kinds is not None:
            tags["kind"] = list(kinds)
        got = self._by_uuid(
            _lines.EVENT, start, end, uuids, tags, ["kind", "key", "code", "detail"], "read_events"
        )
        if got.empty:
            return _typed(pd.DataFrame(columns=columns), ints=("code",))
        got = self._identify(got, self._inventory(), ["hostname", "gpu"])
        got = got.sort_values(["ts", "hostname", "gpu", "kind", "key"], kind="stable")
        return _typed(got[columns].reset_index(drop=True), ints=("code",))

    def _by_uuid(
        self,
        measurement: str,
        start: float | None,
        end: float | None,
        uuids: Sequence[str] | None,
        tags: dict[str, Sequence[str]],
        columns: list[str],
        what: str,
        tail: str = "",
    ) -> pd.DataFrame:
        """Points of ``measurement`` pivoted to one row per series and time (``ts``, ``uuid``
        and ``columns``; a column no point has is absent), for ``uuids`` or all."""
        groups: list[list[str] | None] = (
            [None] if uuids is None else list(_chunks(sorted(set(uuids)), UUIDS_PER_QUERY))
        )
        parts = []
        for group in groups:
            part_tags = dict(tags)
            if group is not None:
                part_tags["uuid"] = group
            flux = self._select(measurement, start=start, stop=end, tags=part_tags) + tail
            flux += "\n" + _flux.PIVOT + "\n" + _flux.keep(["_time", "uuid", *columns])
            parts.append(self._query(flux, what))
        parts = [p for p in parts if len(p)]
        if not parts:
            return pd.DataFrame()
        got = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
        for c in columns:
            if c not in got:
                got[c] = np.nan
        return got.rename(columns={"_time": "ts"})

    def read_failures(
        self, *, start: float | None = None, end: float | None = None
    ) -> pd.DataFrame:
        """Failures in ``[start, end)``: ts, hostname, gpu, uuid, kind, precursor_start_ts,
        repair_s, xid (Int64)."""
        columns = ["ts", "hostname", "gpu", "uuid", "kind", "precursor_start_ts", "repair_s", "xid"]
        got = self._by_uuid(
            _lines.FAILURE,
            start,
            end,
            None,
            {},
            ["kind", "precursor_start_ts", "repair_s", "xid"],
            "read_failures",
        )
        if got.empty:
            return _typed(pd.DataFrame(columns=columns), ints=("xid",))
        got = self._identify(got, self._inventory(), ["hostname", "gpu"])
        got = got.sort_values(["ts", "hostname", "gpu", "kind"], kind="stable")
        return _typed(got[columns].reset_index(drop=True), ints=("xid",))

    def read_rejections(
        self, *, start: float | None = None, end: float | None = None
    ) -> pd.DataFrame:
        """Readings rejected in ``[start, end)``, counted per GPU, field and reason; most first."""
        columns = ["hostname", "gpu", "uuid", "field", "reason", "count", "first_ts", "last_ts"]
        got = self._by_uuid(
            _lines.REJECTION, start, end, None, {}, ["field", "reason"], "read_rejections"
        )
        if got.empty:
            out = _typed(pd.DataFrame(columns=columns), ints=())
            out["count"] = out["count"].astype(np.int64)
            return out
        counted = got.groupby(["uuid", "field", "reason"], as_index=False).agg(
            count=("ts", "size"), first_ts=("ts", "min"), last_ts=("ts", "max")
        )
        counted = self._identify(counted, self._inventory(), ["hostname", "gpu"])
        counted = counted.sort_values(
            ["count", "hostname", "gpu", "field"],
            ascending=[False, True, True, True],
            kind="stable",
        )
        out = _typed(counted[columns].reset_index(drop=True), ints=())
        out["count"] = out["count"].astype(np.int64)
        return out

    def read_verdicts(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
        latest: bool = False,
        changes: bool = False,
    ) -> pd.DataFrame:
        """Stored verdicts in ``[start, end)`` (``health.VERDICT_COLUMNS``), by ts; with
        ``latest`` each GPU's newest one in the window; ``changes``: only the state changes
        (filtered here, after the read)."""
        groups: list[list[str] | None] = (
            [None] if uuids is None else list(_chunks(sorted(set(uuids)), UUIDS_PER_QUERY))
        )
        records: list[Verdict] = []
        for group in groups:
            flux = self._select(
                _lines.VERDICT,
                start=start,
                stop=end,
                fields=["record"],
                tags=None if group is None else {"uuid": group},
            )
            if latest:
                flux += "\n  |> last()"
            got = self._query(
                flux + "\n" + _flux.keep(["_time", "uuid", "_value"]), "read_verdicts"
            )
            records += [verdict_from_json(text) for text in got.get("_value", [])]
        rows = [
            (v.ts, v.gpu.hostname, int(v.gpu.index), v.gpu.uuid, v.state, v.risk, v.cause,
             math.nan if v.since is None else v.since, v.changed_from, tuple(v.reasons), v.action,
             v.threshold)
            for v in records
        ]  # fmt: skip
        out = pd.DataFrame.from_records(rows, columns=list(VERDICT_COLUMNS))
        for c in ("ts", "risk", "since", "threshold"):
            out[c] = out[c].astype(np.float64)
        out["gpu"] = out["gpu"].astype(np.int64)
        out = out.sort_values(["ts", "hostname", "gpu"], kind="stable").reset_index(drop=True)
        return state_changes(out) if changes and not latest else out

    def gpus(self) -> pd.DataFrame:
        """Every GPU seen: hostname, gpu, uuid, pci_bus_id, model, rack, first_ts, last_ts."""
        inv = self._inventory()
        whole = inv[(inv["parent_uuid"] == "") & (inv["gpu"] >= 0)]
        return whole.sort_values(["hostname", "gpu", "first_ts"], kind="stable")[
            _GPU_COLUMNS
        ].reset_index(drop=True)

    def mig_instances(self) -> pd.DataFrame:
        """MIG instances seen: hostname, gpu, uuid, parent_uuid, model, first_ts, last_ts."""
        inv = self._inventory()
        out = inv[inv["parent_uuid"] != ""].sort_values(["hostname", "gpu", "uuid"], kind="stable")
        columns = ["hostname", "gpu", "uuid", "parent_uuid", "model", "first_ts", "last_ts"]
        return out[columns].reset_index(drop=True)

    def read_assignments(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Who held each GPU over time, overlapping ``[start, end)``: rebuilt from every
        reading of the GPUs' pod labels (the SQLite store keeps the intervals instead)."""
        got = self._by_uuid(
            _lines.ASSIGNMENT,
            None,
            None,
            uuids,
            {},
            ["namespace", "pod", "container", "held"],
            "read_assignments",
        )
        rows = _assignments.intervals(got) if len(got) else []
        out = pd.DataFrame.from_records(
            rows, columns=["uuid", "namespace", "pod", "container", "ts_from", "ts_to", "last_seen"]
        )
        if end is not None:
            out = out[out["ts_from"] < end]
        if start is not None:
            out = out[out["ts_to"].fillna(out["last_seen"]) >= start]
        out = self._identify(out.reset_index(drop=True), self._inventory(), ["hostname", "gpu"])
        out = out.sort_values(["ts_from", "hostname", "gpu", "uuid"], kind="stable")
        columns = [
            "uuid",
            "hostname",
            "gpu",
            "namespace",
            "pod",
            "container",
            "ts_from",
            "ts_to",
            "last_seen",
        ]
        out = out[columns].reset_index(drop=True)
        for c in ("ts_from", "ts_to", "last_seen"):
            out[c] = out[c].astype(np.float64)
        for c in ("uuid", "hostname", "namespace", "pod", "container"):
            out[c] = out[c].astype(str)
        out["gpu"] = out["gpu"].astype(np.int64)
        return out

    def read_nodes(self, *, hostnames: Sequence[str] | None = None) -> pd.DataFrame:
        """Per node: hostname, driver_version, cuda_driver_version ("" unknown), first_ts,
        last_ts; by hostname."""
        columns = ["hostname", "driver_version", "cuda_driver_version", "first_ts", "last_ts"]
        tags = None if hostnames is None else {"hostname": list(hostnames)}
        last = self._query(self._select(_lines.NODE, tags=tags) + "\n  |> last()", "read_nodes")
        if last.empty:
            return pd.DataFrame(
                {c: pd.Series(dtype=np.float64 if c.endswith("_ts") else object) for c in columns}
            )
        first = self._query(
            self._select(_lines.NODE, fields=["seen"], tags=tags) + "\n  |> first()", "read_nodes"
        ).set_index("hostname")["_time"]
        values = _by_field(last, "hostname")
        seen = last[last["_field"] == "seen"].set_index("hostname")["_time"]
        out = pd.DataFrame({"hostname": values.index.astype(str)})
        for c in ("driver_version", "cuda_driver_version"):
            out[c] = values[c].fillna("").astype(str).to_numpy() if c in values else ""
        out["first_ts"] = first.reindex(out["hostname"]).to_numpy(dtype=np.float64)
        out["last_ts"] = seen.reindex(out["hostname"]).to_numpy(dtype=np.float64)
        return out.sort_values("hostname", kind="stable").reset_index(drop=True)

    def close(self) -> None:
        """Close the client; a second close does nothing."""
        self._http.close()

    def __enter__(self) -> InfluxStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"InfluxStore({self.url!r})"


def _by_field(last: pd.DataFrame, key: str) -> pd.DataFrame:
    """``last()`` rows (one per ``key`` and field) -> one row per ``key``, a column per field."""
    last = last.drop_duplicates([key, "_field"], keep="last")
    return last.pivot(index=key, columns="_field", values="_value")


def _resolution(resolution_s: int) -> int:
    if not (isinstance(resolution_s, int | np.integer) and resolution_s > 0):
        raise InputError(
            f"resolution_s={resolution_s!r}: a whole number of seconds (None reads raw samples)"
        )
    return int(resolution_s)


def _chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for lo in range(0, len(items), size):
        yield list(items[lo : lo + size])


def _take(it: Iterator[str], n: int) -> Iterator[str]:
    for _ in range(n):
        try:
            yield next(it)
        except StopIteration:
            return


def _far(inv: pd.DataFrame) -> float:
    """The end of an open-ended read: just after the newest sighting."""
    newest = inv["last_ts"].max() if len(inv) else math.nan
    return float(newest) + 1.0 if math.isfinite(newest) else 0.0


def _typed(frame: pd.DataFrame, *, ints: Sequence[str]) -> pd.DataFrame:
    for c in frame.columns:
        if c in ("hostname", "uuid", "kind", "detail", "field", "reason"):
            frame[c] = frame[c].astype(str)
        elif c == "gpu":
            frame[c] = frame[c].astype(np.int64)
        elif c in ints:
            frame[c] = pd.array(frame[c].astype(np.float64), dtype="Int64")
        elif c != "count":
            frame[c] = frame[c].astype(np.float64)
    return frame
