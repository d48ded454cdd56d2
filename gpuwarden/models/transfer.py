"""Training on a user's own fleet from a base model (the shipped one by default).

    base = load_base_model(None)                        # the shipped model, features checked
    est, info = fit_from_base(base, ds, how="warm")     # ds: training_rows(panel, ...)

A fleet of a few hundred GPUs sees a handful of failures a quarter: too few to grow trees
from nothing, enough to tell the shipped model how often its scores come true there. So:

- ``shipped``: no failure at all in the history; the base model is kept as it is.
- ``recalibrate`` (the default with one failure or more): the base trees stay; a sigmoid of
  their score is fit again on every row of the user's history (the trees never saw it, so no
  block needs holding back): stacking, with the base score as the one input. The trees'
  ranking stays whole (the sigmoid even separates rows the base model's isotonic steps tie);
  the risks move (a fleet that fails half as often gets lower ones), and the at-risk line
  moves with them (``carried_threshold``), so the same GPUs are flagged.
- ``warm`` (``--warm-start``): boosting continues from the base trees on the user's earlier rows
  (up to ``extra_iter`` more trees, each scaled by ``learning_rate``), cut back to the count
  that ranks the later block best (none, and it is a recalibration), and the calibration is
  fit on the later block, as ``TimeSplitCalibratedClassifier`` does. The first trees are the
  base model's, unchanged.

Each result is a plain ``TimeSplitCalibratedClassifier``, so it loads, scores and explains
like any other model and holds no type ``artifact.TRUSTED_TYPES`` does not list.

scikit-learn's ``warm_start`` assumes the same data: it bins the new rows afresh and then
reads the old trees' bin thresholds against the new bins, which mis-sums the old trees on the
training rows whenever the user's value ranges differ from the base fleet's. Here the base
model's bin mapper bins the new rows too (``_keep_bins``), so old and new trees read the same
bins and the scores the new trees correct are the scores the model gives.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.calibration import CalibratedClassifierCV
from sklearn.frozen import FrozenEstimator

from gpuwarden.errors import InputError
from gpuwarden.health import card_threshold
from gpuwarden.models.artifact import CARD_FILE, DEFAULT_DIR, MODEL_FILE, RiskModel, load_model
from gpuwarden.models.estimator import AnyFailure, MeanOfDraws, TimeSplitCalibratedClassifier
from gpuwarden.models.features import FEATURE_NAMES
from gpuwarden.models.labels import Dataset
from gpuwarden.models.panel import HourlyPanel
from gpuwarden.models.score import CARD_DRIFT_KEY, CARD_LEVEL_KEY
from gpuwarden.models.train import (
    TrainOptions,
    failing_lives,
    fit_on_rows,
    model_card,
    row_weights,
    training_rows,
    training_summary,
)

HOW = ("shipped", "recalibrate", "warm")
#: Fewer failing GPUs than this in the calibration rows: a two-parameter sigmoid, not an
#: isotonic step function with a step per failure.
ISOTONIC_MIN_FAILURES = 30


@dataclass(frozen=True)
class WarmOptions:
    extra_iter: int = 60  # trees added to the base model's
    learning_rate: float = 0.05  # their shrinkage (the shipped trees used 0.05)
    #: split the user's fleet: the trees learn from the earlier 1 - this, the
    #: calibration from the later block
    calibration_share: float = 0.3
    negative_subsample: float = 0.3  # healthy rows the new trees see
    random_state: int = 0


def model_digest(folder: str | Path) -> str:
    """sha256 of a model folder's skops file: which base model a card names, exactly."""
    path = Path(folder)
    file = path if path.suffix == ".skops" else path / MODEL_FILE
    return hashlib.sha256(file.read_bytes()).hexdigest()


def load_base_model(path: str | Path | None) -> RiskModel:
    """The model to start from (None: the shipped one), refused with the features named when
    they are not the ones this gpuwarden computes (its trees would read the wrong columns)."""
    folder = DEFAULT_DIR if path is None else Path(path)
    card_file = (folder.parent if folder.suffix == ".skops" else folder) / CARD_FILE
    if card_file.is_file():
        try:
            card = json.loads(card_file.read_text())
        except json.JSONDecodeError as exc:
            raise InputError(f"base model: {card_file} is not valid JSON: {exc}") from exc
        _check_features(card.get("features"), folder)
    model = load_model(path)
    _check_features(list(getattr(model.estimator, "feature_names_in_", [])), folder)
    if not isinstance(model.estimator, TimeSplitCalibratedClassifier):
        raise InputError(f"base model {folder}: not a gpuwarden tree model")
    return model


