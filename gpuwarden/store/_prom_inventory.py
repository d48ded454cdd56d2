"""Which GPUs a Prometheus-compatible server holds, and when each first and last reported.

The server has no table of GPUs: they are the label sets of the series that say a GPU reported
(``PRESENCE`` in ``prometheus.py``), and their first and last sample times.

    VictoriaMetrics   one query each: ``tfirst_over_time`` / ``tlast_over_time`` over the span.
                      Where hourly rollup series (``_prom_rollups``) cover most of the span,
                      the raw samples are scanned only outside them (the hour before, and
                      after the last rolled hour); each GPU's first and last rolled hour come
                      from its use-and-draw series (4 points an hour, however often it was
                      scraped), and its exact first and last sample from the raw samples of
                      those hours only (a query per hour, its GPUs' UUIDs matched). At
                      15-second scrapes a three-week listing reads 60 times fewer points.
                      MIG instances are not rolled up: their raw series are read whole.
    Prometheus        a day at a time first (``count_over_time``, one point per GPU and day,
                      cheap; the newest day alone, then as many days a query as the point
                      budget holds for the GPUs seen so far), then an hour at a time in the first and the last day each GPU
                      reported, then, in its first and last hour, a five-minute subquery over
                      ``timestamp()``: the last sample exactly, the first to five minutes. A
                      subquery over the whole span steps through every minute of it and takes
                      Prometheus tens of seconds; over a day, 24 times an hour's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.store import _prom_records, _prom_rollups, _series
from gpuwarden.store._promapi import MAX_STEPS, PromApi
from gpuwarden.store._promql import GPU_BY, Dialect, matcher, quote, selector

GPU_COLUMNS = ["hostname", "gpu", "uuid", "pci_bus_id", "model", "rack", "first_ts", "last_ts"]
DAY_S = 86400.0
HOUR_S = 3600.0
#: Prometheus' fine pass steps this often; its lookback (5 minutes) sees every sample.
FINE_STEP_S = 300
#: VictoriaMetrics lists GPUs from rollup series when they cover at least this much.
MIN_ROLLED_S = 6 * HOUR_S
#: ... when the raw samples are at most this far apart. At long intervals the server's cost
#: is per series more than per sample (``bench/bench_listing.py``, server CPU s, raw against
#: rollups): 10,000 GPUs x 7 days at 900 s, 2.0-2.4 against 2.5; 1,000 x 3 days at 30 s,
#: 0.74-0.78 against 0.37-0.38; 1,000 x 7 days at 15 s, 3.3-3.7 against 0.48.
ROLLED_MAX_INTERVAL_S = 120.0
#: A per-hour edge query matches its GPUs' UUIDs up to this many, else reads the whole hour.
MAX_MATCHED = 256


def seen(
    api: PromApi,
    names: Sequence[str],
    since: float,
    now: float,
    *,
    rolled: float | None = None,
    interval_s: float | None = None,
) -> pd.DataFrame:
    """The GPUs and MIG instances with a sample of ``names`` in ``(since, now]``: the
    ``gpus()`` columns plus ``parent_uuid`` and ``host_label``. ``rolled``: the end of the
    hours kept as rollup series (``_prom_rollups.until``), None when there are none;
    ``interval_s``: the raw samples' scrape interval, None when unknown (the rollups are
    used when it is known and at most ``ROLLED_MAX_INTERVAL_S``)."""
    d = api.dialect
    at = math.ceil((now + 1) / FINE_STEP_S) * FINE_STEP_S  # a whole step after every sample
    if d.tfuncs:
        first_hour = math.ceil(since / HOUR_S) * HOUR_S
        if rolled is not None:
            rolled = min(rolled, math.floor(at / HOUR_S) * HOUR_S)  # none after ``at``
        dense = interval_s is not None and interval_s <= ROLLED_MAX_INTERVAL_S
        if rolled is not None and dense and rolled - first_hour >= MIN_ROLLED_S:
            found = _seen_rolled(api, names, since, at, first_hour, rolled)
            if found is not None:
                return found
        return rows(*_edges(api, selector(list(names)), since, at))
    n = max(1, math.ceil((at - since) / DAY_S))
    days = _periods(api, names, [at], n * DAY_S, DAY_S)
    # a point per GPU and step: the hour passes take as many steps a query as the budget holds
    gpus = len(days)
    last_days = _periods(api, names, {max(ts) for ts in days.values()}, DAY_S, HOUR_S, gpus)
    first_days = _periods(api, names, {min(ts) for ts in days.values()}, DAY_S, HOUR_S, gpus)
    last = _fine(api, names, d, {max(ts) for ts in last_days.values()}, first=False)
    first = _fine(api, names, d, {min(ts) for ts in first_days.values()}, first=True)
    return rows(last, first)


def _edges(
    api: PromApi, sel: str, since: float, at: float
) -> tuple[list[_series.Raw], list[_series.Raw]]:
    """Per GPU (its labels), its last and its first sample time in ``(since, at]``: both
    queries at once, each a scan of the span's samples on the server."""
    last, first = api.map(_ask(api), [("max", sel, since, at), ("min", sel, since, at)])
    return last, first


