"""The rule baseline and hard signals; the estimator's scikit-learn conventions and its split
by time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.ensemble import HistGradientBoostingClassifier

from gpuwarden.models.estimator import DRAW_STRIDE, MeanOfDraws, TimeSplitCalibratedClassifier
from gpuwarden.models.features import FEATURE_NAMES
from gpuwarden.models.rules import (
    AT_RISK,
    OK,
    UNHEALTHY,
    baseline_flag,
    hard_signal,
    rule_table,
    states,
)


def _rows(**values: float) -> pd.DataFrame:
    row = {n: 0.0 for n in FEATURE_NAMES}
    row.update(values)
    return pd.DataFrame([row])


@pytest.mark.parametrize(
    ("feature", "above", "below", "rule"),
    [
        ("sbe_per_day_24h", 11, 10, "sbe_over_10_per_day"),
        ("spread_c_1h", 15.5, 15, "mem_spread_over_15c"),
        ("pcie_replay_vs_limit_1h", 1.01, 1.0, "pcie_replays_over_limit"),
        ("retired_pages_total", 63, 62, "dcgm_retired_pages"),
        ("nvlink_crc_per_min_1h", 6000, 5999, "dcgm_nvlink_crc"),
    ],
)
def test_each_rule_trips_above_its_threshold(feature, above, below, rule):
    table = rule_table(_rows(**{feature: above}))
    assert table[rule].item() and table.to_numpy().sum() == 1
    assert not rule_table(_rows(**{feature: below})).to_numpy().any()


def test_nan_never_trips_a_rule():
    X = _rows(**{n: np.nan for n in FEATURE_NAMES})
    assert not baseline_flag(X).any() and not hard_signal(X).any()


@pytest.mark.parametrize(
    "signal", ["dbe_24h", "remap_failure_24h", "gpu_lost_24h", "xid_fatal_24h"]
)
def test_hard_signal_is_unhealthy_whatever_the_risk(signal):
    X = _rows(**{signal: 1})
    assert hard_signal(X).all() and baseline_flag(X).all()
    assert states(np.array([0.01]), hard_signal(X)).tolist() == [UNHEALTHY]


def test_states_follow_the_threshold():
    got = states(np.array([0.1, 0.69, 0.7, 0.95]), np.zeros(4, bool), 0.7)
    assert got.tolist() == [OK, OK, AT_RISK, AT_RISK]


def _data(n=4000, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(n, 4)), columns=["a", "b", "c", "d"])
    X["d"] = np.nan  # never read: must not break the trees
    y = (X["a"] + 0.5 * rng.normal(size=n) > 1.2).astype(int).to_numpy()
    t = np.repeat(np.arange(n // 40), 40).astype(float)
    return X, y, t


def _small():
    return TimeSplitCalibratedClassifier(HistGradientBoostingClassifier(max_iter=20))


def test_estimator_follows_sklearn_conventions():
    X, y, t = _data()
    est = _small()
    assert clone(est).get_params()["method"] == "isotonic"
    assert est.fit(X, y, sample_time=t) is est
    assert list(est.classes_) == [0, 1]
    proba = est.predict_proba(X)
    assert proba.shape == (len(X), 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert (est.predict(X) == est.classes_[proba.argmax(axis=1)]).all()
    assert list(est.feature_names_in_) == ["a", "b", "c", "d"]
    assert est.n_features_in_ == 4 and not est.used_features_[3]
    # high scores mean the positive class (columns follow classes_)
    assert y[proba[:, 1] > 0.8].mean() > 0.8


def test_calibration_uses_only_the_later_block():
    X, y, t = _data()
    est = _small().fit(X, y, sample_time=t)
    distinct = np.unique(t)
    assert est.split_time_ == distinct[int(round(distinct.size * 0.7))]
    # the trees never saw a row from the calibration block: refitting on the early block alone
    # gives the same trees
    early = t < est.split_time_
    trees = clone(HistGradientBoostingClassifier(max_iter=20)).fit(
        X[early].to_numpy()[:, :3], y[early]
    )
    np.testing.assert_allclose(trees.predict_proba(X.to_numpy()[:, :3]), est.uncalibrated_proba(X))


def test_a_block_without_failures_is_a_clear_error():
    X, y, t = _data()
    y = np.where(t >= np.quantile(t, 0.7), 0, y)
    with pytest.raises(ValueError, match="calibration block .* only one class"):
        _small().fit(X, y, sample_time=t)


def test_wrong_feature_columns_are_refused():
    X, y, t = _data()
    est = _small().fit(X, y, sample_time=t)
    with pytest.raises(ValueError, match="features differ"):
        est.predict_proba(X.rename(columns={"a": "z"}))


def test_bad_parameters_are_refused():
    X, y, t = _data()
    with pytest.raises(ValueError, match="method"):
        TimeSplitCalibratedClassifier(method="magic").fit(X, y, sample_time=t)
    with pytest.raises(ValueError, match="calibration_share"):
        TimeSplitCalibratedClassifier(calibration_share=1.5).fit(X, y, sample_time=t)


def test_excluded_features_are_never_read_by_the_trees():
    X, y, t = _data()
    est = TimeSplitCalibratedClassifier(
        HistGradientBoostingClassifier(max_iter=20), exclude=("a",)
    ).fit(X, y, sample_time=t)
    assert list(est.used_features_) == [False, True, True, False]
    # the column is still expected (the reasons read it) but changing it changes nothing
    np.testing.assert_allclose(est.predict_proba(X), est.predict_proba(X.assign(a=X["a"] * 1e6)))
    with pytest.raises(ValueError, match="unknown features"):
        TimeSplitCalibratedClassifier(exclude=("nope",)).fit(X, y, sample_time=t)
    with pytest.raises(ValueError, match="DataFrame"):
        TimeSplitCalibratedClassifier(exclude=("a",)).fit(X.to_numpy(), y, sample_time=t)


def test_centred_calibration_keeps_the_trees_order_and_the_steps_values():
    X, y, t = _data()
    centred = _small().fit(X, y, sample_time=t)
    steps = clone(centred).set_params(centred=False).fit(X, y, sample_time=t)
    assert steps.centres_ is None
    raw = centred.estimator_.decision_function(X.to_numpy()[:, :3])
    p, q = centred.predict_proba(X)[:, 1], steps.predict_proba(X)[:, 1]
    lo, hi = centred.centres_[0, 1], centred.centres_[0, -2]  # first and last block centres
    inside = (raw > lo) & (raw < hi)
    # the steps tie many scores; centred, distinct scores between the end blocks stay distinct
    assert np.unique(q[inside]).size < np.unique(raw[inside]).size // 4
    assert np.unique(p[inside]).size == np.unique(raw[inside]).size
    order = np.argsort(raw)
    assert (np.diff(p[order]) >= 0).all()
    # at each block's centre the risk is the block's own calibrated rate
    cx = centred.centres_[0, 1:-1]
    at = steps.calibrator_.calibrated_classifiers_[0].calibrators[0].predict(cx)
    np.testing.assert_allclose(np.interp(cx, *centred.centres_), at)
    # and it stays a calibrated probability: the mean risk is the later block's rate, +-
    late = t >= centred.split_time_
    assert abs(p[late].mean() - y[late].mean()) < 0.03


def test_a_model_saved_before_centring_keeps_its_steps():
    X, y, t = _data()
    est = _small().fit(X, y, sample_time=t)
    del est.centres_  # what a model file from before centring holds
    np.testing.assert_allclose(
        est.predict_proba(X), est.calibrator_.predict_proba(X.to_numpy()[:, :3])
    )


def test_sigmoid_calibration_is_never_centred():
    X, y, t = _data()
    est = TimeSplitCalibratedClassifier(
        HistGradientBoostingClassifier(max_iter=20), method="sigmoid"
    ).fit(X, y, sample_time=t)
    assert est.centres_ is None


def test_draws_average_the_log_odds_of_trees_grown_on_their_own_negatives():
    X, y, t = _data()
    one = TimeSplitCalibratedClassifier(
        HistGradientBoostingClassifier(max_iter=20, random_state=0), negative_subsample=0.5
    ).fit(X, y, sample_time=t)
    three = clone(one).set_params(n_draws=3).fit(X, y, sample_time=t)
    mean = three.estimator_
    assert isinstance(mean, MeanOfDraws) and len(mean.members_) == 3
    Xu = X.to_numpy()[:, :3]
    # draw 0 is the single model's trees; the others kept other healthy rows
    np.testing.assert_array_equal(
        mean.members_[0].decision_function(Xu), one.estimator_.decision_function(Xu)
    )
    raw = [m.decision_function(Xu) for m in mean.members_]
    assert not np.allclose(raw[0], raw[1]) and not np.allclose(raw[1], raw[2])
    assert not np.allclose(raw[0], raw[1])
    np.testing.assert_allclose(mean.decision_function(Xu), np.mean(raw, axis=0))
    assert [m.random_state for m in mean.members_] == [0, DRAW_STRIDE, 2 * DRAW_STRIDE]
    # calibrated once, on the mean score, and still a ranking of the positives first
    proba = three.predict_proba(X)[:, 1]
    assert y[proba > 0.8].mean() > 0.8
    np.testing.assert_array_equal(three.predict(X), three.classes_[(proba > 0.5).astype(int)])


def _drawn(n_draws: int) -> TimeSplitCalibratedClassifier:
    return TimeSplitCalibratedClassifier(
        HistGradientBoostingClassifier(max_iter=20, random_state=0),
        negative_subsample=0.5,
        n_draws=n_draws,
    )


def test_draws_are_a_function_of_the_random_state():
    X, y, t = _data()
    est = _drawn(2)
    a, b = clone(est).fit(X, y, sample_time=t), clone(est).fit(X, y, sample_time=t)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    with pytest.raises(ValueError, match="n_draws"):
        clone(est).set_params(n_draws=0).fit(X, y, sample_time=t)
    with pytest.raises(ValueError, match="at least one member"):
        MeanOfDraws().fit(X, y)
    # fit on its own: a clone of each member on the same rows, the mean of their log-odds
    members = tuple(HistGradientBoostingClassifier(max_iter=n) for n in (10, 30))
    Xu = X[["a", "b", "c"]].to_numpy()
    mean = MeanOfDraws(members).fit(Xu, y)
    assert all(not hasattr(m, "n_iter_") for m in members)  # the templates stay unfitted
    raw = [clone(m).fit(Xu, y).decision_function(Xu) for m in members]
    assert not np.allclose(raw[0], raw[1])
    np.testing.assert_allclose(mean.decision_function(Xu), np.mean(raw, axis=0))
    assert mean.n_iter_ == sum(m.n_iter_ for m in mean.members_)


def test_each_draw_can_read_values_of_its_own():
    X, y, t = _data()
    est = _drawn(3)
    plain = clone(est).fit(X, y, sample_time=t)
    asked = []

    def same(k):
        asked.append(k)
        return X

    # the same values for every draw: the same model, each later draw asked once
    np.testing.assert_array_equal(
        clone(est).fit(X, y, sample_time=t, draw_X=same).predict_proba(X), plain.predict_proba(X)
    )
    assert asked == [1, 2]
    # draw 2 reads "a" as unknown on half the rows: its trees differ, draws 0 and 1 do not
    hidden = X.assign(a=X["a"].where(np.arange(len(X)) % 2 == 0))
    other = clone(est).fit(X, y, sample_time=t, draw_X=lambda k: hidden if k == 2 else X)
    Xu = X.to_numpy()[:, :3]
    for k in (0, 1):
        np.testing.assert_array_equal(
            other.estimator_.members_[k].decision_function(Xu),
            plain.estimator_.members_[k].decision_function(Xu),
        )
    assert not np.allclose(
        other.estimator_.members_[2].decision_function(Xu),
        plain.estimator_.members_[2].decision_function(Xu),
    )
    np.testing.assert_array_equal(other.reference_, plain.reference_)
    with pytest.raises(ValueError, match="draw 1's rows have shape"):
        clone(est).fit(X, y, sample_time=t, draw_X=lambda k: X.iloc[:-1])
