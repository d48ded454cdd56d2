"""A Prometheus-compatible server as a read-only store: Prometheus, Thanos Query, Mimir, or
VictoriaMetrics' Prometheus API.

    open_store("prometheus+http://prometheus:9090")
    open_store("prometheus+https://user:pw@mimir.example/prometheus?lookback=30d&timeout=60")

Telemetry is what dcgm-exporter (or gpuwarden's own exporter) exports, read with PromQL under
dcgm-exporter's names and either host label (``_series``). Hourly windows are rolled up by the
server (``_promql``), so a week of a fleet comes back as 168 points per GPU and field, not as
every scrape. Xids come from dcgm-exporter's and gpuwarden's Xid series (``_prom_events``);
gpuwarden's own records (events, failures, verdicts, ...) are read where a writable store of
the same kind put them (``victoriametrics://``). Nothing is written: ``gpuwarden serve`` keeps
its verdicts in ``--verdicts``.

"Now" is the clock (``clock=``); the GPUs are those that reported in the ``lookback`` before it
(default 8 days: the model's window; a week of backtest or training needs more).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.config import parse_duration
from gpuwarden.errors import ConfigError, InputError
from gpuwarden.health import state_changes
from gpuwarden.store import (
    _prom_events,
    _prom_inventory,
    _prom_labels,
    _prom_reads,
    _prom_records,
    _prom_rollups,
    _series,
    window,
)
from gpuwarden.store._frames import check_fields
from gpuwarden.store._promapi import DEFAULT_MAX_POINTS, MAX_STEPS, PromApi, time_spans
from gpuwarden.store._promql import matcher, selector
from gpuwarden.store._remote import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    RemoteHttp,
    RemoteUrl,
    parse_remote_url,
    positive,
    token_header,
)
from gpuwarden.store._schema import ROLLUP_FIELDS, ROLLUP_RESOLUTIONS, SAMPLE_FIELDS
from gpuwarden.telemetry import FIELDS_BY_NAME, mig_parent

SCHEMES = {
    "prometheus": ("http", 9090),
    "prometheus+http": ("http", 9090),
    "prometheus+https": ("https", 9090),
}
#: URL parameters (all optional); docs/store.md says what each does.
PARAMS = (
    "timeout", "retries", "lookback", "max_points", "concurrency", "token_env", "scrape_interval",
)  # fmt: skip
#: The history a score reads (``models.features.HISTORY_H``: two weeks and two hours) and a day.
DEFAULT_LOOKBACK_S = 15 * 86400.0
DEFAULT_TOKEN_ENV = "GPUWARDEN_STORE_TOKEN"
#: Series that say a GPU (or a MIG instance) reported.
PRESENCE = tuple(
    FIELDS_BY_NAME[f].dcgm for f in ("gpu_temp_c", "power_w", "fb_used_mib", "gr_engine_active")
)
#: The list of GPUs is looked for over the whole lookback again this often (in between, only
#: since the last look).
FULL_REFRESH_S = 3600.0
#: Gaps in the records gpuwarden reads raw (events, verdicts...) are read this much at a time.
RECORD_SPAN_S = 86400.0
#: Up to this many GPUs' verdicts are selected by uuid on the server (the query's length).
_FEW_UUIDS = 200


class PrometheusStore:
    """The read tier of the store protocol over a Prometheus-compatible HTTP API.

    ``base``: ``http(s)://host:port[/path]``. ``lookback_s``: how far back GPUs are looked
    for. ``max_points``: the most points one query may return. ``scrape_interval_s``: the
    shortest time between a GPU's samples (found from the data when None); bitmask rollups
    step through it. ``refresh_s``: how long the list of GPUs is reused before it is
    brought up to date (incrementally). ``clock`` and ``http`` are test seams.
    """

    what = "Prometheus"
    #: how its HTTP API is asked (``victoriametrics://`` reads raw samples as native blocks)
    api_class: type[PromApi] = PromApi

    def __init__(
        self,
        base: str,
        *,
        url: str | None = None,
        shown: str | None = None,
        auth: tuple[str, str] | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        lookback_s: float = DEFAULT_LOOKBACK_S,
        max_points: int = DEFAULT_MAX_POINTS,
        concurrency: int = 4,
        scrape_interval_s: float | None = None,
        refresh_s: float = 30.0,
        clock: Callable[[], float] = time.time,
        http: RemoteHttp | None = None,
    ) -> None:
        self.url = url or base
        self.http = http or RemoteHttp(
            base,
            what=self.what,
            shown=shown,
            auth=auth,
            headers=headers,
            timeout_s=timeout_s,
            retries=retries,
        )
        self.api = self.api_class(self.http, max_points=max_points, concurrency=concurrency)
        self.lookback_s = float(lookback_s)
        self.refresh_s = float(refresh_s)
        self.clock = clock
        self._interval_s = scrape_interval_s
        self._inv: pd.DataFrame | None = None
        self._inv_at = -math.inf
        self._inv_to = -math.inf
        self._inv_full = -math.inf
        #: the oldest time written through this store since the GPUs were last looked for
        self._written_from = math.inf
        #: how far back a caller needs the GPU list to reach (``reach_back``)
        self._reach_from = math.inf
        self._until: tuple[float | None, float | None] = (None, None)
        self._until_at = -math.inf
        self._lock = threading.RLock()
        #: reads the kept rollups beside the live ones (``_rolled``)
        self._side = ThreadPoolExecutor(1, thread_name_prefix="rollups")

    @classmethod
    def url_options(cls, url: str) -> tuple[RemoteUrl, dict[str, Any]]:
        """Check ``url`` and turn its parameters into constructor keywords."""
        parsed = parse_remote_url(url, schemes=cls.schemes(), params=cls.params())
        p, shown = parsed.params, parsed.shown
        kwargs: dict[str, Any] = {
            "url": shown,
            "shown": shown,
            "auth": parsed.auth,
            "headers": token_header(p.get("token_env", DEFAULT_TOKEN_ENV)),
            "timeout_s": positive(p, "timeout", DEFAULT_TIMEOUT_S, shown),
            "retries": _count(p, "retries", DEFAULT_RETRIES, shown),
            "max_points": int(positive(p, "max_points", DEFAULT_MAX_POINTS, shown)),
            "concurrency": int(positive(p, "concurrency", 4, shown)),
        }
        for key, kw in (("lookback", "lookback_s"), ("scrape_interval", "scrape_interval_s")):
            if key in p:
                kwargs[kw] = parse_duration(p[key], key)
        return parsed, kwargs

    @classmethod
    def schemes(cls) -> dict[str, tuple[str, int]]:
        return SCHEMES

    @classmethod
    def params(cls) -> tuple[str, ...]:
        return PARAMS

    @classmethod
    def from_url(cls, url: str) -> PrometheusStore:
        """``prometheus+http://host:9090`` (or ``prometheus+https://``; ``user:password@``
        for basic auth, a bearer token in ``$GPUWARDEN_STORE_TOKEN``)."""
        parsed, kwargs = cls.url_options(url)
        return cls(parsed.base, **kwargs)

    # -- the GPUs --------------------------------------------------------------------------

    def _inventory(self) -> pd.DataFrame:
        """Every GPU and MIG instance that reported in the lookback: the ``gpus()`` columns
        plus ``parent_uuid`` and ``host_label``; brought up to date every ``refresh_s``."""
        with self._lock:
            now = self.clock()
            if self._inv is not None and now - self._inv_at < self.refresh_s:
                return self._inv
            # from where the last look left off (samples arrive near now), but the whole
            # lookback again every hour, and from the oldest time this store wrote since
            full = self._inv is None or now - self._inv_full >= FULL_REFRESH_S
            oldest = min(now - self.lookback_s, self._reach_from)
            since = oldest if full else min(self._inv_to - 600, self._written_from)
            self._inv_full = now if full else self._inv_full
            self._written_from = math.inf
            rolled, interval = self._rollup_marks()
            fresh = _prom_inventory.seen(
                self.api, PRESENCE, since, now, rolled=rolled,
                interval_s=interval if self._interval_s is None else self._interval_s,
            )  # fmt: skip
            self._inv = _prom_inventory.merge(self._inv, fresh)
            self._inv_at, self._inv_to = now, now
            return self._inv

    def reach_back(self, ts: float) -> None:
        """Make ``gpus()`` reach back to ``ts`` at least, not only ``lookback_s`` from now:
        the weekly report needs the GPUs that went silent up to two weeks before the week
        before its period, and each GPU's first sample (a board that first reported in the
        period was added)."""
        with self._lock:
            if float(ts) < min(self._reach_from, self.clock() - self.lookback_s):
                self._reach_from = float(ts)
                self._inv = None

    def _target(
        self, uuids: Sequence[str] | None, hostnames: Sequence[str] | None
    ) -> _prom_reads.Target:
        inv = self._inventory()
        whole = (inv["parent_uuid"] == "") & (inv["gpu"] >= 0)
        keep = inv["uuid"].isin(list(uuids)) if uuids is not None else whole
        if hostnames is not None:
            keep &= inv["hostname"].isin(list(hostnames))
        gpus = inv[keep]
        # a host selector selects its MIG instances' series too
        held = int(inv["hostname"].isin(gpus["hostname"].unique()).sum())
        fanout = max(1.0, held / len(gpus)) if len(gpus) else 1.0
        return _prom_reads.Target(gpus.set_index("uuid", drop=False), series_per_gpu=fanout)

    def gpus(self) -> pd.DataFrame:
        """Every GPU that reported in the lookback: hostname, gpu, uuid, pci_bus_id, model,
        rack, first_ts (to the minute on Prometheus), last_ts; MIG instances left out."""
        inv = self._inventory()
        whole = (inv["parent_uuid"] == "") & (inv["gpu"] >= 0)
        out = inv[whole].sort_values(["hostname", "gpu", "first_ts"], kind="stable")
        return out[_prom_inventory.GPU_COLUMNS].reset_index(drop=True)

    def mig_instances(self) -> pd.DataFrame:
        inv = self._inventory()
        out = inv[inv["parent_uuid"] != ""].sort_values(["hostname", "gpu", "uuid"])
        columns = ["hostname", "gpu", "uuid", "parent_uuid", "model", "first_ts", "last_ts"]
        return out[columns].reset_index(drop=True)

    def scrape_interval_s(self) -> float:
        """The shortest interval between a GPU's samples: the URL's, else counted in the
        newest hour of data (and kept)."""
        with self._lock:
            if self._interval_s is None:
                inv = self._inventory()
                if inv.empty:
                    return 60.0
                at = float(inv["last_ts"].max()) + 0.001
                sel = selector(list(PRESENCE[:1]))
                got = self.api.query(
                    f"max(count_over_time({self.api.dialect.window(sel, 3600)}))", at
                )
                count = float(got[0].values[0]) if got else 0.0
                self._interval_s = 3600.0 / count if count >= 2 else 60.0
            return float(self._interval_s)

    def _bit_step(self, resolution_s: int) -> int:
        """The subquery step for bitmask rollups: the longest divisor of ``resolution_s`` no
        longer than the scrape interval."""
        interval = self.scrape_interval_s()
        fits = [s for s in range(1, resolution_s + 1) if resolution_s % s == 0 and s <= interval]
        return max(fits) if fits else 1

    # -- telemetry -------------------------------------------------------------------------

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
        """Samples in ``[start, end)`` as the wide frame, sorted by ts, hostname, gpu;
        ``resolution_s`` (300 or 3600): the buckets starting in ``[start, end)``, rolled up by
        the server (counters the last value, gauges the mean, ``<field>_max`` the peak,
        bitmasks the OR)."""
        _check_resolution(resolution_s)
        wanted = check_fields(fields, ROLLUP_FIELDS if resolution_s else SAMPLE_FIELDS)
        target = self._target(uuids, hostnames)
        lo, hi = self._span(start, end, target)
        if resolution_s:
            first = float(math.ceil(lo / resolution_s) * resolution_s)
            if first >= hi:
                return _prom_reads.empty(wanted)
            return self._rolled(target, first, hi, wanted, resolution_s, whole=True)
        return _prom_reads.raw(
            self.api, target, start=lo, end=hi, fields=wanted,
            interval_s=self.scrape_interval_s(),
        )  # fmt: skip

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
        """``base.ReadableStore.read_window``, rolled up by the server: one row per GPU and
        bucket from ``start``'s bucket to the one holding ``end``, nothing at or after
        ``end`` read."""
        if not end > start:
            raise InputError(f"read_window: start {start!r} is not before end {end!r}")
        if not resolution_s:
            return self.read_samples(
                start=start, end=end, uuids=uuids, hostnames=hostnames, fields=fields
            )
        _check_resolution(resolution_s)
        wanted = check_fields(fields, ROLLUP_FIELDS)
        first = float(np.floor(start / resolution_s) * resolution_s)
        target = self._target(uuids, hostnames)
        return self._rolled(target, first, end, wanted, resolution_s, progress=progress)

    def _rolled(
        self,
        target: _prom_reads.Target,
        first: float,
        end: float,
        fields: list[str],
        resolution_s: int,
        *,
        whole: bool = False,
        progress: bool = False,
    ) -> pd.DataFrame:
        """Buckets from ``first`` to the one holding ``end`` (cut at ``end`` unless
        ``whole``): the hours kept as rollup series (``_prom_rollups``), then the rest rolled
        up by the server as it is read."""
        live_from = first
        kept: Future[pd.DataFrame] | None = None
        parts = []
        if resolution_s == _prom_rollups.RESOLUTION:
            until = self.rolled_until()
            if until is not None and until > first:
                live_from = min(until, float(np.floor(end / resolution_s) * resolution_s))
                # the kept hours are read while the server rolls up the rest: two threads
                # of requests, so neither waits on the other's answers
                kept = self._side.submit(
                    _prom_reads.raw,
                    self.api,
                    target,
                    start=first,
                    end=live_from,
                    fields=fields,
                    interval_s=resolution_s,
                    rolled=(_prom_rollups.ROLLUP, str(resolution_s)),
                    progress=progress,
                )
        if not whole and kept is not None and 0 < end - live_from <= resolution_s:
            # the hour under way: its raw samples, bucketed here as SQLite buckets its raw
            # tail (reading each series once costs the server less than rolling it up per
            # field, peak and bit)
            raw = _prom_reads.raw(
                self.api, target, start=live_from, end=end, fields=window.raw_fields(fields),
                interval_s=self.scrape_interval_s(),
            )  # fmt: skip
            tail = window.bucketed(raw, fields, resolution_s)
            parts.append(tail if len(tail) else _prom_reads.empty(fields))
        elif end > live_from or kept is None:
            parts.append(
                _prom_reads.rollups(
                    self.api,
                    target,
                    first=live_from,
                    end=end,
                    fields=fields,
                    resolution_s=resolution_s,
                    bit_step_s=self._bit_step(resolution_s),
                    whole=whole,
                    progress=progress,
                    interval_s=self.scrape_interval_s(),
                )  # fmt: skip
            )
        if kept is not None:
            parts.insert(0, kept.result())
        parts = [p for p in parts if len(p)] or parts[:1]
        if len(parts) == 1:
            return parts[0]
        out = pd.concat(parts, ignore_index=True)
        return out.sort_values(["ts", "hostname", "gpu", "uuid"], kind="stable", ignore_index=True)

    def rolled_until(self) -> float | None:
        """The end of the hours kept as rollup series (``_prom_rollups``), None when none are;
        asked again every ``refresh_s``."""
        return self._rollup_marks()[0]

    def _rollup_marks(self) -> tuple[float | None, float | None]:
        """``rolled_until()`` and the scrape interval of the samples rolled up (None when
        not kept)."""
        with self._lock:
            now = self.clock()
            if now - self._until_at >= self.refresh_s:
                self._until = _prom_rollups.until(self.api, now + 1.0, self.lookback_s)
                self._until_at = now
            return self._until

    def _span(
        self, start: float | None, end: float | None, target: _prom_reads.Target
    ) -> tuple[float, float]:
        """``[start, end)`` with a missing end at "now" and a missing start at the oldest
        sample of the GPUs read."""
        hi = self.clock() + 1.0 if end is None else float(end)
        if start is not None:
            return float(start), hi
        inv = self._inventory()
        seen = inv.loc[inv["uuid"].isin(target.gpus.index), "first_ts"]
        return (float(seen.min()) if len(seen) else hi - self.lookback_s), hi

    # -- gpuwarden's records ---------------------------------------------------------------

    def _records(
        self, name: str, start: float | None, end: float | None, matchers: Sequence[str] = ()
    ) -> list[_series.Raw]:
        """Raw samples of one of gpuwarden's record series in ``[start, end)`` (default: the
        lookback up to now), a day at a time; ``matchers`` narrow the series."""
        hi = self.clock() + 60.0 if end is None else float(end)
        lo = hi - self.lookback_s if start is None else float(start)
        if hi <= lo:
            return []
        d = self.api.dialect
        sel = selector([name], list(matchers))
        spans = self._record_spans(sel, lo, hi)
        parts = self.api.map(lambda s: self.api.query(d.window(sel, s[1] - s[0]), s[1]), spans)
        out = []
        for r in (r for p in parts for r in p):
            keep = (r.ts >= lo) & (r.ts < hi)
            out.append(r if keep.all() else _series.Raw(r.labels, r.ts[keep], r.values[keep]))
        return out

    def _record_spans(self, sel: str, lo: float, hi: float) -> list[tuple[float, float]]:
        """``[lo, hi)`` cut into spans of at most a day, each holding at most
        ``api.max_points`` of ``sel``'s samples where an hour does: the records per hour are
        counted first (one query, a point per hour), and whole hours packed into spans."""
        spans = time_spans(lo, hi, RECORD_SPAN_S)
        hours = math.ceil((hi - lo) / 3600.0)
        if hours <= 1 or hours > MAX_STEPS:
            return spans
        window = self.api.dialect.window(sel, 3600.0)
        got = self.api.query_range(
            f"sum(count_over_time({window}))", lo + 3600.0, lo + hours * 3600.0, 3600.0
        )
        if not got:
            return spans
        per_hour = np.zeros(hours)
        hour = np.rint((got[0].ts - lo) / 3600.0).astype(np.int64) - 1  # the hour ending there
        ok = (hour >= 0) & (hour < hours)
        per_hour[hour[ok]] = got[0].values[ok]
        if per_hour.sum() <= self.api.max_points:
            return spans
        out: list[tuple[float, float]] = []
        a, held = lo, 0.0
        for k in range(hours):
            start, stop = lo + k * 3600.0, min(hi, lo + (k + 1) * 3600.0)
            n = float(per_hour[k])
            if start > a and (held + n > self.api.max_points or stop - a > RECORD_SPAN_S):
                out.append((a, start))
                a, held = start, 0.0
            held += n
        out.append((a, hi))
        return out

    def read_events(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Events in ``[start, end)``: gpuwarden's own (``gpuwarden_event``) and the Xids of
        dcgm-exporter's and gpuwarden's exporter's Xid series. ts, hostname, gpu, uuid,
        kind, code (Int64), detail; by ts."""
        rows = _prom_records.event_rows(self._records(_series.EVENT, start, end))
        if kinds is None or "xid" in kinds:
            hi = self.clock() + 60.0 if end is None else float(end)
            lo = hi - self.lookback_s if start is None else float(start)
            rows += [
                (t, g, "xid", code, d)
                for t, g, code, d in _prom_events.xid_events(self.api, lo, hi)
            ]
        return _prom_records.events_frame(rows, uuids=uuids, kinds=kinds)

    def read_failures(
        self, *, start: float | None = None, end: float | None = None
    ) -> pd.DataFrame:
        """Failures in ``[start, end)`` (``gpuwarden_failure``): ts, hostname, gpu, uuid,
        kind, precursor_start_ts, repair_s, xid (Int64)."""
        return _prom_records.failures_frame(self._records(_series.FAILURE, start, end))

    def read_verdicts(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
        latest: bool = False,
        changes: bool = False,
    ) -> pd.DataFrame:
        """Verdicts in ``[start, end)`` (``gpuwarden_verdict``), ``health.VERDICT_COLUMNS``,
        by ts; ``latest``: each GPU's newest; ``changes``: only the state changes (filtered
        here, after the read). A few ``uuids`` are selected on the server."""
        few = uuids is not None and 0 < len(set(uuids)) <= _FEW_UUIDS
        # the series carry the GPU's (a MIG instance's parent's) UUID; verdicts_frame keeps
        # the instances asked for
        only = [matcher("UUID", sorted({mig_parent(u) or u for u in uuids or ()}))] if few else []
        raws = self._records(_series.VERDICT, start, end, only)
        out = _prom_records.verdicts_frame(raws, uuids=uuids, latest=latest)
        return state_changes(out) if changes and not latest else out

    def read_rejections(
        self, *, start: float | None = None, end: float | None = None
    ) -> pd.DataFrame:
        """Readings rejected in ``[start, end)`` (``gpuwarden_rejected_reading``), counted per
        GPU, field and reason, most first."""
        return _prom_records.rejections_frame(self._records(_series.REJECTED, start, end))

    def read_assignments(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Who held each GPU (``gpuwarden_assignment`` readings, the lookback before
        ``start``): uuid, hostname, gpu, namespace, pod, container, ts_from, ts_to, last_seen."""
        lo = None if start is None else float(start) - self.lookback_s
        out = _prom_records.assignments_frame(self._records(_series.ASSIGNMENT, lo, end))
        if end is not None:
            out = out[out["ts_from"] < float(end)]
        if start is not None:
            out = out[out["ts_to"].fillna(out["last_seen"]) >= float(start)]
        if uuids is not None:
            out = out[out["uuid"].isin(list(uuids))]
        return out.reset_index(drop=True)

    def read_pod_labels(
        self, *, start: float | None = None, end: float | None = None, step_s: float = 300.0
    ) -> pd.DataFrame:
        """Who held each GPU in ``[start, end)`` (default: the lookback up to now) as
        dcgm-exporter's pod, namespace and container labels say, looked at every ``step_s``:
        uuid, hostname, gpu, namespace, pod, container, ts_from, ts_to; one row per unbroken
        stay (``_prom_labels.pods``). Empty where the exporter runs without Kubernetes."""
        hi = self.clock() + 1.0 if end is None else float(end)
        lo = hi - self.lookback_s if start is None else float(start)
        return _prom_labels.pods(self.api, lo, hi, step_s)

    def read_pod_samples(
        self, *, start: float, end: float, step_s: float = 3600.0, metric: str = ""
    ) -> pd.DataFrame:
        """Per step ``[ts - step_s, ts)`` in ``[start, end)``, device (GPU or MIG instance)
        and pod, how many samples of ``metric`` (default: the temperature every exporter
        sends) carried the pod's labels: ``_prom_labels.SAMPLE_COLUMNS``. What
        ``read_pod_labels`` and GPU-hours per pod (``scheduler_hooks.k8s_billing``) read."""
        return _prom_labels.pod_samples(
            self.api, float(start), float(end), step_s, metric or _prom_labels.PRESENT
        )

    def read_step_samples(
        self, *, start: float, end: float, step_s: float = 3600.0, metric: str = ""
    ) -> float:
        """The most samples any one series of ``metric`` holds in a step of ``[start,
        end)``: what a whole step holds at the exporter's scrape interval (0: none)."""
        return _prom_labels.step_samples(
            self.api, float(start), float(end), step_s, metric or _prom_labels.PRESENT
        )

    def read_driver_labels(self, *, at: float | None = None) -> pd.DataFrame:
        """Each GPU's driver version from dcgm-exporter's ``DCGM_FI_DRIVER_VERSION`` label, as
        its newest series in the lookback before ``at`` says: hostname, uuid, driver_version,
        last_ts."""
        now = self.clock() + 1.0 if at is None else float(at)
        return _prom_labels.drivers(self.api, now, self.lookback_s)

    def read_nodes(self, *, hostnames: Sequence[str] | None = None) -> pd.DataFrame:
        """Each node's newest driver and CUDA driver versions (``gpuwarden_node_info``)."""
        return _prom_records.nodes_frame(self._records(_series.NODE, None, None), hostnames)

    def close(self) -> None:
        self._side.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    def __enter__(self) -> PrometheusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def _count(params: dict[str, str] | Any, key: str, default: int, shown: str) -> int:
    text = params.get(key)
    if text is None:
        return default
    if not text.isdigit():
        raise ConfigError(f"{shown}: {key} must be a whole number, not {text!r}")
    return int(text)


def _check_resolution(resolution_s: int | None) -> None:
    if resolution_s and resolution_s not in ROLLUP_RESOLUTIONS:
        raise InputError(
            f"resolution_s={resolution_s!r}: rollups exist for "
            f"{', '.join(map(str, ROLLUP_RESOLUTIONS))} s (None reads raw samples)"
        )


__all__ = ["PrometheusStore"]
