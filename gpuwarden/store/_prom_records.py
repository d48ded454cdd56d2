"""gpuwarden's records read back from their series (``_series``): the frames the store
protocol returns for events, failures, verdicts, rejected readings, assignments and nodes.

A failure or verdict written twice for the same GPU and time is read as the one written last
(the sample's value is when it was written); identical events are read once; assignments are
rebuilt from their readings as the SQLite store keeps them (one row per holder, from the
reading that first named it to the one that no longer did).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.health import VERDICT_COLUMNS, GpuState, Reason
from gpuwarden.store._series import Raw, gpu_of
from gpuwarden.telemetry import GpuId

EventRow = tuple[float, GpuId, str, "int | None", str]  # ts, gpu, kind, code, detail


def _samples(raws: Iterable[Raw]) -> Iterator[tuple[dict[str, str], GpuId, float, float]]:
    """(labels, gpu, ts, value) per sample of a record series."""
    for r in raws:
        gpu = gpu_of(r.labels)
        if gpu is None:
            continue
        for t, v in zip(r.ts.tolist(), r.values.tolist(), strict=True):
            yield r.labels, gpu, t, v


def frame_of(
    rows: Sequence[tuple[Any, ...]], columns: Sequence[str], **dtypes: Any
) -> pd.DataFrame:
    """Rows -> a frame with ``columns``; ``dtypes`` per column (default: text)."""
    out = pd.DataFrame.from_records(list(rows), columns=list(columns))
    for c in columns:
        out[c] = out[c].astype(dtypes.get(c, str))
    return out


def _by_time(frame: pd.DataFrame, *then: str) -> pd.DataFrame:
    """By time, host and GPU, then ``then`` (records of one GPU at one time come from answers
    in whatever order they arrived: the order is the same from one read to the next)."""
    keys = ["ts", "hostname", "gpu", *then]
    return frame.sort_values(keys, kind="stable").reset_index(drop=True)


def event_rows(raws: Iterable[Raw]) -> list[EventRow]:
    """``gpuwarden_event`` samples, identical ones once."""
    seen: dict[tuple[float, str, str, str, str], EventRow] = {}
    for labels, gpu, t, _ in _samples(raws):
        code = labels.get("code", "")
        key = (t, gpu.uuid, labels.get("kind", ""), code, labels.get("detail", ""))
        seen[key] = (t, gpu, key[2], int(code) if code else None, key[4])
    return list(seen.values())


def events_frame(
    rows: Iterable[EventRow], *, uuids: Sequence[str] | None, kinds: Sequence[str] | None
) -> pd.DataFrame:
    """ts, hostname, gpu, uuid, kind, code (Int64), detail; by ts, host, GPU, then the
    record."""
    out = frame_of(
        [(t, g.hostname, g.index, g.uuid, k, c, d) for t, g, k, c, d in rows],
        ["ts", "hostname", "gpu", "uuid", "kind", "code", "detail"],
        ts=np.float64, gpu=np.int64, code="Int64",
    )  # fmt: skip
    if uuids is not None:
        out = out[out["uuid"].isin(list(uuids))]
    if kinds is not None:
        out = out[out["kind"].isin(list(kinds))]
    return _by_time(out, "uuid", "kind", "code", "detail")


def _float(text: str | None) -> float:
    return float(text) if text else math.nan


def failures_frame(raws: Iterable[Raw]) -> pd.DataFrame:
    """The last written per GPU, time and kind: ts, hostname, gpu, uuid, kind,
    precursor_start_ts, repair_s, xid (Int64); by ts."""
    newest: dict[tuple[float, str, str], tuple[float, tuple[Any, ...]]] = {}
    for labels, gpu, t, written in _samples(raws):
        key = (t, gpu.uuid, labels.get("kind", ""))
        if key in newest and newest[key][0] > written:
            continue
        xid = labels.get("xid", "")
        row = (
            t, gpu.hostname, gpu.index, gpu.uuid, key[2],
            _float(labels.get("precursor_start_ts")), _float(labels.get("repair_s")),
            int(xid) if xid else None,
        )  # fmt: skip
        newest[key] = (written, row)
    out = frame_of(
        [row for _, row in newest.values()],
        ["ts", "hostname", "gpu", "uuid", "kind", "precursor_start_ts", "repair_s", "xid"],
        ts=np.float64, gpu=np.int64, precursor_start_ts=np.float64, repair_s=np.float64,
        xid="Int64",
    )  # fmt: skip
    return _by_time(out)


def verdicts_frame(
    raws: Iterable[Raw], *, uuids: Sequence[str] | None, latest: bool
) -> pd.DataFrame:
    """The last written per GPU and time, ``health.VERDICT_COLUMNS``, by ts; ``latest``:
    each GPU's newest."""
    newest: dict[tuple[float, str], tuple[float, tuple[Any, ...]]] = {}
    for labels, gpu, t, written in _samples(raws):
        key = (t, gpu.uuid)
        if key in newest and newest[key][0] > written:
            continue
        rec = json.loads(labels.get("record", "{}"))
        changed = rec.get("changed_from")
        row = (
            t, gpu.hostname, gpu.index, gpu.uuid, GpuState(labels.get("state", "ok")),
            _float(rec.get("risk")), labels.get("cause", "model"), _float(rec.get("since")),
            GpuState(changed) if changed else None,
            tuple(Reason.from_json(r) for r in rec.get("reasons", [])),
            rec.get("action", ""), _float(rec.get("threshold")),
        )  # fmt: skip
        newest[key] = (written, row)
    out = frame_of(
        [row for _, row in newest.values()], VERDICT_COLUMNS, ts=np.float64, gpu=np.int64,
        risk=np.float64, since=np.float64, threshold=np.float64, state=object,
        changed_from=object, reasons=object,
    )  # fmt: skip
    if uuids is not None:
        out = out[out["uuid"].isin(list(uuids))]
    out = _by_time(out)
    return out.drop_duplicates("uuid", keep="last").reset_index(drop=True) if latest else out


