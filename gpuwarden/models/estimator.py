"""The risk model: gradient-boosted trees, calibrated on a later block of time.

``TimeSplitCalibratedClassifier`` follows scikit-learn's conventions (parameters only in
``__init__``, ``fit`` returns self, learned attributes end in ``_``, ``predict_proba`` columns
follow ``classes_``). ``fit(X, y, sample_time=...)`` trains a clone of ``estimator`` on the
earliest ``1 - calibration_share`` of the scoring times and fits the probability calibration
(isotonic or sigmoid, on the frozen trees) on the later block, so the calibrated risk is checked
against a period the trees never saw and 0.7 means a 70% chance of failing within the horizon.

Isotonic calibration is a step function: every score within one of its blocks gets the same
probability, so it throws away the trees' ranking inside a block (a wide block near the
threshold puts healthy and failing GPUs on the same value). ``centred_isotonic`` keeps the
steps' values but interpolates between the blocks' centres instead (after centred isotonic
regression, Oron and Flournoy, 2017; the centre here is the midpoint of a block's scores):
still monotone and calibrated, and strictly increasing between the lowest and the highest
block, so the risk keeps the trees' order.

With ``n_draws`` above 1 the trees are grown that many times on the same training block, each
time with its own draw of the healthy rows kept and of early stopping's split, and the score
is the mean of their log-odds (``MeanOfDraws``), calibrated once: two trainings of one recipe
then differ less than two single draws do. ``fit(..., draw_X=)`` gives each later draw rows of
its own (the same rows and columns with other values, e.g. another draw of the nodes whose
HBM temperature is hidden); the calibration and the reference read ``X``, draw 0's.

Early stopping holds out whole groups with ``early_stop_groups`` and ``fit(..., groups=)`` (the
GPU life each row belongs to): scikit-learn's own split draws single rows, so the hourly rows
of one GPU's life sit on both sides and the held-out loss keeps falling as the trees learn
that GPU. ``group_holdout`` keeps ``validation_fraction`` of the groups out instead, failing
and healthy lives apart, so the trees stop when they stop improving on GPUs they never saw.

With ``AnyFailure`` as the estimator and ``fit(..., tree_y=modes)``, the trees learn which
failure mode a row precedes (one class per mode) and are scored as "fails at all", so the
calibration still sees one binary score.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.special import expit, logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.frozen import FrozenEstimator
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.validation import check_is_fitted


def default_trees(
    random_state: int = 0, max_features: float = 1.0
) -> HistGradientBoostingClassifier:
    """The default tree model: NaN-aware, class-weighted (failures are ~1% of rows).
    ``max_features``: the share of features each split chooses from (1.0: all, shipped)."""
    return HistGradientBoostingClassifier(
        max_features=max_features,
        learning_rate=0.05,
        max_iter=300,
        max_leaf_nodes=15,
        min_samples_leaf=100,
        l2_regularization=1.0,
        class_weight="balanced",
        early_stopping=True,
        validation_fraction=0.15,
        n_iter_no_change=25,
        random_state=random_state,
    )


def centred_isotonic(calibrator) -> np.ndarray | None:
    """(2, k) array: the trees' score at each isotonic block's centre, and the block's
    probability; None when ``calibrator`` (a fitted binary ``CalibratedClassifierCV``) is
    not isotonic. A block is a run of equal probabilities; scikit-learn keeps its first and
    last score, and the centre is their midpoint. The lowest and highest scores seen keep
    the end blocks' values, so scores beyond them are clipped as before."""
    iso = calibrator.calibrated_classifiers_[0].calibrators[0]
    if not hasattr(iso, "X_thresholds_"):
        return None
    x = np.asarray(iso.X_thresholds_, dtype=np.float64)
    y = np.asarray(iso.y_thresholds_, dtype=np.float64)
    starts = np.flatnonzero(np.r_[True, y[1:] != y[:-1]])
    ends = np.r_[starts[1:], len(y)] - 1
    cx = np.r_[x[0], (x[starts] + x[ends]) / 2, x[-1]]
    cy = np.r_[y[0], y[starts], y[-1]]
    return np.vstack([cx, cy])


