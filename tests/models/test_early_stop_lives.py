"""Early stopping on held-out GPU lives (``TimeSplitCalibratedClassifier(early_stop_groups=True)``,
``TrainOptions(early_stop_lives=True)``): no life on both sides of the split, both kinds of life
held out, and trees that memorise lives stop where scikit-learn's split of single rows does not."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwarden.errors import InputError
from gpuwarden.models.estimator import (
    AnyFailure,
    TimeSplitCalibratedClassifier,
    default_trees,
    group_holdout,
)
from gpuwarden.models.train import TrainOptions, train_on_panel


def _lives(n_lives: int = 300, hours: int = 40, seed: int = 0):
    """Rows of ``n_lives`` lives, ``hours`` each: a fifth of the lives fail (every row
    labelled), one feature is a constant drawn per life (it names the life and says nothing
    about failing), one is a weak real signal, one is noise."""
    rng = np.random.default_rng(seed)
    fails = rng.random(n_lives) < 0.2
    life = np.repeat(np.arange(n_lives), hours)
    y = fails[life].astype(int)
    X = np.column_stack(
        [
            rng.random(n_lives)[life],
            y + rng.normal(0, 3.0, life.size),
            rng.normal(0, 1.0, life.size),
        ]
    )
    times = np.tile(np.arange(hours, dtype=float), n_lives)
    return X, y, life, times


def _memorising_trees():
    return default_trees(0).set_params(
        max_iter=200, min_samples_leaf=5, max_leaf_nodes=31, learning_rate=0.1
    )


def test_no_group_is_on_both_sides_and_both_kinds_are_held_out():
    X, y, life, _ = _lives()
    held = group_holdout(life, y, 0.15, seed=3)
    assert not set(life[held]) & set(life[~held])
    failing = np.unique(life[y == 1])
    healthy = np.setdiff1d(np.unique(life), failing)
    assert round(0.15 * failing.size) == np.isin(failing, life[held]).sum()
    assert round(0.15 * healthy.size) == np.isin(healthy, life[held]).sum()
    assert not np.array_equal(held, group_holdout(life, y, 0.15, seed=4))


def test_trees_that_memorise_lives_stop_early_on_held_out_lives():
    """scikit-learn's split puts hours of every life on both sides, so learning each life's
    constant keeps lowering the held-out loss and the trees grow to ``max_iter``; on held-out
    lives it does not, and they stop."""
    X, y, life, times = _lives()
    rows = TimeSplitCalibratedClassifier(_memorising_trees()).fit(X, y, sample_time=times)
    lives = TimeSplitCalibratedClassifier(_memorising_trees(), early_stop_groups=True).fit(
        X, y, sample_time=times, groups=life
    )
    assert rows.estimator_.n_iter_ > 2 * lives.estimator_.n_iter_
    assert lives.estimator_.n_iter_ < 100


def test_the_held_out_lives_are_not_trained_on_and_weigh_as_the_classes_do(monkeypatch):
    X, y, life, times = _lives()
    seen = {}
    fit = type(default_trees()).fit

    def spy(self, X_, y_, sample_weight=None, **kw):
        seen.update(n_train=len(y_), **kw)
        return fit(self, X_, y_, sample_weight=sample_weight, **kw)

    monkeypatch.setattr(type(default_trees()), "fit", spy)
    TimeSplitCalibratedClassifier(_memorising_trees(), early_stop_groups=True).fit(
        X, y, sample_time=times, groups=life
    )
    training = times < np.unique(times)[28]
    assert seen["n_train"] + len(seen["y_val"]) == training.sum()
    w = seen["sample_weight_val"]
    # balanced: the held-out failing rows together weigh what the healthy ones do
    assert w[seen["y_val"] == 1].sum() == pytest.approx(w[seen["y_val"] == 0].sum())


@pytest.mark.parametrize(
    "estimator, groups, match",
    [
        (None, None, "needs groups"),
        (None, np.arange(3), "values for"),
        (default_trees(0).set_params(early_stopping=False), "life", "early_stopping=True"),
        (AnyFailure(default_trees(0)), "life", "early_stopping=True"),
    ],
)
def test_what_it_cannot_hold_out_is_refused(estimator, groups, match):
    X, y, life, times = _lives(60, 20)
    est = TimeSplitCalibratedClassifier(estimator, early_stop_groups=True)
    with pytest.raises(ValueError, match=match):
        est.fit(X, y, sample_time=times, groups=life if isinstance(groups, str) else groups)


def test_a_model_trained_on_held_out_lives_says_so(train_sim):
    model = train_on_panel(train_sim.panel, options=TrainOptions(early_stop_lives=True))
    assert "held-out GPU lives" in model.card["estimator"]
    assert model.card["options"]["early_stop_lives"] is True
    assert 0 < model.card["tree_rounds"] <= default_trees().max_iter
    with pytest.raises(InputError, match="mode classes"):
        train_on_panel(
            train_sim.panel, options=TrainOptions(early_stop_lives=True, mode_classes=True)
        )
