"""Train a risk model on a fleet's history: from a store (``gpuwarden train``) or a panel.

    model = train_from_store(store, until=..., failures=None)   # the store's failure records
    save_model(model, "my-model")

Scoring times every ``step_h`` hours over the history; the trees learn on the earlier 70% of
them and the probabilities are calibrated on the later 30% (``TimeSplitCalibratedClassifier``).
``robust_share`` of the nodes have their memory temperature hidden while training, so the model
has learnt what to do for boards that do not report it (NaN routes through the trees).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden import __version__
from gpuwarden.errors import InputError
from gpuwarden.health import DEFAULT_AT_RISK
from gpuwarden.models.artifact import RiskModel
from gpuwarden.models.estimator import (
    DRAW_STRIDE,
    AnyFailure,
    TimeSplitCalibratedClassifier,
    default_trees,
)
from gpuwarden.models.features import FEATURE_NAMES, MONOTONE_FEATURES
from gpuwarden.models.history import load_panel, newest_sample_ts
from gpuwarden.models.labels import DEFAULT_HORIZON_S, Dataset, build_dataset, scoring_indices
from gpuwarden.models.panel import HOUR_S, HourlyPanel
from gpuwarden.models.score import (
    CARD_DRIFT_KEY,
    CARD_LEVEL_KEY,
    training_error_level,
    training_spread_drift,
)
from gpuwarden.store.base import Store
from gpuwarden.wording import counted

MIN_FAILURES = 4  # fewer failing GPUs than this cannot teach or calibrate anything


@dataclass(frozen=True)
class TrainOptions:
    horizon_s: float = DEFAULT_HORIZON_S  # "fails within" this after the scoring time
    step_h: int = 2  # hours between training scoring times
    method: str = "isotonic"  # probability calibration: isotonic or sigmoid
    calibration_share: float = 0.3  # latest share of scoring times kept for calibration
    negative_subsample: float = 0.3  # healthy rows the trees see (all failing ones are kept)
    robust_share: float = 0.15  # nodes whose memory temperature is hidden while training
    #: failing rows of a rarer kind with precursors weigh (commonest kind's failures / this
    #: kind's) ** this in the trees: a fleet's few NVLink failures are not outvoted by its
    #: HBM ones. 0 turns it off; the calibration block stays unweighted either way.
    rare_kind_power: float = 0.5
    #: features the trees never read (e.g. ``features.ABSOLUTE_FEATURES``); they stay in X
    exclude_features: tuple[str, ...] = ()
    random_state: int = 0
    #: tree models grown on the training rows, each with its own draw of the healthy rows kept
    #: and of early stopping's split; the score is the mean of their log-odds
    draws: int = 1
    #: with ``draws`` above 1, each draw also hides the memory temperature of its own
    #: ``robust_share`` of the nodes (the rows are built once per draw); draw 0 hides the
    #: single model's, and the calibration reads draw 0's rows
    hide_per_draw: bool = False
    #: (fleet, weight) pairs: every row of that fleet (``simdata.concat_panels``' names, the
    #: start of each key) weighs this much more in the trees, e.g. the default simulator's
    #: fleet kept at its share of the training as the family grows; empty: every fleet 1
    fleet_weights: tuple[tuple[str, float], ...] = ()
    #: the trees learn which failure mode a row precedes (``mode_labels``: one class per kind
    #: with precursors, the sudden kinds together) and are scored as any failure
    #: (``AnyFailure``); False: one class for every failure
    mode_classes: bool = False
    #: early stopping holds out whole GPU lives (``estimator.group_holdout``) instead of
    #: scikit-learn's draw of single rows, which puts hours of one GPU's life on both sides
    early_stop_lives: bool = False
    #: the share of the features each split of the trees chooses from, drawn anew at each
    #: split (1.0: all of them, shipped), so no split leans on one feature alone
    max_features: float = 1.0
    #: the trees learn only from the failing rows a detector could have seen coming: rows of a
    #: failure with a precursor, scored at or after the precursor began (the simulator's ground
    #: truth, ``precursor_start_ts``). A sudden failure's rows, and those of the days before
    #: its precursor began, are left out of the trees (not relabelled healthy); the
    #: calibration block keeps every row, so the risk stays the chance of failing. A failure
    #: without that ground truth (a user's own fleet) keeps all its rows.
    learnable_only: bool = False
    #: the trees leave out the healthy-labelled rows of a precursor under way too: a failing
    #: GPU's rows scored after its precursor began but more than the horizon before the
    #: failure (a slow decline). Their label says healthy while the telemetry already shows the
    #: decline, and the 30-day false-flag figure does not count a flag on them. Ground truth
    #: as ``learnable_only``; the calibration block keeps every row.
    learnable_healthy: bool = False
    #: the trees' score never falls as a feature of ``features.MONOTONE_FEATURES`` rises (hard
    #: events, lanes lost, comparisons with the GPU's own past and its peers), so a fleet whose
    #: values lie past or between the training fleets' meets no learnt dip; the calibration is
    #: monotone too, so the risk is as well
    monotone: bool = False


def hide_memory_temperature(panel: HourlyPanel, share: float, seed: int) -> HourlyPanel:
    """A copy of ``panel`` where the GPUs of ``share`` of the nodes never reported memory
    temperature: a field is unsupported per GPU model, and nodes are of one model, so whole
    nodes lack it (their node peers too)."""
    if share <= 0:
        return panel
    rng = np.random.default_rng(seed)
    hosts = panel.keys["hostname"].to_numpy()
    names = np.unique(hosts)
    hide = np.isin(hosts, names[rng.random(names.size) < share])
    gauge = dict(panel.gauge)
    for name in ("mem_temp_c", "mem_temp_c_max", "spread_c"):
        gauge[name] = np.where(hide[None, :], np.float32(np.nan), panel.gauge[name])
    return replace(panel, gauge=gauge)


def kind_weights(ds: Dataset, power: float) -> np.ndarray:
    """Row weights for the trees: 1, and (n_max / n_kind) ** power for the failing rows of each
    kind with precursors (kinds known to come without one, such as a GSP hang, stay at 1:
    weighing up what nothing can foresee only teaches noise)."""
    from gpuwarden.sim import SUDDEN_KINDS

    w = np.ones(len(ds))
    if power <= 0:
        return w
    pos = ds.y == 1
    kinds = ds.meta["fail_kind"].to_numpy()
    lives = ds.meta.loc[pos, ["key", "fail_kind"]].drop_duplicates("key")
    counts = lives.loc[~lives["fail_kind"].isin(SUDDEN_KINDS), "fail_kind"].value_counts()
    for kind, n in counts.items():
        w[pos & (kinds == kind)] = (counts.max() / n) ** power
    return w


def learnable_rows(
    panel: HourlyPanel, ds: Dataset, *, failing: bool = True, healthy: bool = False
) -> np.ndarray:
    """Per row of ``ds``, whether the trees may learn from it. ``failing``: not a failing row
    no detector could have seen coming (its failure is of a sudden kind, or the row was scored
    before the failure's precursor began). ``healthy``: not a healthy-labelled row of a
    precursor under way (scored after it began, the failure beyond the horizon). Rows without
    ground truth are always kept."""
    from gpuwarden.sim import SUDDEN_KINDS

    pre = (
        panel.keys.set_index("key")["precursor_start_ts"]
        .reindex(ds.meta["key"])
        .to_numpy(np.float64)
    )
    kind = ds.meta["fail_kind"].fillna("").to_numpy(dtype=object)
    at = ds.meta["at"].to_numpy(np.float64)
    sudden = np.isin(kind, list(SUDDEN_KINDS))
    early = np.isfinite(pre) & (at < pre)
    unseen = (ds.y == 1) & (sudden | early)
    under_way = (ds.y == 0) & np.isfinite(pre) & ~sudden & (at >= pre)
    return ~((unseen & failing) | (under_way & healthy))


def row_weights(ds: Dataset, options: TrainOptions) -> np.ndarray:
    """The trees' row weights: ``kind_weights``, times each named fleet's weight on its rows
    (``options.fleet_weights``). A weight that is not a positive number, or a fleet no row
    comes from, is refused by name."""
    w = kind_weights(ds, options.rare_kind_power)
    keys = ds.meta["key"].astype(str)
    for fleet, weight in options.fleet_weights:
        if not (np.isfinite(weight) and weight > 0):
            raise InputError(f"fleet {fleet!r}: weight {weight!r} is not a positive number")
        rows = keys.str.startswith(f"{fleet}/").to_numpy()
        if not rows.any():
            raise InputError(f"fleet {fleet!r}: no training row comes from it")
        w[rows] *= weight
    return w


def mode_labels(ds: Dataset) -> np.ndarray:
    """Per row, the class ``AnyFailure`` learns: 0 for a healthy row; for a failing one,
    1 + the index of its mode among the dataset's failing modes (sorted by name). Each kind with
    precursors is a mode of its own, every kind known to come without one (``SUDDEN_KINDS``)
    shares one, and so do failures of no recorded kind (a failures file without a kind
    column): a fleet whose failures carry no kind trains one failing class."""
    from gpuwarden.sim import SUDDEN_KINDS

    pos = ds.y == 1
    kinds = ds.meta["fail_kind"].astype(object).to_numpy()
    known = pd.notna(kinds) & (kinds != "")
    mode = np.where(
        np.isin(kinds, list(SUDDEN_KINDS)), "(sudden)", np.where(known, kinds, "(unknown)")
    ).astype(str)
    names = np.unique(mode[pos])
    out = np.zeros(len(ds), dtype=np.int64)
    out[pos] = 1 + np.searchsorted(names, mode[pos])
    return out


def training_summary(panel: HourlyPanel, ds: Dataset, split: float) -> dict[str, Any]:
    keys = panel.keys
    failed = ds.meta.loc[ds.y == 1, "key"].unique()
    kinds = keys[keys["key"].isin(failed)]["fail_kind"].value_counts()
    at = ds.meta["at"]
    return {
        "start": float(panel.hours[0]),
        "end": float(panel.hours[-1] + HOUR_S),
        "gpu_lives": int(panel.shape[1]),
        "gpu_days": float(panel.seen.sum() / 24.0),
        "scoring_times": int(at.nunique()),
        "rows": len(ds),
        "positive_rows": int(ds.y.sum()),
        "failures": int(len(failed)),
        "failures_by_kind": {str(k): int(v) for k, v in kinds.items()},
        "calibration_from": split,
        "calibration_rows": int((at >= split).sum()),
    }


def _block_metrics(est: TimeSplitCalibratedClassifier, ds: Dataset, threshold: float) -> dict:
    """How ``est`` ranks and flags the rows of ``ds`` from its split time on (the calibration
    block, which its trees never saw), at the at-risk line ``threshold``."""
    from sklearn.metrics import average_precision_score, brier_score_loss

    late = ds.meta["at"].to_numpy() >= est.split_time_
    y, X = ds.y[late], ds.X[late]
    risk = est.predict_proba(X)[:, 1]
    flagged = risk >= threshold
    return {
        "block": "calibration (later scoring times, unseen by the trees)",
        "pr_auc": float(average_precision_score(y, risk)),
        "brier": float(brier_score_loss(y, risk)),
        "rows_flagged": int(flagged.sum()),
        "precision_at_threshold": float(y[flagged].mean()) if flagged.any() else None,
        "mean_risk": float(risk.mean()),
        "positive_share": float(y.mean()),
    }


def training_rows(
    panel: HourlyPanel,
    *,
    labels_until: float | None = None,
    options: TrainOptions = TrainOptions(),
    progress: bool = False,
    draw: int = 0,
) -> Dataset:
    """The (GPU, scoring time) rows a model learns from: every ``options.step_h`` hours, with
    ``robust_share`` of the nodes' memory temperature hidden (the nodes drawn with seed
    ``random_state + DRAW_STRIDE * draw``), labels known by ``labels_until``."""
    o = options
    work = hide_memory_temperature(panel, o.robust_share, o.random_state + DRAW_STRIDE * draw)
    times = scoring_indices(work, step_h=o.step_h)
    return build_dataset(
        work, times, horizon_s=o.horizon_s, labels_until=labels_until, progress=progress
    )


def failing_lives(ds: Dataset) -> int:
    """GPU lives with at least one row labelled "fails within the horizon"."""
    return int(ds.meta.loc[ds.y == 1, "key"].nunique())


def model_card(
    est: TimeSplitCalibratedClassifier,
    panel: HourlyPanel,
    ds: Dataset,
    *,
    options: TrainOptions,
    estimator: str,
    source: dict[str, Any] | None,
    started: float,
    threshold: float = DEFAULT_AT_RISK,
) -> dict[str, Any]:
    """The card of a model fit on ``ds`` (rows of ``panel``); ``estimator`` says how, and
    ``threshold`` is the at-risk line it runs at (its calibration-block figures are at it)."""
    o = options
    return {
        "gpuwarden_version": __version__,
        "created": pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds"),
        "threshold": threshold,
        "horizon_s": o.horizon_s,
        "label": f"fails within {o.horizon_s / 86400:g} days after the scoring time",
        "features": list(FEATURE_NAMES),
        "estimator": estimator,
        "options": {k: getattr(o, k) for k in o.__dataclass_fields__},
        "training_data": {**(source or {}), **training_summary(panel, ds, est.split_time_)},
        # the drift its thermal reasons were trained on: ``score`` warns beyond it
        CARD_DRIFT_KEY: training_spread_drift(panel),
        # the benign error level its trees were grown on: ``score`` warns well beyond it
        CARD_LEVEL_KEY: training_error_level(panel),
        "metrics": {"calibration_block": _block_metrics(est, ds, threshold)},
        "tree_rounds": int(getattr(est.estimator_, "n_iter_", 0)),
        "train_seconds": round(time.time() - started, 1),
    }


def train_on_panel(
    panel: HourlyPanel,
    *,
    labels_until: float | None = None,
    options: TrainOptions = TrainOptions(),
    source: dict[str, Any] | None = None,
    progress: bool = False,
) -> RiskModel:
    """Fit and calibrate a model on every scoring time of ``panel``; returns it with its card."""
    started = time.time()
    ds = training_rows(panel, labels_until=labels_until, options=options, progress=progress)
    draw_X = None
    if options.hide_per_draw and options.draws > 1 and options.robust_share > 0:

        def draw_X(k: int) -> pd.DataFrame:
            other = training_rows(
                panel, labels_until=labels_until, options=options, progress=progress, draw=k
            )
            if not other.meta[["key", "at"]].equals(ds.meta[["key", "at"]]) or not np.array_equal(
                other.y, ds.y
            ):
                raise RuntimeError(f"draw {k}'s training rows are not draw 0's rows")
            return other.X

    return fit_on_rows(panel, ds, options=options, source=source, started=started, draw_X=draw_X)


def fit_on_rows(
    panel: HourlyPanel,
    ds: Dataset,
    *,
    options: TrainOptions = TrainOptions(),
    source: dict[str, Any] | None = None,
    started: float | None = None,
    draw_X: Callable[[int], Any] | None = None,
) -> RiskModel:
    """A model from nothing on ``ds`` (``training_rows`` of ``panel``), with its card;
    ``draw_X`` gives each later draw its own values of the rows (see the estimator's ``fit``)."""
    o = options
    started = time.time() if started is None else started
    n_failed = failing_lives(ds)
    if n_failed < MIN_FAILURES:
        raise InputError(
            f"only {counted(n_failed, 'GPU failure falls', 'GPU failures fall')} inside the training history "
            f"(need at least {MIN_FAILURES}); give a longer history or a failures file"
        )
    if not 0 < o.max_features <= 1:
        raise InputError(f"max_features must be in (0, 1], not {o.max_features!r}")
    trees = default_trees(o.random_state, o.max_features)
    est = TimeSplitCalibratedClassifier(
        AnyFailure(trees) if o.mode_classes else trees,
        method=o.method,
        calibration_share=o.calibration_share,
        negative_subsample=o.negative_subsample,
        exclude=tuple(o.exclude_features),
        random_state=o.random_state,
        n_draws=o.draws,
        early_stop_groups=o.early_stop_lives,
        increasing=MONOTONE_FEATURES if o.monotone else (),
    )
    if o.early_stop_lives and o.mode_classes:
        raise InputError("early stopping on held-out GPU lives does not yet work with mode classes")
    if o.monotone and o.mode_classes:
        raise InputError("monotone trees score one class: they do not work with mode classes")
    try:
        est.fit(
            ds.X,
            ds.y,
            sample_time=ds.meta["at"].to_numpy(),
            sample_weight=row_weights(ds, o),
            draw_X=draw_X,
            tree_y=mode_labels(ds) if o.mode_classes else None,
            groups=ds.meta["key"].to_numpy() if o.early_stop_lives else None,
            learn_rows=(
                learnable_rows(panel, ds, failing=o.learnable_only, healthy=o.learnable_healthy)
                if o.learnable_only or o.learnable_healthy
                else None
            ),
        )
    except ValueError as exc:
        raise InputError(f"cannot train: {exc}") from exc
    card = model_card(
        est,
        panel,
        ds,
        options=o,
        estimator="HistGradientBoostingClassifier (class_weight=balanced"
        + ("; one class per failure mode, scored as any failure" if o.mode_classes else "")
        + (f"; mean log-odds of {o.draws} draws" if o.draws > 1 else "")
        + ("; early stopping on held-out GPU lives" if o.early_stop_lives else "")
        + (f"; each split from {o.max_features:g} of the features" if o.max_features < 1 else "")
        + ("; trees learn failing rows only from their precursor on" if o.learnable_only else "")
        + (
            "; trees skip healthy-labelled rows of a precursor under way"
            if o.learnable_healthy
            else ""
        )
        + ("; score non-decreasing in the evidence features" if o.monotone else "")
        + ("; each draw hides its own nodes' HBM temperature" if draw_X is not None else "")
        + ") + "
        f"{'centred isotonic' if o.method == 'isotonic' else o.method} calibration "
        "on a later time block",
        source=source,
        started=started,
    )
    return RiskModel(est, card)


def store_history(
    store: Store,
    *,
    until: float | None = None,
    failures: pd.DataFrame | None = None,
    progress: bool = False,
) -> tuple[HourlyPanel, float]:
    """(panel of everything the store holds before ``until``, the end of its labels);
    ``until`` defaults to the newest sample, ``failures`` replaces the store's records."""
    newest = newest_sample_ts(store)
    if newest is None:
        raise InputError(f"{store.url} holds no telemetry to train on")
    end = float(until) if until is not None else newest + 1.0
    start = float(store.gpus()["first_ts"].min())
    if end <= start:
        raise InputError(f"--until {end:.0f} is before the store's first sample ({start:.0f})")
    return load_panel(store, start=start, end=end, failures=failures, progress=progress), end


def train_from_store(
    store: Store,
    *,
    until: float | None = None,
    failures: pd.DataFrame | None = None,
    options: TrainOptions = TrainOptions(),
    progress: bool = False,
) -> RiskModel:
    """Train on everything the store holds before ``until`` (default: its newest sample);
    ``failures`` (the ``read_failures`` layout) replaces the store's failure records."""
    panel, end = store_history(store, until=until, failures=failures, progress=progress)
    return train_on_panel(
        panel, labels_until=end, options=options, source={"store": store.url}, progress=progress
    )
