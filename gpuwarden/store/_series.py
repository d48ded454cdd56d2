"""gpuwarden's history as Prometheus series: the labels, the names, records in and out.

Telemetry keeps dcgm-exporter's metric names (``telemetry.FIELDS``) and labels, so what
dcgm-exporter wrote and what gpuwarden wrote read the same way:

    DCGM_FI_DEV_GPU_TEMP{gpu="0", UUID="GPU-...", pci_bus_id="...", device="nvidia0",
                         modelName="H100", Hostname="node1", rack="r1"}

The host is ``Hostname`` (dcgm-exporter 2.x and 3.x) or ``hostname`` (4.x, and relabelled
setups); a MIG instance's series carry its parent's ``UUID`` plus ``GPU_I_ID`` and
``GPU_I_PROFILE``. ``rack`` is gpuwarden's own. gpuwarden's records other than telemetry are
series of their own, one sample per record at its time:

    gpuwarden_event{<gpu>, kind, code, detail}                          1
    gpuwarden_failure{<gpu>, kind, xid, precursor_start_ts, repair_s, source}   written at (s)
    gpuwarden_verdict{<gpu>, state, cause, record}                      written at (s)
    gpuwarden_rejected_reading{<gpu>, field, reason}                    the reading rejected
    gpuwarden_assignment{<gpu>, namespace, pod, container}              1 (no pod: unassigned)
    gpuwarden_node_info{Hostname, driver_version, cuda_driver_version}  1

A failure or verdict written again for the same GPU and time replaces the first: readers keep
the one written last (the largest value). ``record`` is the verdict as JSON (reasons with
their features). Times are milliseconds, as the servers keep them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.health import Reason, Verdict
from gpuwarden.store._frames import FrameRows
from gpuwarden.telemetry import (
    FIELDS_BY_NAME,
    Assignment,
    Event,
    Failure,
    GpuId,
    NodeInfo,
    Rejection,
    mig_parent,
)

HOST_LABELS = ("Hostname", "hostname")
#: every label that says which GPU a series is about (``max by`` keeps these)
GPU_LABELS = (
    "UUID", "GPU_I_ID", "GPU_I_PROFILE", "gpu", "device", "modelName", "pci_bus_id",
    *HOST_LABELS, "rack",
)  # fmt: skip
EVENT = "gpuwarden_event"
FAILURE = "gpuwarden_failure"
VERDICT = "gpuwarden_verdict"
REJECTED = "gpuwarden_rejected_reading"
ASSIGNMENT = "gpuwarden_assignment"
NODE = "gpuwarden_node_info"
#: Longest label value VictoriaMetrics keeps whole (its -maxLabelValueLen default).
MAX_LABEL_LEN = 16384
_MIG = " MIG "


class Series(NamedTuple):
    """One series to write: its labels (``__name__`` included), times in ms, values."""

    labels: dict[str, str]
    ts_ms: np.ndarray
    values: np.ndarray


class Raw(NamedTuple):
    """One series read back: labels, times in Unix seconds, values."""

    labels: dict[str, str]
    ts: np.ndarray
    values: np.ndarray


def gpu_labels(gpu: GpuId) -> dict[str, str]:
    """dcgm-exporter's labels for ``gpu`` (``Hostname`` spelling); a MIG key
    (``telemetry.mig_uuid``) becomes its parent's ``UUID`` and ``GPU_I_ID``."""
    uuid, model, extra = gpu.uuid, gpu.model, {}
    parent = mig_parent(uuid)
    if parent:
        extra["GPU_I_ID"] = uuid.rpartition("/")[2]
        uuid = parent
        if _MIG in model:
            model, _, extra["GPU_I_PROFILE"] = model.partition(_MIG)
    pairs = {
        "gpu": str(gpu.index),
        "UUID": uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "device": f"nvidia{gpu.index}" if gpu.index >= 0 else "",
        "modelName": model,
        "Hostname": gpu.hostname,
        "rack": gpu.rack,
        **extra,
    }
    return {k: v for k, v in pairs.items() if v}


def gpu_of(labels: Mapping[str, str], *, whole: bool = False) -> GpuId | None:
    """The GPU (or, unless ``whole``, the MIG instance) a series' labels name; None when
    they name none (no ``UUID``, or no ``gpu``/``device`` index)."""
    get = labels.get
    uuid = get("UUID", "")
    text = get("gpu") or get("device", "").removeprefix("nvidia")
    try:
        index = int(text)
    except ValueError:
        return None
    if not uuid:
        return None
    host = get("Hostname") or get("hostname") or get("instance", "").rpartition(":")[0]
    model = get("modelName", "")
    instance = get("GPU_I_ID", "")
    if instance and not whole:
        profile = get("GPU_I_PROFILE", "")
        uuid = f"MIG-{uuid}/{instance}"
        model = f"{model}{_MIG}{profile}".strip() if profile else model
    return GpuId(host, index, uuid, get("pci_bus_id", ""), model, get("rack", ""))


def _ms(ts: Iterable[float]) -> np.ndarray:
    return np.rint(np.fromiter(ts, dtype=np.float64) * 1000.0).astype(np.int64)


