"""Trees that learn which failure mode a row precedes, scored as any failure (``AnyFailure``,
``TrainOptions(mode_classes=True)``): one mode is the binary model, several calibrate as one
score, and the model file stays trusted."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification

from gpuwarden.errors import InputError
from gpuwarden.models.artifact import TRUSTED_TYPES, load_model, save_model
from gpuwarden.models.estimator import AnyFailure, TimeSplitCalibratedClassifier, default_trees
from gpuwarden.models.labels import Dataset
from gpuwarden.models.train import TrainOptions, mode_labels, train_on_panel, training_rows
from gpuwarden.models.transfer import WarmOptions, fit_from_base, load_base_model


def _modes(n: int = 6000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    X, y = make_classification(
        n_samples=n,
        n_features=8,
        n_informative=5,
        n_classes=3,
        weights=[0.9, 0.06, 0.04],
        random_state=seed,
    )
    return X, y


def _small_trees() -> object:
    return default_trees(0).set_params(max_iter=40, early_stopping=False)


def test_one_failing_mode_is_the_binary_model_score_for_score():
    """The healthy rows weigh as ``class_weight="balanced"`` weighs them, so with one failing
    class the trees, and so every score, are the binary model's."""
    X, y = _modes()
    failing = (y > 0).astype(int)
    binary = _small_trees().fit(X, failing)
    modes = AnyFailure(_small_trees()).fit(X, failing)
    np.testing.assert_array_equal(modes.decision_function(X), binary.decision_function(X))
    w = np.linspace(0.5, 2.0, len(y))
    np.testing.assert_allclose(
        AnyFailure(_small_trees()).fit(X, failing, sample_weight=w).decision_function(X),
        _small_trees().fit(X, failing, sample_weight=w).decision_function(X),
    )


def test_several_modes_score_the_odds_of_any_failure():
    X, y = _modes()
    model = AnyFailure(_small_trees()).fit(X, y)
    proba = model.trees_.predict_proba(X)
    healthy = proba[:, list(model.trees_.classes_).index(0)]
    expected = np.log1p(-healthy) - np.log(healthy)
    np.testing.assert_allclose(model.decision_function(X), expected, rtol=1e-6, atol=1e-9)
    assert list(model.classes_) == [0, 1] and model.predict_proba(X).shape == (len(y), 2)
    assert model.n_iter_ == 40


@pytest.mark.parametrize(
    "modes, match",
    [
        (np.array([0.0, 1.0] * 50), "learns modes"),
        (np.array([0, -1] * 50), "learns modes"),
        (np.zeros(100, dtype=int), "healthy and failing"),
    ],
)
def test_modes_it_cannot_learn_are_refused(modes, match):
    with pytest.raises(ValueError, match=match):
        AnyFailure(_small_trees()).fit(np.zeros((len(modes), 2)), modes)


def test_the_calibration_reads_the_binary_label_and_refuses_modes_that_disagree():
    X, y = _modes()
    failing = (y > 0).astype(int)
    times = np.repeat(np.arange(len(y) // 20), 20).astype(float)
    est = TimeSplitCalibratedClassifier(AnyFailure(_small_trees())).fit(
        X, failing, sample_time=times, tree_y=y
    )
    assert list(est.classes_) == [0, 1]
    assert set(np.unique(est.estimator_.trees_.classes_)) == {0, 1, 2}
    risk = est.predict_proba(X)[:, 1]
    assert ((risk >= 0) & (risk <= 1)).all()
    late = times >= est.split_time_
    # calibrated on the later block's binary label: its mean risk is that block's failure rate
    assert risk[late].mean() == pytest.approx(failing[late].mean(), abs=0.01)
    wrong = y.copy()
    wrong[np.flatnonzero(y == 0)[0]] = 1  # a healthy row said to precede a failure
    with pytest.raises(ValueError, match="0 exactly where y is healthy"):
        TimeSplitCalibratedClassifier(AnyFailure(_small_trees())).fit(
            X, failing, sample_time=times, tree_y=wrong
        )


def test_each_mode_with_precursors_is_a_class_and_the_rest_share_theirs():
    kinds = [
        "hbm_degradation",
        "pcie_degradation",
        "gsp_error",
        "fell_off_bus",
        "",
        None,
        "hbm_degradation",
        "",
    ]
    y = np.array([1, 1, 1, 1, 1, 1, 1, 0], dtype=np.int8)
    meta = pd.DataFrame({"key": [f"g{i}" for i in range(8)], "fail_kind": kinds, "at": 0.0})
    modes = mode_labels(Dataset(meta, pd.DataFrame({"x": np.zeros(8)}), y))
    assert modes[7] == 0 and (modes[:7] > 0).all()
    assert modes[0] == modes[6] != modes[1]  # one class per kind with precursors
    assert modes[2] == modes[3]  # the sudden kinds together
    assert modes[4] == modes[5] not in (modes[0], modes[1], modes[2])  # no recorded kind
    assert sorted(set(modes[:7])) == [1, 2, 3, 4]


def test_a_mode_model_trains_saves_loads_and_refuses_warm_start(train_sim, eval_sim, tmp_path):
    import skops.io as sio

    options = TrainOptions(step_h=12, mode_classes=True)
    model = train_on_panel(train_sim.panel, options=options)
    assert "one class per failure mode" in model.card["estimator"]
    assert model.card["options"]["mode_classes"] is True
    assert len(model.estimator.estimator_.trees_.classes_) > 2
    folder = save_model(model, tmp_path / "modes")
    names = set(sio.get_untrusted_types(file=folder / "model.skops"))
    assert "gpuwarden.models.estimator.AnyFailure" in names and names <= TRUSTED_TYPES
    again = load_model(folder)
    ds = training_rows(eval_sim.panel, options=options)
    np.testing.assert_array_equal(again.risk(ds.X.iloc[:500]), model.risk(ds.X.iloc[:500]))
    est, info = fit_from_base(load_base_model(folder), ds, how="recalibrate")
    assert info["how"] == "recalibrate" and 0 < info["threshold"] < 1
    with pytest.raises(InputError, match="learn failure modes; recalibrate it instead"):
        fit_from_base(load_base_model(folder), ds, how="warm", options=WarmOptions(extra_iter=5))
