"""Trees whose score never falls as evidence of a fault rises (``TrainOptions.monotone``,
``make model --monotone``): which features are held, that the held score is monotone where
free trees learn a dip, and that the card says so."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuwarden.models.estimator import TimeSplitCalibratedClassifier, default_trees
from gpuwarden.models.features import ABSOLUTE_FEATURES, FEATURES_BY_NAME, MONOTONE_FEATURES
from gpuwarden.models.train import TrainOptions, train_on_panel


def test_the_held_features_are_evidence_never_magnitudes_in_a_generators_units():
    held = set(MONOTONE_FEATURES)
    assert not held & set(ABSOLUTE_FEATURES)
    for name in ("dbe_7d", "pcie_width_deficit_1h", "nvlink_crc_anomaly", "sbe_log_vs_own",
                 "pcie_replay_node_rank_24h", "mem_temp_c_24h_vs_rack", "xid_fatal_24h"):  # fmt: skip
        assert name in held
    for name in ("mem_temp_c_24h", "power_w_24h", "xid_app_24h", "gap_hours_24h",
                 "pcie_fleet_level_7d", "sbe_peak_share_24h", "history_h"):  # fmt: skip
        assert name in FEATURES_BY_NAME and name not in held


def _dip(n: int = 8000, seed: int = 3):
    """A feature whose failure rate rises, except in a band the training rows learnt as safe."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 10, n)
    p = np.clip(0.02 + 0.05 * x, 0, 0.9)
    p[(x > 6) & (x < 8)] = 0.01  # the training fleet's quirk: a band where nothing failed
    y = (rng.random(n) < p).astype(int)
    X = pd.DataFrame({"evidence": x, "context": rng.normal(0, 1, n)})
    times = np.repeat(np.arange(n // 40), 40).astype(float)
    return X, y, times


@pytest.mark.parametrize("increasing", [(), ("evidence",)])
def test_a_held_score_never_falls_as_the_evidence_rises(increasing):
    X, y, times = _dip()
    est = TimeSplitCalibratedClassifier(
        default_trees(0).set_params(max_iter=60), negative_subsample=1.0, increasing=increasing
    ).fit(X, y, sample_time=times)
    grid = pd.DataFrame({"evidence": np.linspace(0, 10, 201), "context": 0.0})
    score = est.estimator_.decision_function(grid.to_numpy())
    if increasing:
        assert np.all(np.diff(score) >= -1e-9)
        assert np.all(np.diff(est.predict_proba(grid)[:, 1]) >= -1e-9)
    else:  # the free trees learn the band as safe: the test can tell the two apart
        assert score[140:160].mean() < score[100:120].mean()


def test_increasing_names_known_features_of_a_dataframe():
    X, y, times = _dip(2000)
    with pytest.raises(ValueError, match="unknown features"):
        TimeSplitCalibratedClassifier(increasing=("nope",)).fit(X, y, sample_time=times)
    with pytest.raises(ValueError, match="fit on a DataFrame"):
        TimeSplitCalibratedClassifier(increasing=("evidence",)).fit(
            X.to_numpy(), y, sample_time=times
        )


def test_a_monotone_model_says_so(train_sim):
    model = train_on_panel(train_sim.panel, options=TrainOptions(step_h=3, monotone=True))
    assert "score non-decreasing in the evidence features" in model.card["estimator"]
    assert model.card["options"]["monotone"] is True
    cst = np.asarray(model.estimator.estimator_.monotonic_cst)
    used = np.asarray(model.estimator.feature_names_in_, dtype=object)[
        model.estimator.used_features_
    ]
    assert np.array_equal(cst == 1, np.isin(used, MONOTONE_FEATURES)) and (cst == 1).sum() > 40
