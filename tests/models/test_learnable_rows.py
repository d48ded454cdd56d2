"""Trees that learn failing rows only from their precursor on (``TrainOptions.learnable_only``,
``make model --learnable-only``): which rows the trees leave out, that the calibration block
still reads every row, and that the card says so."""

from __future__ import annotations

import numpy as np

from gpuwarden.models.estimator import TimeSplitCalibratedClassifier, default_trees
from gpuwarden.models.train import TrainOptions, learnable_rows, train_on_panel, training_rows
from gpuwarden.sim import SUDDEN_KINDS


def test_sudden_failures_and_the_days_before_a_precursor_are_left_out(train_sim):
    panel = train_sim.panel
    ds = training_rows(panel, options=TrainOptions(step_h=3))
    keep = learnable_rows(panel, ds)
    pre = panel.keys.set_index("key")["precursor_start_ts"].reindex(ds.meta["key"]).to_numpy()
    at = ds.meta["at"].to_numpy()
    kind = ds.meta["fail_kind"].to_numpy(dtype=object)
    failing = ds.y == 1
    sudden = failing & np.isin(kind, list(SUDDEN_KINDS))
    before = failing & ~sudden & np.isfinite(pre) & (at < pre)
    after = failing & ~sudden & np.isfinite(pre) & (at >= pre)
    assert sudden.any() and before.any() and after.any()  # the fixture holds all three
    assert not keep[sudden].any() and not keep[before].any()
    assert keep[after].all() and keep[~failing].all()
    # and, with healthy=True, the healthy-labelled rows of a precursor under way (a slow decline
    # scored more than the horizon before its failure); failing=False keeps the failing rows
    under_way = ~failing & np.isfinite(pre) & (at >= pre) & ~np.isin(kind, list(SUDDEN_KINDS))
    assert under_way.any()
    both = learnable_rows(panel, ds, healthy=True)
    assert not both[under_way].any() and np.array_equal(both | under_way, keep)
    only_healthy = learnable_rows(panel, ds, failing=False, healthy=True)
    assert only_healthy[failing].all() and not only_healthy[under_way].any()


def test_the_trees_skip_the_rows_and_the_calibration_reads_them():
    """A failing row the trees may not learn from still counts in the calibration block."""
    rng = np.random.default_rng(1)
    n = 6000
    y = (rng.random(n) < 0.1).astype(int)
    X = np.column_stack([y + rng.normal(0, 0.5, n), rng.normal(0, 1, n)])
    times = np.repeat(np.arange(n // 20), 20).astype(float)
    hidden = (y == 1) & (rng.random(n) < 0.5)  # half the failing rows: no signal to learn
    X[hidden, 0] = rng.normal(0, 0.5, int(hidden.sum()))

    def fit(learn_rows):
        est = TimeSplitCalibratedClassifier(
            default_trees(0).set_params(max_iter=20), negative_subsample=1.0
        )
        return est.fit(X, y, sample_time=times, learn_rows=learn_rows)

    everything, learnable = fit(None), fit(~hidden)
    late = times >= everything.split_time_
    # the calibration block is the same, rows the trees skipped included: the mean risk there
    # is the block's failure rate (0.10) under either model, not the rate of the failing rows
    # the trees learnt from (0.05)
    for est in (everything, learnable):
        assert abs(est.predict_proba(X[late])[:, 1].mean() - y[late].mean()) < 0.01
    # without the rows that carry no signal, the trees rank the ones that do higher
    visible = (y == 1) & ~hidden & late
    assert (learnable.predict_proba(X[visible])[:, 1].mean()
            > everything.predict_proba(X[visible])[:, 1].mean())  # fmt: skip


def test_a_model_trained_on_learnable_rows_says_so(train_sim):
    options = TrainOptions(step_h=3, learnable_only=True, learnable_healthy=True)
    model = train_on_panel(train_sim.panel, options=options)
    assert "trees learn failing rows only from their precursor on" in model.card["estimator"]
    assert "trees skip healthy-labelled rows of a precursor under way" in model.card["estimator"]
    assert model.card["options"]["learnable_only"] is True
    assert model.card["options"]["learnable_healthy"] is True