#: a query for each GPU's last ("max") or first ("min") sample of a selector in ``(lo, hi]``
_Ask = tuple[str, str, float, float]


def _ask(api: PromApi) -> Callable[[_Ask], list[_series.Raw]]:
    def run(a: _Ask) -> list[_series.Raw]:
        agg, sel, lo, hi = a
        fn = "tlast_over_time" if agg == "max" else "tfirst_over_time"
        span = api.dialect.range(hi - lo)
        return api.query(f"{agg} by ({GPU_BY}) ({fn}({sel}[{span}]))", hi)

    return run


def _seen_rolled(
    api: PromApi, names: Sequence[str], since: float, at: float, first_hour: float, rolled: float
) -> pd.DataFrame | None:
    """``seen`` on VictoriaMetrics with the hours ``[first_hour, rolled)`` kept as rollup
    series; None when no rollup series answers (the hours were rolled up in the first
    layout, not read here: the raw samples are scanned instead)."""
    rsel = selector([_prom_rollups.ROLLUP], [
        _prom_rollups.holding(_prom_rollups.USAGE),
        matcher("resolution", [str(_prom_rollups.RESOLUTION)]),
    ])  # fmt: skip
    sel, mig = selector(list(names)), selector(list(names), ['GPU_I_ID!=""'])
    head_end, tail_from = min(first_hour + HOUR_S, at), max(since, rolled - HOUR_S)
    # round one, at once: each GPU's first and last rolled hour (a rollup sample is at its
    # hour + a millisecond per field: ``(first_hour - 1, rolled]`` holds the rolled hours'
    # samples and no other); the raw samples before the first whole rolled hour and after the
    # last (an hour of overlap each: a sample on the hour may have been rolled into either);
    # and the MIG instances', which are not rolled up
    r_last, r_first, head_last, head_first, tail_last, mig_last, mig_first = api.map(_ask(api), [
        ("max", rsel, first_hour - 1.0, rolled), ("min", rsel, first_hour - 1.0, rolled),
        ("max", sel, since, head_end), ("min", sel, since, head_end), ("max", sel, tail_from, at),
        ("max", mig, since, at), ("min", mig, since, at),
    ])  # fmt: skip
    if not r_last:
        return None
    # round two: a GPU's first sample is exact from the raw before the rolled hours, its last
    # from the raw after them; each other GPU's is in its first (last) rolled hour, or at an
    # end of it: a query per such hour, for that hour's GPUs only; a GPU seen only after the
    # rolled hours has its first sample there
    known_first = _uuids(head_first) | _uuids(r_first) | _uuids(mig_first)
    new = sorted(u for u in _uuids(tail_last) - known_first if u is not None)
    firsts = _hours(r_first, _uuids(head_first))
    lasts = _hours(r_last, _uuids(tail_last))
    asks = [("min", lo, hi, uuids) for lo, hi, uuids in (
        *((max(since, h - HOUR_S), min(h + 2 * HOUR_S, at), us) for h, us in firsts.items()),
        *([(tail_from, at, new)] if new else []),
    )]  # fmt: skip
    asks += [("max", h - HOUR_S, min(h + 2 * HOUR_S, at), us) for h, us in lasts.items()]

    def of(uuids: list[str]) -> str:
        return selector(list(names), [matcher("UUID", uuids)] if len(uuids) <= MAX_MATCHED else [])

    answers = api.map(_ask(api), [(agg, of(us), lo, hi) for agg, lo, hi, us in asks])
    got: dict[str, list[_series.Raw]] = {"min": [], "max": []}
    for (agg, *_), answer in zip(asks, answers, strict=True):
        got[agg] += answer
    first = [*head_first, *mig_first, *got["min"]]
    last = [*head_last, *tail_last, *mig_last, *got["max"]]
    # a GPU whose raw samples are gone (a shorter retention than its rollups'): its hour
    lost_first = {u for us in firsts.values() for u in us} - _uuids(got["min"])
    lost_last = {u for us in lasts.values() for u in us} - _uuids(got["max"])
    first += [r for r in r_first if _uuid(r) in lost_first]
    last += [r for r in r_last if _uuid(r) in lost_last]
    return rows(last, first)


def _uuid(r: _series.Raw) -> str | None:
    gpu = _series.gpu_of(r.labels, whole=True)
    return None if gpu is None else gpu.uuid


def _uuids(found: Sequence[_series.Raw]) -> set[str | None]:
    return {_uuid(r) for r in found if len(r.values)}


def _hours(found: Sequence[_series.Raw], known: set[str | None]) -> dict[float, list[str]]:
    """Rollup answers (a GPU's first or last rolled hour, + its field's milliseconds) -> the
    hour -> the parent UUIDs of the GPUs there not in ``known``."""
    out: dict[float, set[str]] = {}
    for r in found:
        uuid = _uuid(r)
        if uuid is None or uuid in known or not len(r.values):
            continue
        hour = math.floor(float(r.values[0]) / HOUR_S) * HOUR_S
        out.setdefault(hour, set()).add(uuid)
    return {h: sorted(u) for h, u in sorted(out.items())}


