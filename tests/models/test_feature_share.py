"""Trees whose splits each choose from a share of the features (``TrainOptions.max_features``,
``make model --max-features``): the share reaches scikit-learn's trees, the card says so, and a
share outside (0, 1] is refused."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwarden.errors import InputError
from gpuwarden.models.estimator import default_trees
from gpuwarden.models.train import TrainOptions, train_on_panel


def test_each_split_draws_from_the_share():
    """Two features: one says everything, one is noise. With every feature at each split the
    trees use only the first; drawing one of the two per split, the noise gets splits too."""
    rng = np.random.default_rng(0)
    y = rng.random(4000) < 0.3
    X = np.column_stack([y + rng.normal(0, 0.3, y.size), rng.normal(0, 1, y.size)])

    def noise_splits(share: float) -> int:
        trees = default_trees(0, share).set_params(max_iter=30, early_stopping=False).fit(X, y)
        return sum(
            int(((node["feature_idx"] == 1) & ~node["is_leaf"]).sum())
            for stage in trees._predictors
            for node in (stage[0].nodes,)
        )

    assert default_trees().max_features == 1.0 and default_trees(0, 0.5).max_features == 0.5
    assert noise_splits(1.0) < noise_splits(0.5)


def test_a_model_trained_with_a_share_says_so(train_sim):
    model = train_on_panel(train_sim.panel, options=TrainOptions(step_h=3, max_features=0.5))
    assert "each split from 0.5 of the features" in model.card["estimator"]
    assert model.card["options"]["max_features"] == 0.5
    for bad in (0.0, 1.5):
        with pytest.raises(InputError, match="max_features"):
            train_on_panel(train_sim.panel, options=TrainOptions(step_h=3, max_features=bad))
