"""gpuwarden's records as InfluxDB line protocol (the ``influxdb://`` store's writes).

One measurement per kind of record; tags are what makes a record the same record again, so
writing it twice replaces it (InfluxDB keeps one point per series and time):

    gpuwarden_sample      uuid, hostname, gpu         one float field per catalogue field read
    gpuwarden_seen        uuid                        hostname, gpu (int), pci_bus_id, model, rack
    gpuwarden_event       uuid, kind, key             code (int), detail
    gpuwarden_failure     uuid, kind                  precursor_start_ts, repair_s, xid, source
    gpuwarden_rejection   uuid, field                 reason, value
    gpuwarden_assignment  uuid[, namespace, pod, container]   held (1, or 0: unassigned)
    gpuwarden_node        hostname                    seen, driver_version, cuda_driver_version
    gpuwarden_verdict     uuid                        record (the whole verdict, JSON)
    gpuwarden             Hostname, gpu, UUID, ...    risk_score, gpu_state, gpu_transition

``gpuwarden_seen`` is the GPU inventory (``gpus()``): one point per GPU and write at its newest
time in that write, so the newest sighting names its slot. Empty text is never written, so an
unknown rack never erases a known one. ``key`` of an event is a digest of its code and detail:
two different Xids of one GPU at the same time stay two events, an identical one is kept once.
The last measurement holds the verdicts as series (``verdict_series``), under the names serve's
``/metrics`` uses: VictoriaMetrics, which names a series ``<measurement>_<field>``, stores them
as ``gpuwarden_risk_score`` and so on, and the Grafana risk panels read either.

Times are written in microseconds (``precision=us``). Missing values are left out of the point,
never written as 0; a float that is not finite is refused (line protocol has no NaN or Inf).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.health import Verdict
from gpuwarden.store import verdict_series
from gpuwarden.store._codec import verdict_to_json
from gpuwarden.telemetry import Assignment, Event, Failure, GpuId, NodeInfo, Rejection, Sample

SAMPLE = "gpuwarden_sample"
SEEN = "gpuwarden_seen"
EVENT = "gpuwarden_event"
FAILURE = "gpuwarden_failure"
REJECTION = "gpuwarden_rejection"
ASSIGNMENT = "gpuwarden_assignment"
NODE = "gpuwarden_node"
VERDICT = "gpuwarden_verdict"
SERIES = "gpuwarden"

_KEY_ESCAPES = str.maketrans({",": r"\,", "=": r"\=", " ": r"\ ", "\n": " ", "\r": " "})
_MEASUREMENT_ESCAPES = str.maketrans({",": r"\,", " ": r"\ "})


def tag(text: str) -> str:
    """A tag key, tag value or field key, escaped (commas, equals signs, spaces)."""
    return text.translate(_KEY_ESCAPES)


def string(text: str) -> str:
    """A string field value, quoted and escaped; a line break becomes a space (line protocol
    has none inside a field)."""
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", " ").replace("\n", " ")
    return f'"{text}"'


def number(value: float, name: str) -> str:
    """A float field value; shortest round-trip form, so the stored value is the same float."""
    if not math.isfinite(value):
        raise InputError(f"field {name!r} is {value!r}: InfluxDB stores finite numbers only")
    return repr(float(value))


def micros(ts: float) -> int:
    """Unix seconds -> the point's time in microseconds (what the reads give back exactly)."""
    return int(round(ts * 1e6))


def series_key(measurement: str, tags: Mapping[str, str]) -> str:
    """The measurement and its tags, escaped; empty tag values are left out (line protocol
    has no empty tag)."""
    tag_part = "".join(f",{tag(k)}={tag(v)}" for k, v in sorted(tags.items()) if v != "")
    return f"{measurement.translate(_MEASUREMENT_ESCAPES)}{tag_part}"


def line(measurement: str, tags: Mapping[str, str], fields: Mapping[str, str], ts: float) -> str:
    """One point; ``fields`` already formatted (``number``, ``string``, ``"3i"``)."""
    field_part = ",".join(f"{tag(k)}={v}" for k, v in fields.items())
    return f"{series_key(measurement, tags)} {field_part} {micros(ts)}"


def _gpu_tags(gpu: GpuId) -> dict[str, str]:
    return {"uuid": gpu.uuid, "hostname": gpu.hostname, "gpu": str(int(gpu.index))}


def _check_gpu(ts: float, gpu: GpuId) -> None:
    if not gpu.uuid or not gpu.hostname:
        raise InputError(f"a GPU needs a uuid and a hostname, got {gpu!r}")
    if not math.isfinite(ts):
        raise InputError(f"ts {ts!r} of GPU {gpu.uuid} is not a finite Unix time")


def samples(items: Sequence[Sample]) -> list[str]:
    out = []
    for s in items:
        _check_gpu(s.ts, s.gpu)
        fields = {k: number(v, k) for k, v in s.values.items() if not math.isnan(v)}
        if fields:  # a sample that read nothing leaves no point (InfluxDB has no empty point)
            out.append(line(SAMPLE, _gpu_tags(s.gpu), fields, s.ts))
    return out


