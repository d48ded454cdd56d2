"""The model as ``gpuwarden serve``'s scorer: ``assess(store, at)``.

``serve`` calls this every interval and combines it with its own hard-signal assessor, so a
double-bit error or a fatal Xid acts at once whatever the model says. The records are
``health.RiskAssessment``, the type serve decides on: nothing is re-parsed on the way.
"""

from __future__ import annotations

import functools
import os

from gpuwarden.health import RiskAssessment
from gpuwarden.store.base import Store


@functools.lru_cache(maxsize=1)
def _model(path: str | None):  # -> RiskModel
    from gpuwarden.models.artifact import load_model

    return load_model(path)


def threshold() -> float:
    """The at-risk line of the model ``assess`` uses (its card's, or the default)."""
    return float(_model(os.environ.get("GPUWARDEN_MODEL") or None).threshold)


def assess(store: Store, at: float) -> list[RiskAssessment]:
    """Risk for every GPU reporting at ``at``, from the model in ``$GPUWARDEN_MODEL`` (a folder
    written by ``gpuwarden train``) or the shipped one: typed records with the model's own
    state and its reasons with the features behind them."""
    from gpuwarden.models.score import assessments, score_store

    model = _model(os.environ.get("GPUWARDEN_MODEL") or None)
    return assessments(score_store(store, model, at=at))
