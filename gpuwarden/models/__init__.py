"""Failure prediction: features, labels, the rule baseline, a calibrated risk model.

    from gpuwarden.models import load_model, score_store
    rows = score_store(store, load_model())        # one row per GPU: risk, state, reasons

The pieces, in the order data flows through them:

    history.load_panel    store -> hourly (hours x GPU lives) arrays   panel.py, _hourly.py
    features              per-GPU features at scoring times            features.py, _windows.py
    labels                fails within the horizon? training sets      labels.py
    rules                 the rule baseline and the hard signals       rules.py
    estimator             trees + calibration on a later time block    estimator.py
    train / artifact      fit, model card, skops files                 train.py, artifact.py
    score / reasons       per-GPU verdicts in words                    score.py, reasons.py
    evaluate              recall at 24 h, false flags, PR-AUC, plots   evaluate.py, _metrics.py
    cli                   gpuwarden train / score / evaluate           cli.py

scikit-learn is imported only by the modules that need it, so ``import gpuwarden.models`` is
cheap. docs/models.md describes every feature, the metrics and the measured results.
"""

from __future__ import annotations

from gpuwarden.plugins import lazy_exports

_EXPORTS = {
    "load_panel": "gpuwarden.models.history",
    "compute_features": "gpuwarden.models.features",
    "rows_at": "gpuwarden.models.features",
    "FEATURES": "gpuwarden.models.features",
    "build_dataset": "gpuwarden.models.labels",
    "TimeSplitCalibratedClassifier": "gpuwarden.models.estimator",
    "RiskModel": "gpuwarden.models.artifact",
    "load_model": "gpuwarden.models.artifact",
    "save_model": "gpuwarden.models.artifact",
    "train_from_store": "gpuwarden.models.train",
    "TrainOptions": "gpuwarden.models.train",
    "RiskScore": "gpuwarden.models.score",
    "score_store": "gpuwarden.models.score",
    "backtest": "gpuwarden.models.score",
    "evaluate_store": "gpuwarden.models.evaluate",
    "assess": "gpuwarden.models._assess",
    "threshold": "gpuwarden.models._assess",
}

__getattr__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)
