"""The model as ``gpuwarden serve``'s scorer: ``assess(store, at)``.

``serve`` calls this every interval (gpuwarden/serve/assessors.py finds it by name) and combines
it with its own hard-signal assessor, so a double-bit error or a fatal Xid acts at once whatever
the model says. The records carry the attribute names ``serve`` reads (``gpu``, ``ts``,
``risk``, ``reasons``); models does not import the alerting layer above it.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

from gpuwarden.store.base import Store
from gpuwarden.telemetry import GpuId


@dataclass(frozen=True)
class ModelAssessment:
    gpu: GpuId
    ts: float
    risk: float
    reasons: tuple[str, ...] = ()


@functools.lru_cache(maxsize=1)
def _model(path: str | None):  # -> RiskModel
    from gpuwarden.models.artifact import load_model

    return load_model(path)


def threshold() -> float:
    """The at-risk line of the model ``assess`` uses (its card's, or the default)."""
    return float(_model(os.environ.get("GPUWARDEN_MODEL") or None).threshold)


def assess(store: Store, at: float) -> list[ModelAssessment]:
    """Risk for every GPU reporting at ``at``, from the model in ``$GPUWARDEN_MODEL`` (a folder
    written by ``gpuwarden train``) or the shipped one."""
    from gpuwarden.models.score import score_store

    frame = score_store(store, _model(os.environ.get("GPUWARDEN_MODEL") or None), at=at)
    out = []
    for r in frame.itertuples(index=False):
        reasons = tuple(p.strip() for p in str(r.reasons or "").split(";") if p.strip())
        risk = float(r.risk)
        out.append(
            ModelAssessment(
                gpu=GpuId(str(r.hostname), int(r.gpu), str(r.uuid), "", str(r.model)),
                ts=float(r.at),
                risk=risk if math.isfinite(risk) else math.nan,
                reasons=reasons,
            )
        )
    return out
