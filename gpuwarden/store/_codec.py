"""gpuwarden's records as JSON and back: a verdict as the ``influxdb://`` store keeps it, and
every write the spool holds on disk (``spool``) until its store takes it.

JSON, not pickle: a spool file is data, and reading it back never runs code. A GPU is written
once per record as its six identity fields and referred to by position; floats round-trip
exactly (``json`` writes the shortest repr), NaN included.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, TypeVar

from gpuwarden.errors import InputError
from gpuwarden.health import GpuState, Reason, Verdict
from gpuwarden.telemetry import Assignment, Batch, Event, GpuId, NodeInfo, Rejection, Sample

R = TypeVar("R")


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


def _rows(items: Sequence[Any], g: _Gpus) -> list[list[Any]]:
    """Records that start (ts, gpu, ...) as rows: ts, the GPU's position, the other fields."""
    return [[x.ts, g.ref(x.gpu), *(getattr(x, f.name) for f in fields(x)[2:])] for x in items]


def _records(
    cls: Callable[..., R], rows: Sequence[Sequence[Any]], gpus: Sequence[GpuId]
) -> list[R]:
    return [cls(ts, gpus[i], *rest) for ts, i, *rest in rows]


def records_to_dict(items: Sequence[Any]) -> dict[str, Any]:
    """Events, failures or rejections (any records that start with ts and gpu)."""
    g = _Gpus()
    rows = _rows(items, g)
    return {"gpus": g.table(), "rows": rows}


def records_from_dict(cls: Callable[..., R], d: dict[str, Any]) -> list[R]:
    return _records(cls, d["rows"], _gpus(d["gpus"]))


def batch_to_dict(b: Batch) -> dict[str, Any]:
    g = _Gpus()
    out = {
        "ts": b.ts,
        "samples": [[s.ts, g.ref(s.gpu), dict(s.values)] for s in b.samples],
        "events": _rows(b.events, g),
        "assignments": _rows(b.assignments, g),
        "nodes": [[n.ts, n.hostname, n.driver_version, n.cuda_driver_version] for n in b.nodes],
        "rejected": _rows(b.rejected, g),
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
        events=tuple(_records(Event, d["events"], gpus)),
        problems=tuple(d["problems"]),
        assignments=tuple(_records(Assignment, d["assignments"], gpus)),
        nodes=tuple(NodeInfo(*n) for n in d["nodes"]),
        rejected=tuple(_records(Rejection, d["rejected"], gpus)),
        screened=d["screened"],
    )


def verdicts_to_dict(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    return {"rows": [verdict_to_dict(v) for v in verdicts]}


def verdicts_from_dict(d: dict[str, Any]) -> list[Verdict]:
    return [verdict_from_dict(v) for v in d["rows"]]