def frame_series(plan: FrameRows) -> Iterator[Series]:
    """A checked wide frame (``_frames.frame_rows``) as one series per GPU and field; missing
    (NaN) and infinite readings are not written."""
    order = np.lexsort((plan.ts, plan.codes))
    codes = plan.codes[order]
    ts_ms = np.rint(plan.ts[order] * 1000.0).astype(np.int64)
    cuts = np.flatnonzero(np.diff(codes)) + 1
    values = [v[order] for v in plan.values]
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(codes)], strict=True):
        if hi <= lo:
            continue
        row = plan.gpus[int(codes[lo])]
        gpu = GpuId(row[1], row[2], row[0], row[3], row[4], row[5])
        labels = gpu_labels(gpu)
        t = ts_ms[lo:hi]
        for name, v in zip(plan.fields, values, strict=True):
            part = v[lo:hi]
            keep = np.isfinite(part)
            if keep.any():
                yield Series({"__name__": FIELDS_BY_NAME[name].dcgm, **labels}, t[keep], part[keep])


def _one(name: str, gpu: GpuId, ts: float, value: float, **labels: str) -> Series:
    out = {"__name__": name, **gpu_labels(gpu), **{k: v for k, v in labels.items() if v}}
    for k, v in out.items():
        if len(v) > MAX_LABEL_LEN:
            raise InputError(f"{name}: label {k} is {len(v)} characters (at most {MAX_LABEL_LEN})")
    return Series(out, _ms([ts]), np.array([value], dtype=np.float64))


def _num(x: float | None) -> str:
    return "" if x is None or not math.isfinite(x) else repr(float(x))


def event_series(events: Iterable[Event]) -> list[Series]:
    return [
        _one(EVENT, e.gpu, e.ts, 1.0, kind=e.kind, code=_int(e.code), detail=e.detail)
        for e in events
    ]


def _int(x: int | None) -> str:
    return "" if x is None else str(int(x))


def failure_series(failures: Iterable[Failure], source: str | None) -> list[Series]:
    now = time.time()
    return [
        _one(
            FAILURE, f.gpu, f.ts, now, kind=f.kind, xid=_int(f.xid),
            precursor_start_ts=_num(f.precursor_start_ts), repair_s=_num(f.repair_s),
            source=source or "",
        )
        for f in failures
    ]  # fmt: skip


def verdict_series(verdicts: Sequence[Verdict]) -> list[Series]:
    now = time.time()
    out = []
    for v in verdicts:
        record = {
            "risk": _num(v.risk),
            "since": _num(v.since),
            "changed_from": None if v.changed_from is None else str(v.changed_from),
            "reasons": [r.to_json() if isinstance(r, Reason) else str(r) for r in v.reasons],
            "action": v.action,
            "threshold": _num(v.threshold),
        }
        text = json.dumps(record, separators=(",", ":"))
        out.append(_one(VERDICT, v.gpu, v.ts, now, state=str(v.state), cause=v.cause, record=text))
    return out


def rejection_series(rejections: Iterable[Rejection]) -> list[Series]:
    return [
        _one(REJECTED, r.gpu, r.ts, r.value, field=r.field, reason=r.reason)
        for r in rejections
        if math.isfinite(r.value)
    ]


def assignment_series(assignments: Iterable[Assignment]) -> list[Series]:
    return [
        _one(ASSIGNMENT, a.gpu, a.ts, 1.0, namespace=a.namespace, pod=a.pod, container=a.container)
        for a in assignments
    ]


def node_series(nodes: Iterable[NodeInfo]) -> list[Series]:
    out = []
    for n in nodes:
        labels = {
            "__name__": NODE,
            "Hostname": n.hostname,
            "driver_version": n.driver_version,
            "cuda_driver_version": n.cuda_driver_version,
        }
        out.append(
            Series({k: v for k, v in labels.items() if v}, _ms([n.ts]), np.ones(1, np.float64))
        )
    return out


# -- serialising -------------------------------------------------------------------------------


def import_lines(series: Iterable[Series]) -> Iterator[str]:
    """VictoriaMetrics' JSON line import format (``/api/v1/import``), one line per series."""
    dumps = json.dumps
    for s in series:
        yield (
            f'{{"metric":{dumps(s.labels, separators=(",", ":"))},'
            f'"values":{dumps(s.values.tolist())},"timestamps":{dumps(s.ts_ms.tolist())}}}\n'
        )


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def openmetrics(series: Iterable[Series]) -> Iterator[str]:
    """The OpenMetrics text ``promtool tsdb create-blocks-from openmetrics`` backfills: one
    family per metric name (all its series together), then ``# EOF``."""
    families: dict[str, list[Series]] = {}
    for s in series:
        families.setdefault(s.labels["__name__"], []).append(s)
    for name, members in families.items():
        yield f"# TYPE {name} gauge\n"
        for s in members:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items() if k != "__name__")
            head = f"{name}{{{labels}}} "
            yield "".join(
                f"{head}{v!r} {t // 1000}.{t % 1000:03d}\n"
                for v, t in zip(s.values.tolist(), s.ts_ms.tolist(), strict=True)
            )
    yield "# EOF\n"
