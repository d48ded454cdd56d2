"""gpuwarden's records as JSON and back: a verdict as the ``influxdb://`` store keeps it, and
every write the spool holds on disk (``spool``) until its store takes it.

JSON, not pickle: a spool file is data, and reading it back never runs code. A GPU is written
once per record as its six identity fields and referred to by position; floats round-trip
exactly (``json`` writes the shortest repr), NaN included.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from gpuwarden.errors import InputError
from gpuwarden.health import GpuState, Reason, Verdict
from gpuwarden.telemetry import (
    Assignment,
    Batch,
    Event,
    Failure,
    GpuId,
    NodeInfo,
    Rejection,
    Sample,
)


class _Gpus:
    """GPU identities of one record, each written once and referred to by position."""

    def __init__(self) -> None:
        self.index: dict[GpuId, int] = {}

    def ref(self, gpu: GpuId) -> int:
        return self.index.setdefault(gpu, len(self.index))

    def table(self) -> list[list[Any]]:
        return [list(g) for g in self.index]


def _gpus(table: Sequence[Sequence[Any]]) -> list[GpuId]:
    return [GpuId(str(h), int(i), str(u), str(p), str(m), str(r)) for h, i, u, p, m, r in table]


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


def verdict_to_dict(v: Verdict) -> dict[str, Any]:
    return {
        "ts": float(v.ts),
        "gpu": list(v.gpu),
        "state": str(v.state),
        "risk": _num(v.risk),
        "cause": v.cause,
        "since": _num(v.since),
        "changed_from": None if v.changed_from is None else str(v.changed_from),
        "reasons": [r.to_json() if isinstance(r, Reason) else str(r) for r in v.reasons],
        "action": v.action,
        "threshold": _num(v.threshold),
    }


def verdict_from_dict(d: dict[str, Any]) -> Verdict:
    (gpu,) = _gpus([d["gpu"]])
    return Verdict(
        ts=float(d["ts"]),
        gpu=gpu,
        state=GpuState(d["state"]),
        risk=_nan(d.get("risk")),
        cause=d.get("cause", "model"),
        since=d.get("since"),
        changed_from=None if d.get("changed_from") is None else GpuState(d["changed_from"]),
        reasons=tuple(Reason.from_json(r) for r in d.get("reasons", ())),
        action=d.get("action", ""),
        threshold=_nan(d.get("threshold")),
    )


def verdict_to_json(v: Verdict) -> str:
    return json.dumps(verdict_to_dict(v), separators=(",", ":"))


def verdict_from_json(text: str) -> Verdict:
    try:
        return verdict_from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"a stored verdict is not one gpuwarden wrote: {exc}") from exc


def batch_to_dict(b: Batch) -> dict[str, Any]:
    g = _Gpus()
    out = {
        "ts": b.ts,
        "samples": [[s.ts, g.ref(s.gpu), dict(s.values)] for s in b.samples],
        "events": [[e.ts, g.ref(e.gpu), e.kind, e.code, e.detail] for e in b.events],
        "assignments": [
            [a.ts, g.ref(a.gpu), a.namespace, a.pod, a.container] for a in b.assignments
        ],
        "nodes": [[n.ts, n.hostname, n.driver_version, n.cuda_driver_version] for n in b.nodes],
        "rejected": [[r.ts, g.ref(r.gpu), r.field, r.reason, r.value] for r in b.rejected],
        "problems": list(b.problems),
        "screened": b.screened,
    }
    out["gpus"] = g.table()
    return out


def batch_from_dict(d: dict[str, Any]) -> Batch:
    gpus = _gpus(d["gpus"])
    return Batch(
        ts=d["ts"],
        samples=tuple(Sample(ts, gpus[i], values) for ts, i, values in d["samples"]),
        events=tuple(Event(ts, gpus[i], k, c, det) for ts, i, k, c, det in d["events"]),
        problems=tuple(d["problems"]),
        assignments=tuple(Assignment(ts, gpus[i], *who) for ts, i, *who in d["assignments"]),
        nodes=tuple(NodeInfo(*n) for n in d["nodes"]),
        rejected=tuple(Rejection(ts, gpus[i], f, r, v) for ts, i, f, r, v in d["rejected"]),
        screened=d["screened"],
    )


def events_to_dict(events: Sequence[Event]) -> dict[str, Any]:
    g = _Gpus()
    rows = [[e.ts, g.ref(e.gpu), e.kind, e.code, e.detail] for e in events]
    return {"gpus": g.table(), "rows": rows}


def events_from_dict(d: dict[str, Any]) -> list[Event]:
    gpus = _gpus(d["gpus"])
    return [Event(ts, gpus[i], k, c, det) for ts, i, k, c, det in d["rows"]]


def failures_to_dict(failures: Sequence[Failure]) -> dict[str, Any]:
    g = _Gpus()
    rows = [[f.ts, g.ref(f.gpu), f.kind, f.precursor_start_ts, f.repair_s, f.xid] for f in failures]
    return {"gpus": g.table(), "rows": rows}


def failures_from_dict(d: dict[str, Any]) -> list[Failure]:
    gpus = _gpus(d["gpus"])
    return [Failure(ts, gpus[i], k, p, r, x) for ts, i, k, p, r, x in d["rows"]]


def rejections_to_dict(rejections: Sequence[Rejection]) -> dict[str, Any]:
    g = _Gpus()
    rows = [[r.ts, g.ref(r.gpu), r.field, r.reason, r.value] for r in rejections]
    return {"gpus": g.table(), "rows": rows}


def rejections_from_dict(d: dict[str, Any]) -> list[Rejection]:
    gpus = _gpus(d["gpus"])
    return [Rejection(ts, gpus[i], f, r, v) for ts, i, f, r, v in d["rows"]]


def verdicts_to_dict(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    return {"rows": [verdict_to_dict(v) for v in verdicts]}


def verdicts_from_dict(d: dict[str, Any]) -> list[Verdict]:
    return [verdict_from_dict(v) for v in d["rows"]]