def frame_samples(
    ts: np.ndarray,
    uuids: Sequence[str],
    hostnames: Sequence[str],
    gpus: Sequence[int],
    names: Sequence[str],
    values: Sequence[np.ndarray],
    *,
    chunk: int = 5000,
) -> Iterator[str]:
    """Lines of a checked wide frame, column-wise (``_frames.frame_rows``); NaN is left out.
    Formatted a column at a time, ``chunk`` rows at a time (a row at a time is twice as slow)."""
    for c, column in zip(names, values, strict=True):
        bad = np.isinf(column)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InputError(f"frame column {c!r} is infinite in row {row}")
    keys = [tag(n) + "=" for n in names]
    heads: dict[tuple[str, str, int], str] = {}
    for lo in range(0, len(ts), chunk):
        hi = min(lo + chunk, len(ts))
        parts = [
            [k + repr(v) if v == v else "" for v in column[lo:hi].tolist()]
            for k, column in zip(keys, values, strict=True)
        ]
        stamps = np.round(ts[lo:hi] * 1e6).astype(np.int64).tolist()
        for i, cells in enumerate(zip(*parts, strict=True)):
            fields = ",".join(p for p in cells if p)
            if not fields:
                continue
            ident = (uuids[lo + i], hostnames[lo + i], gpus[lo + i])
            head = heads.get(ident)
            if head is None:
                gpu = GpuId(ident[1], ident[2], ident[0])
                head = heads[ident] = series_key(SAMPLE, _gpu_tags(gpu))
            yield f"{head} {fields} {stamps[i]}"


def seen(sightings: Iterable[tuple[float, GpuId]]) -> list[str]:
    """One inventory point per GPU at its newest time among ``sightings`` (and one at its
    oldest, so ``first_ts`` is right for a frame that spans days)."""
    span: dict[str, tuple[float, float, GpuId]] = {}
    for ts, gpu in sightings:
        _check_gpu(ts, gpu)
        old = span.get(gpu.uuid)
        if old is None:
            span[gpu.uuid] = (ts, ts, gpu)
        else:
            span[gpu.uuid] = (min(old[0], ts), max(old[1], ts), gpu if ts >= old[1] else old[2])
    out = []
    for uuid, (first, last, gpu) in span.items():
        fields = {"hostname": string(gpu.hostname), "gpu": f"{int(gpu.index)}i"}
        for name in ("pci_bus_id", "model", "rack"):
            if getattr(gpu, name):
                fields[name] = string(getattr(gpu, name))
        for ts in {first, last}:
            out.append(line(SEEN, {"uuid": uuid}, fields, ts))
    return out


def event_key(e: Event) -> str:
    """What tells two events of one GPU, time and kind apart: their code and detail."""
    text = f"{'' if e.code is None else int(e.code)}\0{e.detail}"
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def events(items: Iterable[Event]) -> list[str]:
    out = []
    for e in items:
        _check_gpu(e.ts, e.gpu)
        fields = {"detail": string(e.detail)}
        if e.code is not None:
            fields["code"] = f"{int(e.code)}i"
        tags = {"uuid": e.gpu.uuid, "kind": e.kind, "key": event_key(e)}
        out.append(line(EVENT, tags, fields, e.ts))
    return out


def failures(items: Iterable[Failure], source: str | None = None) -> list[str]:
    out = []
    for f in items:
        _check_gpu(f.ts, f.gpu)
        fields = {"source": string(source or "")}
        for name in ("precursor_start_ts", "repair_s"):
            value = getattr(f, name)
            if value is not None and not math.isnan(value):
                fields[name] = number(value, name)
        if f.xid is not None:
            fields["xid"] = f"{int(f.xid)}i"
        out.append(line(FAILURE, {"uuid": f.gpu.uuid, "kind": f.kind}, fields, f.ts))
    return out


def rejections(items: Iterable[Rejection]) -> list[str]:
    out = []
    for r in items:
        _check_gpu(r.ts, r.gpu)
        fields = {"reason": string(r.reason)}
        if math.isfinite(r.value):
            fields["value"] = number(r.value, "value")
        out.append(line(REJECTION, {"uuid": r.gpu.uuid, "field": r.field}, fields, r.ts))
    return out


def assignments(items: Iterable[Assignment]) -> list[str]:
    """Every reading of who holds a GPU; ``held=0`` with no pod tags is a reading of nobody."""
    out = []
    for a in items:
        _check_gpu(a.ts, a.gpu)
        who = {"namespace": a.namespace, "pod": a.pod, "container": a.container}
        held = "1i" if any(who.values()) else "0i"
        out.append(line(ASSIGNMENT, {"uuid": a.gpu.uuid, **who}, {"held": held}, a.ts))
    return out


def nodes(items: Iterable[NodeInfo]) -> list[str]:
    out = []
    for n in items:
        if not n.hostname or not math.isfinite(n.ts):
            raise InputError(f"a node reading needs a hostname and a finite time, got {n!r}")
        fields = {"seen": "true"}
        for name in ("driver_version", "cuda_driver_version"):
            if getattr(n, name):
                fields[name] = string(getattr(n, name))
        out.append(line(NODE, {"hostname": n.hostname}, fields, n.ts))
    return out


def verdicts(items: Sequence[Verdict]) -> list[str]:
    """Each verdict as a record (read back by ``read_verdicts``) and as series (Grafana)."""
    out = [
        line(VERDICT, {"uuid": v.gpu.uuid}, {"record": string(verdict_to_json(v))}, v.ts)
        for v in items
    ]
    for p in verdict_series.points(items):
        field = p.name.removeprefix(SERIES + "_")
        out.append(line(SERIES, dict(p.labels), {field: number(p.value, p.name)}, p.ts))
    return out