def _check_features(names: Any, folder: Path) -> None:
    if names is None:
        return
    names = [str(n) for n in names]
    if names == list(FEATURE_NAMES):
        return
    ours = set(FEATURE_NAMES)
    missing = [n for n in FEATURE_NAMES if n not in set(names)]
    extra = [n for n in names if n not in ours]
    detail = []
    if missing:
        detail.append(
            f"lacks {len(missing)} ({', '.join(missing[:4])}{', ...' * (len(missing) > 4)})"
        )
    if extra:
        detail.append(
            f"has {len(extra)} unknown ({', '.join(extra[:4])}{', ...' * (len(extra) > 4)})"
        )
    if not detail:
        detail.append("has them in another order")
    raise InputError(
        f"base model {folder} was trained on other features than this gpuwarden computes: it "
        f"{'; '.join(detail)}; train --from-scratch, or pick a base model of this version"
    )


def base_model_record(base: RiskModel) -> dict[str, Any]:
    """What the new card says of the model it started from."""
    folder = Path(base.path) if base.path else DEFAULT_DIR
    return {
        "path": "shipped" if folder.resolve() == DEFAULT_DIR.resolve() else str(folder),
        "created": base.card.get("created"),
        "gpuwarden_version": base.card.get("gpuwarden_version"),
        "sha256": model_digest(folder),
        "trees": int(getattr(base.estimator.estimator_, "n_iter_", 0)),
        "training_failures": base.card.get("training_data", {}).get("failures"),
    }


def time_blocks(times: np.ndarray, share: float) -> tuple[float, np.ndarray, np.ndarray]:
    """(first calibration time, early mask, late mask): the latest ``share`` of the distinct
    scoring times calibrate, the rest train."""
    distinct = np.unique(times)
    if distinct.size < 2:
        raise InputError("the history holds fewer than two scoring times")
    at = distinct[min(distinct.size - 1, max(1, int(round(distinct.size * (1 - share)))))]
    return float(at), times < at, times >= at


def failing_in(ds: Dataset, mask: np.ndarray) -> int:
    return int(ds.meta.loc[mask & (ds.y == 1), "key"].nunique())


def _keep_bins(trees: Any) -> None:
    """Make the next ``fit`` of ``trees`` bin its rows with the bin mapper it already has
    (see the module docstring); ``fit`` assigns a fresh mapper before binning, so the
    override puts the old one back before it bins."""
    mapper = trees._bin_mapper

    def bin_data(X, sample_weight, is_training_data):  # noqa: ARG001 - sklearn's signature
        trees._bin_mapper = mapper
        binned = mapper.transform(X)
        return binned if is_training_data else np.ascontiguousarray(binned)

    trees._bin_data = bin_data


def continue_trees(
    base_trees: Any, X: np.ndarray, y: np.ndarray, weight: np.ndarray | None, o: WarmOptions
) -> Any:
    """A copy of ``base_trees`` with ``o.extra_iter`` trees more, fit on (X, y)."""
    trees = copy.deepcopy(base_trees)
    n_base = int(trees.n_iter_)
    trees.set_params(
        warm_start=True,
        max_iter=n_base + o.extra_iter,
        learning_rate=o.learning_rate,
        early_stopping=False,  # few failures: a validation split would hold one or none
    )
    _keep_bins(trees)
    try:
        kw = {} if weight is None else {"sample_weight": weight}
        trees.fit(X, y, **kw)
    finally:
        trees.__dict__.pop("_bin_data", None)
    if trees.n_iter_ != n_base + o.extra_iter:
        raise RuntimeError(f"warm start grew {trees.n_iter_ - n_base} trees, not {o.extra_iter}")
    return trees