def group_holdout(groups: np.ndarray, y: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of the rows whose group is held out: ``fraction`` of the groups with a
    failing row (``y`` above its lowest value) and ``fraction`` of the others, drawn apart so
    both kinds of life are on both sides; at least one of each where there are two or more."""
    if not 0 < fraction < 1:
        raise ValueError(f"the held-out fraction must be in (0, 1), got {fraction!r}")
    groups = np.asarray(groups)
    y = np.asarray(y)
    if groups.shape != y.shape:
        raise ValueError(f"groups has {groups.size} values for {y.size} rows")
    names, inverse = np.unique(groups, return_inverse=True)
    failing = np.zeros(names.size, dtype=bool)
    failing[inverse[y != y.min()]] = True
    rng = np.random.default_rng(seed)
    held = np.zeros(names.size, dtype=bool)
    for kind in (failing, ~failing):
        idx = np.flatnonzero(kind)
        if idx.size < 2:
            continue
        n = min(idx.size - 1, max(1, int(round(idx.size * fraction))))
        held[rng.choice(idx, size=n, replace=False)] = True
    return held[inverse]


#: seeds of draw k are ``random_state + DRAW_STRIDE * k``: draw 0 is the single model's, and
#: the draws of two random states do not share a seed
DRAW_STRIDE = 1000


class MeanOfDraws(ClassifierMixin, BaseEstimator):
    """Tree models fit with different random draws; the score is the mean of their log-odds.

    ``fit`` fits a clone of each of ``members`` on the same rows; ``of`` wraps members
    already fit (``TimeSplitCalibratedClassifier`` fits each on its own draw of the rows)."""

    def __init__(self, members: tuple = ()):
        self.members = members

    def fit(self, X, y, sample_weight=None):
        if not self.members:
            raise ValueError("MeanOfDraws needs at least one member")
        kw = {} if sample_weight is None else {"sample_weight": sample_weight}
        return self._keep([clone(m).fit(X, y, **kw) for m in self.members])

    @classmethod
    def of(cls, members: list) -> MeanOfDraws:
        if not members:
            raise ValueError("MeanOfDraws needs at least one fitted member")
        return cls(tuple(members))._keep(list(members))

    def _keep(self, fitted: list) -> MeanOfDraws:
        self.members_ = fitted
        self.classes_ = fitted[0].classes_
        self.n_iter_ = int(sum(getattr(m, "n_iter_", 0) for m in fitted))
        return self

    def decision_function(self, X) -> np.ndarray:
        check_is_fitted(self, "members_")
        return np.mean([_raw_score(m, X) for m in self.members_], axis=0)

    def predict_proba(self, X) -> np.ndarray:
        p = expit(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    def predict(self, X) -> np.ndarray:
        return self.classes_[(self.decision_function(X) > 0).astype(int)]


class AnyFailure(ClassifierMixin, BaseEstimator):
    """Trees that learn which failure mode a row precedes, scored as the odds of any failure.

    ``fit(X, modes)``: ``modes`` is 0 for a healthy row and 1, 2, ... for the mode of the
    failure it precedes. ``estimator`` (default ``default_trees()``, its ``class_weight``
    replaced) grows one tree per class each round, so each mode's trees follow its own signals
    instead of one set of trees serving every mode at once. The score is the log-odds of "any
    failure", ``log(sum over modes of exp f_mode) - f_healthy``, and ``classes_`` are 0 and 1,
    so it calibrates like a binary model. The classes weigh as ``class_weight="balanced"`` does
    on the binary label: the healthy rows together as much as all failing ones, the modes
    within the failing rows as ``sample_weight`` says. With one mode it is that binary model.
    """

    def __init__(self, estimator=None):
        self.estimator = estimator

    def fit(self, X, y, sample_weight=None):
        modes = np.asarray(y)
        if modes.ndim != 1 or not np.issubdtype(modes.dtype, np.integer) or (modes < 0).any():
            raise ValueError("AnyFailure learns modes: 0 for healthy rows, 1, 2, ... for failing")
        healthy = modes == 0
        n0, n1 = int(healthy.sum()), int((~healthy).sum())
        if n0 == 0 or n1 == 0:
            raise ValueError("AnyFailure needs healthy and failing rows")
        w = np.where(healthy, modes.size / (2.0 * n0), modes.size / (2.0 * n1))
        if sample_weight is not None:
            w = w * np.asarray(sample_weight, dtype=np.float64)
        trees = clone(self.estimator if self.estimator is not None else default_trees())
        self.trees_ = trees.set_params(class_weight=None).fit(X, modes, sample_weight=w)
        self.classes_ = np.array([0, 1])
        self.n_iter_ = int(self.trees_.n_iter_)
        return self

    def decision_function(self, X) -> np.ndarray:
        check_is_fitted(self, "trees_")
        d = np.asarray(self.trees_.decision_function(X), dtype=np.float64)
        if d.ndim == 1:  # one mode: the binary model's own log-odds
            return d
        healthy = self.trees_.classes_ == 0
        return logsumexp(d[:, ~healthy], axis=1) - d[:, healthy][:, 0]

    def predict_proba(self, X) -> np.ndarray:
        p = expit(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    def predict(self, X) -> np.ndarray:
        return self.classes_[(self.decision_function(X) > 0).astype(int)]


def _raw_score(trees, X: np.ndarray) -> np.ndarray:
    """The score ``CalibratedClassifierCV`` calibrates: the decision function if any."""
    if hasattr(trees, "decision_function"):
        return np.asarray(trees.decision_function(X), dtype=np.float64).reshape(-1)
    return np.asarray(trees.predict_proba(X), dtype=np.float64)[:, 1]


class TimeSplitCalibratedClassifier(ClassifierMixin, BaseEstimator):
    """Trees fit on an early time block, probabilities calibrated on the later block.

    Parameters: ``estimator`` (default ``default_trees()``), ``method`` ("isotonic" or
    "sigmoid"), ``calibration_share`` (fraction of distinct scoring times, latest first, kept
    for calibration), ``negative_subsample`` (share of the healthy rows of the training
    block the trees see), ``exclude`` (feature names the trees never read; needs a DataFrame),
    ``random_state``, ``n_draws`` (tree models averaged, see ``MeanOfDraws``),
    ``early_stop_groups`` (early stopping holds out whole ``groups``, see ``group_holdout``;
    the trees' ``validation_fraction`` of them, redrawn per draw). Learned:
    ``estimator_``, ``calibrator_``, ``classes_``, ``split_time_``,
    ``reference_`` (per-feature median of the negative rows, used to explain a score),
    ``used_features_`` (columns with at least one value in the training block),
    ``n_features_in_`` and ``feature_names_in_`` when fit on a DataFrame.
    """

    def __init__(
        self,
        estimator=None,
        *,
        method: str = "isotonic",
        calibration_share: float = 0.3,
        negative_subsample: float = 1.0,
        exclude: tuple[str, ...] = (),
        random_state: int = 0,
        centred: bool = True,
        n_draws: int = 1,
        early_stop_groups: bool = False,
        increasing: tuple[str, ...] = (),
    ):
        self.estimator = estimator
        self.method = method
        self.calibration_share = calibration_share
        self.negative_subsample = negative_subsample
        self.exclude = exclude
        self.random_state = random_state
        self.centred = centred
        self.n_draws = n_draws
        self.early_stop_groups = early_stop_groups
        self.increasing = increasing

    def fit(
        self,
        X,
        y,
        *,
        sample_time=None,
        sample_weight=None,
        draw_X=None,
        tree_y=None,
        groups=None,
        learn_rows=None,
    ):
        """Fit on rows ordered in time by ``sample_time`` (Unix s; default: row order).

        ``sample_weight`` weighs the rows the trees learn from (e.g. rare failure modes up);
        the calibration block is always unweighted, so the probabilities stay true rates.
        ``draw_X``, a function of the draw ``k`` (1 to ``n_draws - 1``), gives the values that
        draw's trees read instead of ``X``'s: the same rows in the same order, the same
        columns. It is called once per draw, so the rows of only one draw need be held.
        ``groups`` (one label per row, e.g. the GPU life) is what ``early_stop_groups`` holds
        out whole. ``learn_rows`` (a boolean per row, default all) are the rows the trees may
        learn from; the calibration block keeps every row whatever it says.
        """
        if self.method not in ("isotonic", "sigmoid"):
            raise ValueError(f"method must be 'isotonic' or 'sigmoid', got {self.method!r}")
        if not 0 < self.calibration_share < 1:
            raise ValueError(f"calibration_share must be in (0, 1), got {self.calibration_share!r}")
        y = np.asarray(y)
        n = len(y)
        times = (
            np.arange(n, dtype=np.float64)
            if sample_time is None
            else np.asarray(sample_time, dtype=np.float64)
        )
        if times.shape != (n,):
            raise ValueError(f"sample_time has {times.size} values for {n} rows")
        learn = y if tree_y is None else np.asarray(tree_y)
        if tree_y is not None and (
            learn.shape != (n,) or not np.array_equal(learn == 0, y == np.unique(y)[0])
        ):
            raise ValueError("tree_y must have one value per row, 0 exactly where y is healthy")
        distinct = np.unique(times)
        if distinct.size < 2:
            raise ValueError("need at least two distinct scoring times to split by time")
        cut = min(
            distinct.size - 1, max(1, int(round(distinct.size * (1 - self.calibration_share))))
        )
        split = distinct[cut]
        early, late = times < split, times >= split
        if int(self.n_draws) < 1:
            raise ValueError(f"n_draws must be at least 1, got {self.n_draws!r}")
        blocks = [self._draw_rows(y, early, k) for k in range(int(self.n_draws))]
        if learn_rows is not None:
            learn_rows = np.asarray(learn_rows, dtype=bool)
            if learn_rows.shape != (n,):
                raise ValueError(f"learn_rows has {learn_rows.size} values for {n} rows")
            blocks = [rows & learn_rows for rows in blocks]
        for name, mask in (("training", blocks[0]), ("calibration", late)):
            if np.unique(y[mask]).size < 2:
                raise ValueError(
                    f"the {name} block (scoring times {'before' if name == 'training' else 'from'} "
                    f"{split:.0f}) holds only one class; more history or more failures are needed"
                )
        if hasattr(X, "columns"):
            self.feature_names_in_ = np.asarray(X.columns, dtype=object)
        Xa = np.asarray(X, dtype=np.float64)
        self.n_features_in_ = Xa.shape[1]
        weights = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        # A feature never read in the training block (retired pages on a fleet of Ampere and
        # later boards) carries nothing to learn, and scikit-learn 1.9's histogram binning
        # fails on an all-NaN column: leave such columns out of the trees.
        self.used_features_ = ~np.isnan(Xa[early]).all(axis=0)
        if self.exclude:
            if not hasattr(X, "columns"):
                raise ValueError("exclude names features: fit on a DataFrame")
            unknown = set(self.exclude) - set(X.columns)
            if unknown:
                raise ValueError(f"exclude names unknown features: {sorted(unknown)[:5]}")
            self.used_features_ &= ~np.isin(np.asarray(X.columns, dtype=object), self.exclude)
        base = clone(self.estimator if self.estimator is not None else default_trees())
        if self.increasing:
            base = self._constrained(base, X)
        if self.early_stop_groups:
            groups = self._check_groups(base, groups, n)
        members = []
        for k, rows in enumerate(blocks):
            trees = clone(base)
            seed = trees.get_params().get("random_state")
            if k and isinstance(seed, int | np.integer):
                trees.set_params(random_state=int(seed) + DRAW_STRIDE * k)
            Xk = Xa if k == 0 or draw_X is None else self._draw_values(draw_X, k, Xa.shape)
            if self.early_stop_groups:
                split_seed = self.random_state + DRAW_STRIDE * k
                val = np.zeros(n, dtype=bool)
                val[rows] = group_holdout(
                    groups[rows], learn[rows], trees.validation_fraction, split_seed
                )
                members.append(self._fit_held_out(trees, Xk, learn, weights, rows & ~val, val))
            else:
                fit_kw = {} if weights is None else {"sample_weight": weights[rows]}
                members.append(trees.fit(Xk[rows][:, self.used_features_], learn[rows], **fit_kw))
            del Xk
        self.estimator_ = members[0] if len(members) == 1 else MeanOfDraws.of(members)
        cal = CalibratedClassifierCV(FrozenEstimator(self.estimator_), method=self.method)
        # unweighted: the calibration block says how often a score comes true, row for row
        self.set_calibrator(cal.fit(Xa[late][:, self.used_features_], y[late]))
        self.split_time_ = float(split)
        negatives = Xa[y == self.classes_[0]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: median is NaN
            self.reference_ = (
                np.nanmedian(negatives, axis=0) if len(negatives) else np.full(Xa.shape[1], np.nan)
            )
        return self

    def _constrained(self, base, X):
        """``base`` with its score held non-decreasing in each ``increasing`` feature the
        trees read (scikit-learn's ``monotonic_cst``, one class only)."""
        if not hasattr(X, "columns"):
            raise ValueError("increasing names features: fit on a DataFrame")
        unknown = set(self.increasing) - set(X.columns)
        if unknown:
            raise ValueError(f"increasing names unknown features: {sorted(unknown)[:5]}")
        if "monotonic_cst" not in base.get_params():
            raise ValueError(f"{type(base).__name__} takes no monotonic constraints")
        used = np.asarray(X.columns, dtype=object)[self.used_features_]
        return base.set_params(monotonic_cst=np.isin(used, self.increasing).astype(np.int8))

    @staticmethod
    def _check_groups(trees, groups, n: int) -> np.ndarray:
        if groups is None:
            raise ValueError("early_stop_groups needs groups: the group of every row")
        groups = np.asarray(groups)
        if groups.shape != (n,):
            raise ValueError(f"groups has {groups.size} values for {n} rows")
        params = trees.get_params()
        if params.get("early_stopping") is not True or "validation_fraction" not in params:
            raise ValueError(
                "early_stop_groups needs trees with early_stopping=True and a "
                f"validation_fraction, got {type(trees).__name__}"
            )
        return groups

    def _fit_held_out(self, trees, Xk, learn, weights, train, val):
        """``trees`` fit on the ``train`` rows, early-stopped on the ``val`` rows, whose
        weights are the rows' own times the trees' class weights (what scikit-learn's own
        split would have weighed them by)."""
        cols = self.used_features_
        w_val = compute_sample_weight(trees.get_params().get("class_weight"), learn[val])
        kw: dict = {"sample_weight_val": w_val}
        if weights is not None:
            kw["sample_weight"] = weights[train]
            kw["sample_weight_val"] = w_val * weights[val]
        return trees.fit(
            Xk[train][:, cols], learn[train], X_val=Xk[val][:, cols], y_val=learn[val], **kw
        )

    @staticmethod
    def _draw_values(draw_X, k: int, shape: tuple[int, ...]) -> np.ndarray:
        Xk = np.asarray(draw_X(k), dtype=np.float64)
        if Xk.shape != shape:
            raise ValueError(f"draw {k}'s rows have shape {Xk.shape}, X has {shape}")
        return Xk

    def _draw_rows(self, y: np.ndarray, early: np.ndarray, k: int) -> np.ndarray:
        """The training block's rows draw ``k`` grows its trees on: every failing row and
        ``negative_subsample`` of the healthy ones (the calibration block keeps every row, so
        the probabilities keep the true base rate)."""
        if self.negative_subsample >= 1.0:
            return early
        rng = np.random.default_rng(self.random_state + DRAW_STRIDE * k)
        drop = (y == np.unique(y)[0]) & (rng.random(y.size) >= self.negative_subsample)
        return early & ~drop

    def set_calibrator(self, calibrator) -> None:
        """Use ``calibrator`` (a fitted ``CalibratedClassifierCV`` on ``estimator_``), centred
        if ``centred`` and isotonic."""
        self.calibrator_ = calibrator
        self.centres_ = centred_isotonic(calibrator) if self.centred else None
        self.classes_ = calibrator.classes_

    def _check(self, X) -> np.ndarray:
        check_is_fitted(self, "calibrator_")
        if hasattr(self, "feature_names_in_") and hasattr(X, "columns"):
            if list(X.columns) != list(self.feature_names_in_):
                missing = set(self.feature_names_in_) - set(X.columns)
                raise ValueError(
                    f"features differ from those the model was fit on: "
                    f"missing {sorted(missing)[:5]}"
                )
        Xa = np.asarray(X, dtype=np.float64)
        if Xa.ndim != 2 or Xa.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {Xa.shape[-1]} features, the model expects {self.n_features_in_}"
            )
        return Xa[:, self.used_features_]

    def predict_proba(self, X) -> np.ndarray:
        """Calibrated probabilities, columns in ``classes_`` order."""
        Xa = self._check(X)
        centres = getattr(self, "centres_", None)  # models saved before it: the steps
        if centres is None:
            return self.calibrator_.predict_proba(Xa)
        p = np.interp(_raw_score(self.estimator_, Xa), centres[0], centres[1])
        return np.column_stack([1.0 - p, p])

    def predict(self, X) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    def uncalibrated_proba(self, X) -> np.ndarray:
        """The trees' own (class-weighted, so inflated) probabilities, for the reliability plot."""
        return self.estimator_.predict_proba(self._check(X))