def rejections_frame(raws: Iterable[Raw]) -> pd.DataFrame:
    """Counted per GPU, field and reason, most first: hostname, gpu, uuid, field, reason,
    count, first_ts, last_ts."""
    rows = []
    for r in raws:
        gpu = gpu_of(r.labels)
        if gpu is None or not len(r.ts):
            continue
        rows.append(
            (gpu.hostname, gpu.index, gpu.uuid, r.labels.get("field", ""),
             r.labels.get("reason", ""), len(np.unique(r.ts)), float(r.ts.min()),
             float(r.ts.max()))
        )  # fmt: skip
    columns = ["hostname", "gpu", "uuid", "field", "reason", "count", "first_ts", "last_ts"]
    out = frame_of(
        rows, columns, gpu=np.int64, count=np.int64, first_ts=np.float64, last_ts=np.float64
    )
    out = out.groupby(columns[:5], as_index=False, sort=False).agg(
        count=("count", "sum"), first_ts=("first_ts", "min"), last_ts=("last_ts", "max")
    )
    out = out.sort_values(
        ["count", "hostname", "gpu", "field"], ascending=[False, True, True, True]
    )
    return out[columns].reset_index(drop=True)


def assignments_frame(raws: Iterable[Raw]) -> pd.DataFrame:
    """Assignment readings -> one row per holder over [ts_from, ts_to), ``ts_to`` NaN while
    it holds the GPU: uuid, hostname, gpu, namespace, pod, container, ts_from, ts_to,
    last_seen; by ts_from."""
    readings: dict[str, dict[float, set[tuple[str, ...]]]] = {}
    ident: dict[str, GpuId] = {}
    for r in raws:
        gpu = gpu_of(r.labels)
        if gpu is None:
            continue
        ident[gpu.uuid] = gpu
        who = tuple(r.labels.get(k, "") for k in ("namespace", "pod", "container"))
        for t in r.ts.tolist():
            held = readings.setdefault(gpu.uuid, {}).setdefault(t, set())
            if any(who):
                held.add(who)
    rows: list[list[Any]] = []
    for uuid, by_time in readings.items():
        gpu = ident[uuid]
        open_: dict[tuple[str, ...], list[Any]] = {}
        for t in sorted(by_time):
            held = by_time[t]
            for who in list(open_):
                if who in held:
                    open_[who][8] = t  # seen again: last_seen moves
                else:
                    open_[who][7] = t  # gone: closed at this reading
                    rows.append(open_.pop(who))
            for who in sorted(held - set(open_)):
                open_[who] = [uuid, gpu.hostname, gpu.index, *who, t, math.nan, t]
        rows += open_.values()
    columns = ["uuid", "hostname", "gpu", "namespace", "pod", "container", "ts_from", "ts_to",
               "last_seen"]  # fmt: skip
    out = frame_of(
        [tuple(r) for r in rows], columns, gpu=np.int64, ts_from=np.float64, ts_to=np.float64,
        last_seen=np.float64,
    )  # fmt: skip
    return out.sort_values(["ts_from", "hostname", "gpu", "uuid"], kind="stable")


def nodes_frame(raws: Iterable[Raw], hostnames: Sequence[str] | None) -> pd.DataFrame:
    """Each host's newest known driver and CUDA driver versions ("" unknown: an unknown
    never erases a known one), first_ts, last_ts; by hostname."""
    seen: dict[str, list[Any]] = {}
    for r in raws:
        host = r.labels.get("Hostname") or r.labels.get("hostname", "")
        if not host or not len(r.ts):
            continue
        t0, t1 = float(r.ts.min()), float(r.ts.max())
        row = seen.setdefault(host, [host, "", "", t0, t1, -math.inf, -math.inf])
        row[3], row[4] = min(row[3], t0), max(row[4], t1)
        for i, key in ((1, "driver_version"), (2, "cuda_driver_version")):
            if r.labels.get(key) and t1 >= row[4 + i]:
                row[i], row[4 + i] = r.labels[key], t1
    rows = [tuple(v[:5]) for k, v in sorted(seen.items()) if hostnames is None or k in hostnames]
    columns = ["hostname", "driver_version", "cuda_driver_version", "first_ts", "last_ts"]
    return frame_of(rows, columns, first_ts=np.float64, last_ts=np.float64)


__all__ = [
    "assignments_frame",
    "event_rows",
    "events_frame",
    "failures_frame",
    "frame_of",
    "nodes_frame",
    "rejections_frame",
    "verdicts_frame",
]