def _assemble(
    base: TimeSplitCalibratedClassifier,
    trees: Any,
    calibrator: Any,
    ds: Dataset,
    split: float,
    method: str,
    o: WarmOptions,
) -> TimeSplitCalibratedClassifier:
    """A fitted ``TimeSplitCalibratedClassifier`` from its parts, as its ``fit`` leaves one."""
    est = TimeSplitCalibratedClassifier(
        copy.deepcopy(base.estimator),
        method=method,
        calibration_share=o.calibration_share,
        negative_subsample=o.negative_subsample,
        random_state=o.random_state,
    )
    est.feature_names_in_ = np.asarray(ds.X.columns, dtype=object)
    est.n_features_in_ = ds.X.shape[1]
    est.used_features_ = base.used_features_.copy()
    est.estimator_ = trees
    est.set_calibrator(calibrator)
    est.split_time_ = split
    Xa = ds.X.to_numpy(np.float64)
    negatives = Xa[ds.y == 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: median is NaN
        # explanations compare a GPU with the healthy GPUs of its own fleet
        est.reference_ = (
            np.nanmedian(negatives, axis=0) if len(negatives) else base.reference_.copy()
        )
    return est


def _calibrate(trees: Any, X: np.ndarray, y: np.ndarray, failures: int) -> tuple[Any, str]:
    method = "isotonic" if failures >= ISOTONIC_MIN_FAILURES else "sigmoid"
    cal = CalibratedClassifierCV(FrozenEstimator(trees), method=method)
    return cal.fit(X, y), method


def auto_choice(total: int, n_early: int, n_late: int) -> tuple[str, str]:
    """(one of ``HOW``, why) for a history of ``total`` failing GPUs, ``n_early`` of them in
    the block warm-started trees would learn from and ``n_late`` in the calibration block.

    Warm start is never the default: on bench_warmstart.py's user fleet it ranked the held-out
    month worse than the recalibrated base at 6 and 83 failing GPUs and no better at 20, while
    the recalibration beat the base model at every level."""
    if total == 0:
        return "shipped", "no GPU failure in the history: nothing to adapt to"
    # a GPU whose last week before failing spans the split counts in both blocks
    both = max(0, n_early + n_late - total)
    return "recalibrate", (
        f"{total} failing GPUs ({n_early} in the earlier block, {n_late} in the later"
        + (f", {both} of them in both" if both else "")
        + "): the calibration is refit on them; --warm-start grows trees too"
    )


def fit_from_base(
    base: RiskModel,
    ds: Dataset,
    *,
    how: str = "auto",
    options: WarmOptions = WarmOptions(),
    weight: np.ndarray | None = None,
) -> tuple[TimeSplitCalibratedClassifier, dict[str, Any]]:
    """Adapt ``base`` to the rows ``ds`` of the user's fleet; ``how`` is one of ``HOW`` or
    "auto" (warm with enough failures in both time blocks, else recalibrate, else shipped).
    Returns the estimator and what was done and why (for the card and the CLI)."""
    if how not in (*HOW, "auto"):
        raise InputError(f"unknown way to start from the base model: {how!r}")
    if list(ds.X.columns) != list(base.estimator.feature_names_in_):
        _check_features(list(base.estimator.feature_names_in_), Path(base.path or DEFAULT_DIR))
    b: TimeSplitCalibratedClassifier = base.estimator
    o = options
    times = ds.meta["at"].to_numpy(np.float64)
    total = failing_in(ds, np.ones(len(ds), dtype=bool))
    split, early, late = time_blocks(times, o.calibration_share)
    n_early, n_late = failing_in(ds, early), failing_in(ds, late)
    chosen, why = auto_choice(total, n_early, n_late) if how == "auto" else (how, f"asked: {how}")
    if chosen != "shipped" and total == 0:
        raise InputError("no GPU failure in the history: nothing to fit; keep the base model")
    info: dict[str, Any] = {
        "how": chosen,
        "why": why,
        "failures": total,
        "failures_learn": n_early,
        "failures_calibrate": n_late,
    }
    if chosen == "shipped":
        return copy.deepcopy(b), info
    Xu = ds.X.to_numpy(np.float64)[:, b.used_features_]

    def recalibrated(note: dict[str, Any]) -> tuple[TimeSplitCalibratedClassifier, dict]:
        # always a sigmoid: strictly monotone, so the trees' ranking stays whole (isotonic
        # steps tie rows: PR-AUC 0.359 against the sigmoid's 0.379, bench_warmstart.py)
        cal, method = _calibrate(b.estimator_, Xu, ds.y, 0)
        est = _assemble(b, copy.deepcopy(b.estimator_), cal, ds, float(times.min()), method, o)
        base_line = card_threshold(base.card)  # the card's, not an operator's setting
        line = carried_threshold(b, est, ds, base_line)
        return est, {
            **info,
            **note,
            "calibration": method,
            "calibration_rows": len(ds),
            "threshold": line,
            "threshold_from": f"the base model's flags at {base_line:g} on this history",
        }

    if chosen == "recalibrate":
        return recalibrated({})
    if isinstance(b.estimator_, MeanOfDraws):
        raise InputError(
            f"warm start continues one tree model, and the base model averages "
            f"{len(b.estimator_.members_)}; recalibrate it instead"
        )
    if isinstance(b.estimator_, AnyFailure):
        raise InputError(
            "warm start continues binary trees, and the base model's trees learn failure "
            "modes; recalibrate it instead"
        )
    if n_early == 0 or n_late == 0:
        raise InputError(
            f"warm start needs failures in both time blocks (earlier: {n_early}, later: "
            f"{n_late}); give a longer history or recalibrate instead"
        )
    learn = early.copy()
    if o.negative_subsample < 1.0:
        rng = np.random.default_rng(o.random_state)
        learn &= (ds.y == 1) | (rng.random(len(ds)) < o.negative_subsample)
    w = None if weight is None else np.asarray(weight, dtype=np.float64)[learn]
    trees = continue_trees(b.estimator_, Xu[learn], ds.y[learn], w, o)
    n_base = int(b.estimator_.n_iter_)
    added, ap = keep_best_trees(trees, n_base, Xu[late], ds.y[late])
    grown: dict[str, Any] = {
        "trees_base": n_base,
        "trees_added": added,
        "learning_rate": o.learning_rate,
        "later_block_pr_auc": {"base": ap[0], "warm": ap[added]},
    }
    if added == 0:
        return recalibrated(
            {
                **grown,
                "how": "recalibrate",
                "why": f"{info['why']}; no added tree ranked the later block better than the "
                "base trees, so only the calibration is refit",
            }
        )
    cal, method = _calibrate(trees, Xu[late], ds.y[late], n_late)
    est = _assemble(b, trees, cal, ds, split, method, o)
    base_line = card_threshold(base.card)
    return est, {
        **info,
        **grown,
        "calibration": method,
        "calibration_rows": int(late.sum()),
        "threshold": matched_threshold(b, est, ds, base_line),
        "threshold_from": f"as many of this history's rows flagged as the base model flags at "
        f"{base_line:g}",
    }


def carried_threshold(
    base: TimeSplitCalibratedClassifier,
    est: TimeSplitCalibratedClassifier,
    ds: Dataset,
    line: float,
) -> float:
    """The at-risk line of the recalibrated ``est`` that flags the rows of ``ds`` the base
    model flags at ``line``: the same trees, so the same GPUs, with risks in this fleet's
    terms. Left at ``line`` on a fleet that fails less often than the base model's, the new
    risks mostly stay under it: on bench_warmstart.py's seed 102 the failures caught a day
    ahead fell from 74% to 23-54% (false flags from 1.42 to 0.09-0.89 per 1,000 GPU-days)."""
    flagged = base.predict_proba(ds.X)[:, 1] >= line
    if not flagged.any():
        return line  # nothing flagged to carry over: keep the base model's line
    return float(est.predict_proba(ds.X[flagged])[:, 1].min())


def matched_threshold(
    base: TimeSplitCalibratedClassifier,
    est: TimeSplitCalibratedClassifier,
    ds: Dataset,
    line: float,
) -> float:
    """The at-risk line of the warm-started ``est`` that flags as many rows of ``ds`` as the
    base model flags at ``line``. Its trees rank the rows anew, so the same rows cannot be
    carried over (``carried_threshold``); the same share of them is. Without it a warm model
    kept the default line (0.7) whatever its base's card said."""
    k = int((base.predict_proba(ds.X)[:, 1] >= line).sum())
    if k == 0:
        return line  # nothing flagged to carry over: keep the base model's line
    return float(np.sort(est.predict_proba(ds.X)[:, 1])[::-1][k - 1])


def keep_best_trees(
    trees: Any, n_base: int, X: np.ndarray, y: np.ndarray, every: int = 5
) -> tuple[int, dict[int, float]]:
    """Cut the trees grown after the first ``n_base`` back to the count (a multiple of
    ``every``) whose scores rank the later block's rows (X, y) best by average precision; 0
    when none beats the base trees. A few failures overfit quickly, and the later block is the
    only judge the trees never saw. Returns (trees kept, PR-AUC by count of added trees)."""
    from sklearn.metrics import average_precision_score

    grown = int(trees.n_iter_) - n_base
    ap: dict[int, float] = {}
    for i, raw in enumerate(trees.staged_decision_function(X)):
        k = i + 1 - n_base
        if k >= 0 and (k % every == 0 or k == grown):
            ap[k] = float(average_precision_score(y, raw))
    best = max(ap, key=lambda k: (ap[k], -k))
    if ap[best] <= ap[0]:
        best = 0
    del trees._predictors[n_base + best :]
    trees.set_params(max_iter=n_base + best)
    for name in ("train_score_", "validation_score_"):
        scores = getattr(trees, name, None)
        if scores is not None and len(scores) > trees.n_iter_ + 1:
            setattr(trees, name, np.asarray(scores)[: trees.n_iter_ + 1])
    return best, ap


@dataclass
class UserModel:
    """A model trained for the user's fleet and what was done: ``how`` is "scratch" or one of
    ``HOW``; ``why`` says it in a sentence."""

    model: RiskModel
    how: str
    why: str


def _drift_seen(base: dict | None, fleet: dict | None, info: dict[str, Any]) -> dict | None:
    """The drift a user model's trees were grown on: the base model's for its own trees, with
    this fleet's added where new trees grew on it (``warm``)."""
    if info["how"] != "warm" or fleet is None:
        return base
    if base is None:
        return None  # the base's trees saw an unknown range: no limit is known either
    return {
        "min": min(base["min"], fleet["min"]),
        "max": max(base["max"], fleet["max"]),
        "fleets": base["fleets"] + fleet["fleets"],
    }


def _level_seen(base: dict | None, fleet: dict | None) -> dict | None:
    """The error levels a recalibrated or warm-started model has seen: the base model's
    training fleets' and this fleet's, whose rows fit its calibration (the highest of each)."""
    if base is None or fleet is None:
        return base or fleet
    keys = (set(base) | set(fleet)) - {"fleets"}
    out = {k: max(base.get(k, 0.0), fleet.get(k, 0.0)) for k in sorted(keys)}
    return {**out, "fleets": base.get("fleets", 0) + fleet.get("fleets", 0)}


def train_user_model(
    panel: HourlyPanel,
    *,
    start_from: str = "auto",
    base_path: str | Path | None = None,
    adapt: str = "auto",
    labels_until: float | None = None,
    options: TrainOptions | None = None,
    warm: WarmOptions = WarmOptions(),
    source: dict[str, Any] | None = None,
    progress: bool = False,
) -> UserModel:
    """``gpuwarden train``: from the base model (``start_from`` "base" or "auto"), adapted as
    ``adapt`` says (one of ``HOW``, or "auto": ``auto_choice``), or from scratch ("scratch").

    "auto" starts from the base model however many failures the history holds: trees of the
    user's own ranked the held-out month worse than the shipped model's at every level
    bench_warmstart.py measured, up to 83 failing GPUs (the shipped model learnt from 556)."""
    options = TrainOptions() if options is None else options
    if start_from not in ("auto", "base", "scratch"):
        raise InputError(f"start_from must be auto, base or scratch, got {start_from!r}")
    started = time.time()
    ds = training_rows(panel, labels_until=labels_until, options=options, progress=progress)
    n = failing_lives(ds)
    if start_from == "scratch":
        why = f"asked for, {n} failing GPUs in the history"
        model = fit_on_rows(panel, ds, options=options, source=source, started=started)
        model.card["transfer"] = {"how": "scratch", "why": why, "failures": n}
        return UserModel(model, "scratch", why)
    base = load_base_model(base_path)
    if base.horizon_s != options.horizon_s:
        raise InputError(
            f"the base model predicts failures within {base.horizon_s / 86400:g} days, "
            f"not {options.horizon_s / 86400:g}: train --from-scratch for another horizon"
        )
    est, info = fit_from_base(base, ds, how=adapt, options=warm, weight=row_weights(ds, options))
    what = {
        "shipped": "the base model as it is",
        "recalibrate": "the base model's trees, calibration refit on this fleet",
        "warm": f"the base model's trees + {warm.extra_iter} trees grown on this fleet, "
        "calibration refit on its later block",
    }[info["how"]]
    if info["how"] == "shipped":  # nothing was fit: the base model's card and figures stand
        card = {k: v for k, v in base.card.items() if k not in ("format", "card_version")}
        card["created"] = pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds")
        card["estimator"] = what
        card["training_data"] = {**(source or {}), **training_summary(panel, ds, float("nan"))}
    else:
        card = model_card(
            est,
            panel,
            ds,
            options=options,
            estimator=what,
            source=source,
            started=started,
            threshold=info["threshold"],  # recalibrated and warm: the base's line, carried
        )
    if info["how"] == "recalibrate":
        card["metrics"]["calibration_block"]["block"] = "every row of the history"
    card[CARD_DRIFT_KEY] = _drift_seen(
        base.card.get(CARD_DRIFT_KEY), card.get(CARD_DRIFT_KEY), info
    )
    if info["how"] in ("recalibrate", "warm"):
        card[CARD_LEVEL_KEY] = _level_seen(base.card.get(CARD_LEVEL_KEY), card.get(CARD_LEVEL_KEY))
    card["base_model"] = base_model_record(base)
    card["transfer"] = info
    return UserModel(RiskModel(est, card), info["how"], info["why"])