def _tagged(names: Sequence[str], fn: str) -> str:
    """``fn`` applied to each metric, tagged so that one GPU's metrics do not collide once
    the functions drop their names."""
    tag = quote("gpuwarden_metric")
    return " or ".join(
        f"label_replace({fn.format(selector([n]))}, {tag}, {quote(n)}, {quote('')}, {quote('')})"
        for n in names
    )


def _periods(
    api: PromApi,
    names: Sequence[str],
    ends: Iterable[float],
    span_s: float,
    width_s: float,
    gpus: int = 0,
) -> dict[str, list[float]]:
    """GPU (its labels, as a key) -> the ends of the periods ``width_s`` long, in the
    ``span_s`` before each of ``ends``, with a sample in them; ``gpus``: how many series
    to expect (0: unknown, counted from the answers), so that a query asks for at most
    ``api.max_points`` points (a step for all of them at least: the list of GPUs is not cut
    by host). Each span is read from its end back: when the GPUs are not known yet, the
    newest period first, then as many as the budget holds for the GPUs seen so far."""
    count = "count_over_time({}[" + api.dialect.range(width_s) + "])"
    expr = f"max by ({GPU_BY}) ({_tagged(names, count)})"
    out: dict[str, list[float]] = {}
    for end in sorted(set(ends)):
        start, hi, known = end - span_s, end, gpus
        while hi > start + 1e-6:
            steps = max(1, min(MAX_STEPS, api.max_points // known)) if known else 1
            lo = max(start, hi - steps * width_s)
            got = api.query_range(expr, lo + width_s, hi, width_s)
            for r in got:
                out.setdefault(_key(r.labels), []).extend(r.ts.tolist())
            known, hi = max(known, len(got)), lo
    return out


def _fine(
    api: PromApi, names: Sequence[str], d: Dialect, ends: set[float], *, first: bool
) -> list[_series.Raw]:
    """Per GPU, its first or last sample time in each hour ending at ``ends``."""
    agg, fn = ("min", "min_over_time") if first else ("max", "max_over_time")
    stamps = f"{agg} by ({GPU_BY}) ({_tagged(names, 'timestamp({})')})"
    expr = f"{agg} by ({GPU_BY}) ({fn}(({stamps})[{d.range(HOUR_S)}:{FINE_STEP_S}s]))"
    out: list[_series.Raw] = []
    for part in api.map(lambda t: api.query(expr, t), sorted(ends)):
        out += part
    return out


def _key(labels: dict[str, str]) -> str:
    return "\x00".join(f"{k}={v}" for k, v in sorted(labels.items()))


def rows(last: list[_series.Raw], first: list[_series.Raw]) -> pd.DataFrame:
    """One row per GPU or MIG instance from the label sets the queries returned: identity
    from its newest label set, the earliest first and the latest last time."""
    firsts: dict[str, float] = {}
    for r in first:
        for gpu in {_series.gpu_of(r.labels), _series.gpu_of(r.labels, whole=True)}:
            if gpu is not None and len(r.values):
                firsts[gpu.uuid] = min(firsts.get(gpu.uuid, math.inf), float(r.values.min()))
    out: dict[str, list[Any]] = {}
    for r in last:
        host_label = next((h for h in _series.HOST_LABELS if r.labels.get(h)), "")
        t = float(r.values.max()) if len(r.values) else math.nan
        for gpu in {_series.gpu_of(r.labels), _series.gpu_of(r.labels, whole=True)}:
            if gpu is None or not math.isfinite(t):
                continue
            parent = gpu.uuid[4:].rpartition("/")[0] if gpu.uuid.startswith("MIG-") else ""
            old = out.get(gpu.uuid)
            if old is None or t >= old[7]:
                row = [gpu.hostname, gpu.index, gpu.uuid, gpu.pci_bus_id, gpu.model, gpu.rack,
                       min(firsts.get(gpu.uuid, t), t), t, parent, host_label]  # fmt: skip
                if old is not None:
                    row[6] = min(row[6], old[6])
                out[gpu.uuid] = row
    columns = [*GPU_COLUMNS, "parent_uuid", "host_label"]
    return _prom_records.frame_of(
        [tuple(r) for r in out.values()], columns, gpu=np.int64, first_ts=np.float64,
        last_ts=np.float64,
    )  # fmt: skip


def merge(old: pd.DataFrame | None, new: pd.DataFrame) -> pd.DataFrame:
    """The inventory brought up to date: identity from the newest sighting, first_ts the
    earliest, last_ts the latest."""
    if old is None or old.empty:
        return new.reset_index(drop=True)
    both = pd.concat([old, new], ignore_index=True)
    first = both.groupby("uuid")["first_ts"].min()
    both = both.sort_values("last_ts", kind="stable").drop_duplicates("uuid", keep="last")
    both["first_ts"] = first.reindex(both["uuid"]).to_numpy()
    return both.reset_index(drop=True)


__all__ = ["GPU_COLUMNS", "merge", "rows", "seen"]
