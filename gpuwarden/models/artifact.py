"""Saving and loading risk models: a skops file and a model card, never pickle.

A model is a folder:

    MODEL/model.skops        the fitted TimeSplitCalibratedClassifier (skops format, deflated)
    MODEL/model_card.json    version, features, training data summary, metrics, threshold

Loading checks every type the file would create against ``TRUSTED_TYPES`` (skops'
``get_untrusted_types``) and refuses a file naming anything else: a model file is data, and a
tampered one must not run code. The default model ships in ``gpuwarden/models/default/`` and is
used when no model is given (``make model`` rebuilds it).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.health import DEFAULT_AT_RISK, at_risk_threshold
from gpuwarden.models.features import FEATURE_NAMES

MODEL_FILE = "model.skops"
CARD_FILE = "model_card.json"
CARD_FORMAT = "gpuwarden-risk-model"
CARD_VERSION = 1
DEFAULT_DIR = Path(__file__).parent / "default"

#: Every non-builtin type a gpuwarden risk model may contain beyond what skops trusts itself.
TRUSTED_TYPES: frozenset[str] = frozenset(
    {
        "gpuwarden.models.estimator.TimeSplitCalibratedClassifier",
        "gpuwarden.models.estimator.MeanOfDraws",
        "gpuwarden.models.estimator.AnyFailure",
        "sklearn.calibration._CalibratedClassifier",
        "sklearn.calibration._SigmoidCalibration",
        "sklearn.calibration.CalibratedClassifierCV",
        "sklearn.frozen._frozen.FrozenEstimator",
        "sklearn.isotonic.IsotonicRegression",
        "sklearn.ensemble._hist_gradient_boosting.gradient_boosting.HistGradientBoostingClassifier",
        "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
        "sklearn.ensemble._hist_gradient_boosting.binning._BinMapper",
        "sklearn._loss.loss.HalfBinomialLoss",
        "sklearn._loss.link.LogitLink",
    }
)


@dataclass
class RiskModel:
    """A loaded model: the estimator, its card, where it came from."""

    estimator: Any
    card: dict[str, Any] = field(default_factory=dict)
    path: str = ""

    @property
    def threshold(self) -> float:
        return at_risk_threshold(self.card)

    @property
    def horizon_s(self) -> float:
        return float(self.card.get("horizon_s", 7 * 86400.0))

    def risk(self, X: pd.DataFrame) -> np.ndarray:
        """Calibrated probability of failing within the horizon, one per row."""
        if len(X) == 0:
            return np.empty(0)
        return self.estimator.predict_proba(X)[:, 1]


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None  # JSON has no NaN
    return obj


def save_model(model: RiskModel, out: str | Path) -> Path:
    """Write ``out/model.skops`` and ``out/model_card.json``; returns the folder."""
    import skops.io as sio

    folder = Path(out)
    if folder.suffix == ".skops":
        raise InputError(
            f"{out}: give a folder for the model (it holds {MODEL_FILE} and "
            f"{CARD_FILE}), not a file name"
        )
    folder.mkdir(parents=True, exist_ok=True)
    card = {"format": CARD_FORMAT, "card_version": CARD_VERSION, **model.card}
    card.setdefault("threshold", DEFAULT_AT_RISK)
    card.setdefault("features", list(FEATURE_NAMES))
    sio.dump(
        model.estimator, folder / MODEL_FILE, compression=zipfile.ZIP_DEFLATED, compresslevel=9
    )
    (folder / CARD_FILE).write_text(json.dumps(_jsonable(card), indent=2) + "\n")
    return folder


def load_model(path: str | Path | None = None) -> RiskModel:
    """Load a model folder (or its ``model.skops``); None loads the shipped default."""
    model = load_any_features(path)
    names = list(getattr(model.estimator, "feature_names_in_", []))
    if names != list(FEATURE_NAMES):
        raise InputError(
            f"{model_file(path)} was trained on other features "
            f"(gpuwarden {model.card.get('gpuwarden_version', '?')}); "
            "retrain it with `gpuwarden train`"
        )
    return model


def model_file(path: str | Path | None) -> Path:
    """The ``model.skops`` a model path names (None: the shipped default's)."""
    folder = DEFAULT_DIR if path is None else Path(path)
    return folder if folder.suffix == ".skops" else folder / MODEL_FILE


def load_any_features(path: str | Path | None = None) -> RiskModel:
    """``load_model`` without its check that the trees read this gpuwarden's features (a bench
    scoring an incumbent through a candidate's code selects its columns itself)."""
    import skops.io as sio

    folder = DEFAULT_DIR if path is None else Path(path)
    file = model_file(path)
    card_file = file.with_name(CARD_FILE)
    if not file.is_file():
        hint = " (run `make model` to build the default model)" if path is None else ""
        raise InputError(f"no model at {file}{hint}")
    try:
        untrusted = sio.get_untrusted_types(file=file)
    except Exception as exc:  # skops raises zip, JSON and key errors for a damaged file
        raise InputError(f"{file} is not a skops model file: {exc}") from exc
    refused = sorted(set(untrusted) - TRUSTED_TYPES)
    if refused:
        raise InputError(f"{file} names types gpuwarden does not load: {', '.join(refused)}")
    try:
        estimator = sio.load(file, trusted=untrusted)
    except Exception as exc:
        raise InputError(f"cannot load the model in {file}: {exc}") from exc
    card: dict[str, Any] = {}
    if card_file.is_file():
        try:
            card = json.loads(card_file.read_text())
        except json.JSONDecodeError as exc:
            raise InputError(f"{card_file} is not valid JSON: {exc}") from exc
    return RiskModel(estimator, card, str(folder))
