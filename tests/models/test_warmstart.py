"""Training on a user's own fleet from a base model: no failures keeps it, few refit its
calibration, enough continue its trees; the card names the base, the file stays trusted."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner
from modelkit import T0

from gpuwarden.errors import InputError
from gpuwarden.models.artifact import TRUSTED_TYPES, RiskModel, load_model, save_model
from gpuwarden.models.cli import train
from gpuwarden.models.panel import HourlyPanel
from gpuwarden.models.train import TrainOptions, kind_weights, train_on_panel, training_rows
from gpuwarden.models.transfer import (
    WarmOptions,
    continue_trees,
    fit_from_base,
    keep_best_trees,
    load_base_model,
    model_digest,
    train_user_model,
)

FAST = TrainOptions(step_h=6)


@pytest.fixture(scope="module")
def base_dir(tiny_model, tmp_path_factory):
    return save_model(tiny_model, tmp_path_factory.mktemp("base") / "tiny")


def keep_failures(panel: HourlyPanel, n: int) -> HourlyPanel:
    """``panel`` with the failure records of all but its first ``n`` failed GPU lives gone."""
    keys = panel.keys.copy()
    failed = keys.index[keys["fail_ts"].notna()]
    drop = keys.loc[failed].sort_values("fail_ts").index[n:]
    keys.loc[drop, "fail_ts"] = np.nan
    keys.loc[drop, "fail_kind"] = ""
    return replace(panel, keys=keys)


def test_no_failures_keeps_the_base_model_and_it_still_scores(eval_sim, base_dir, tmp_path):
    panel = keep_failures(eval_sim.panel, 0)
    done = train_user_model(panel, base_path=base_dir, options=FAST)
    assert done.how == "shipped" and "no GPU failure" in done.why
    folder = save_model(done.model, tmp_path / "kept")
    again, base = load_model(folder), load_model(base_dir)
    X = training_rows(eval_sim.panel, options=FAST).X.iloc[:500]
    assert np.allclose(again.risk(X), base.risk(X))
    card = again.card
    assert card["transfer"]["failures"] == 0 and card["base_model"]["sha256"] == model_digest(
        base_dir
    )


def test_few_failures_refit_the_calibration_and_the_card_names_the_base(
    eval_sim, base_dir, tmp_path
):
    panel = keep_failures(eval_sim.panel, 5)
    done = train_user_model(panel, base_path=base_dir, options=FAST)
    assert done.how == "recalibrate", done.why
    card = done.model.card
    base_card = json.loads((base_dir / "model_card.json").read_text())
    assert card["base_model"]["created"] == base_card["created"]
    assert card["base_model"]["sha256"] == model_digest(base_dir)
    assert card["transfer"]["failures"] == 5 and card["transfer"]["calibration"] == "sigmoid"
    # the error levels it has seen: the base's training fleets' and this fleet's, whose rows
    # fit its calibration (score warns above them)
    from gpuwarden.models.score import CARD_LEVEL_KEY, training_error_level

    seen, here = card[CARD_LEVEL_KEY], training_error_level(panel)
    assert seen["fleets"] == base_card[CARD_LEVEL_KEY]["fleets"] + here["fleets"]
    for key in set(seen) - {"fleets"}:
        assert seen[key] == max(base_card[CARD_LEVEL_KEY].get(key, 0.0), here.get(key, 0.0))
    # the same trees: the ranking of the rows is the base model's
    X = training_rows(eval_sim.panel, options=FAST).X.iloc[:2000]
    base = load_model(base_dir)
    raw_new = done.model.estimator.uncalibrated_proba(X)[:, 1]
    assert np.array_equal(raw_new, base.estimator.uncalibrated_proba(X)[:, 1])
    assert not np.allclose(done.model.risk(X), base.risk(X))
    # the at-risk line moves with the risks: the GPUs flagged on the history are the base
    # model's, in this fleet's probabilities
    rows = training_rows(panel, options=FAST).X
    assert card["threshold"] == card["transfer"]["threshold"] != base.threshold
    new_flags = done.model.risk(rows) >= done.model.threshold
    assert np.array_equal(new_flags, base.risk(rows) >= base.threshold) and new_flags.any()


def test_a_recalibrated_model_carries_the_cards_line_not_the_operators(eval_sim, base_dir):
    """The ``at_risk_threshold`` setting moves the line a fleet runs at; the line a user model
    carries over from its base stays the base card's, so its card is the same either way."""
    from gpuwarden.health import at_risk_threshold, use_at_risk_threshold

    panel = keep_failures(eval_sim.panel, 5)
    plain = train_user_model(panel, base_path=base_dir, options=FAST)
    try:
        assert use_at_risk_threshold("0.93") == 0.93
        moved = train_user_model(panel, base_path=base_dir, options=FAST)
        assert moved.model.threshold == 0.93 == at_risk_threshold(moved.model.card)
    finally:
        use_at_risk_threshold(None)
    assert moved.model.card["threshold"] == plain.model.card["threshold"] == plain.model.threshold
    assert (
        moved.model.card["transfer"]["threshold_from"]
        == (plain.model.card["transfer"]["threshold_from"])
    )


def test_warm_start_continues_the_base_trees(eval_sim, base_dir):
    base = load_base_model(base_dir)
    ds = training_rows(eval_sim.panel, options=FAST)
    old = base.estimator.estimator_
    X = ds.X.to_numpy(np.float64)[:, base.estimator.used_features_]
    trees = continue_trees(old, X, ds.y, None, WarmOptions(extra_iter=15))
    n = old.n_iter_
    assert trees.n_iter_ == n + 15 and old.n_iter_ == n  # the base is left as it was
    # its first n trees are the base model's own, and the new rows were binned by the base
    # model's bins: a model trained from scratch, or with fresh bins, fails both
    stages = list(trees.staged_decision_function(X[:3000]))
    assert np.allclose(stages[n - 1], old.decision_function(X[:3000]))
    assert not np.allclose(stages[-1], stages[n - 1])
    for a, b in zip(
        trees._bin_mapper.bin_thresholds_, old._bin_mapper.bin_thresholds_, strict=True
    ):
        assert np.array_equal(a, b)
    # cut back to the count of added trees that ranks the later rows best
    late = slice(len(X) // 2, None)
    added, ap = keep_best_trees(trees, n, X[late], ds.y[late])
    assert trees.n_iter_ == n + added and ap[added] == max(ap.values())
    assert np.allclose(trees.decision_function(X[:3000]), stages[n + added - 1])


def test_warm_model_round_trips_through_skops_with_trusted_types_only(eval_sim, base_dir, tmp_path):
    import skops.io as sio

    base = load_base_model(base_dir)
    ds = training_rows(eval_sim.panel, options=FAST)
    assert fit_from_base(base, ds)[1]["how"] == "recalibrate"  # the default, by measurement
    est, info = fit_from_base(
        base, ds, how="warm", options=WarmOptions(extra_iter=15), weight=kind_weights(ds, 0.5)
    )
    assert info["how"] in ("warm", "recalibrate") and "trees_added" in info, info
    assert est.estimator_.n_iter_ == base.estimator.estimator_.n_iter_ + info["trees_added"]
    folder = save_model(RiskModel(est, dict(base.card)), tmp_path / "warm")
    assert set(sio.get_untrusted_types(file=folder / "model.skops")) <= TRUSTED_TYPES
    again = load_model(folder)
    assert np.allclose(again.risk(ds.X.iloc[:500]), est.predict_proba(ds.X.iloc[:500])[:, 1])


def test_a_warm_model_runs_at_its_bases_line_as_many_rows_flagged(eval_sim, base_dir, tmp_path):
    """Its trees rank the rows anew, so the base card's line is carried as a share: the warm
    model flags as many of the history's rows as the base model flags at its line (it kept
    the default 0.7 before, whatever the base card said)."""
    import shutil

    moved = tmp_path / "base"
    shutil.copytree(base_dir, moved)
    card = json.loads((moved / "model_card.json").read_text())
    (moved / "model_card.json").write_text(json.dumps({**card, "threshold": 0.35}))
    panel = keep_failures(eval_sim.panel, 40)
    done = train_user_model(
        panel, base_path=moved, adapt="warm", options=FAST, warm=WarmOptions(extra_iter=15)
    )
    assert done.how == "warm", done.why
    line = done.model.card["threshold"]
    assert line != 0.7 and done.model.threshold == line
    assert "0.35" in done.model.card["transfer"]["threshold_from"]
    ds = training_rows(panel, options=FAST)
    base = load_base_model(moved)
    n_base = int((base.risk(ds.X) >= 0.35).sum())
    assert n_base > 0 and int((done.model.risk(ds.X) >= line).sum()) == n_base
    block = done.model.card["metrics"]["calibration_block"]
    late = ds.meta["at"].to_numpy() >= done.model.estimator.split_time_
    assert block["rows_flagged"] == int((done.model.risk(ds.X[late]) >= line).sum())


def test_warm_start_refuses_a_block_without_failures(eval_sim, base_dir):
    base = load_base_model(base_dir)
    ds = training_rows(keep_failures(eval_sim.panel, 1), options=FAST)
    with pytest.raises(InputError, match="both time blocks"):
        fit_from_base(base, ds, how="warm")


def test_a_base_model_with_other_features_is_refused_by_name(base_dir, tmp_path):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(base_dir, other)
    card = json.loads((other / "model_card.json").read_text())
    first = card["features"][0]
    card["features"] = [*card["features"][1:], "sbe_per_fortnight"]
    (other / "model_card.json").write_text(json.dumps(card))
    with pytest.raises(InputError, match="sbe_per_fortnight") as err:
        load_base_model(other)
    assert f"lacks 1 ({first})" in str(err.value)


@pytest.fixture(scope="module")
def quiet_store(tmp_path_factory):
    """A small fleet's telemetry in SQLite, with no failure records."""
    from gpuwarden.models.simdata import fleet_spec
    from gpuwarden.sim import Fleet
    from gpuwarden.store.sqlite import SqliteStore

    path = tmp_path_factory.mktemp("quiet") / "fleet.db"
    with SqliteStore(path) as store:
        for chunk in Fleet(fleet_spec(nodes=2, days=10.0, seed=41, start_ts=T0)).chunks():
            store.write_frame(chunk.samples)
    return f"sqlite:///{path}"


def test_cli_with_no_failures_keeps_the_shipped_model_and_says_so(quiet_store, tmp_path):
    out = tmp_path / "mine"
    args = ["--store", quiet_store, "--out", str(out), "--no-progress", "--step", "6h"]
    result = CliRunner().invoke(train, args)
    assert result.exit_code == 0, result.output
    assert "kept the shipped model as it is: no GPU failure" in result.output
    card = json.loads((out / "model_card.json").read_text())
    assert card["base_model"]["path"] == "shipped" and card["transfer"]["how"] == "shipped"
    rows = training_rows(_panel(quiet_store), options=FAST)
    assert np.isfinite(load_model(out).risk(rows.X)).all()


def _panel(url: str) -> HourlyPanel:
    from gpuwarden.models.train import store_history
    from gpuwarden.store import open_store

    store = open_store(url)
    try:
        return store_history(store)[0]
    finally:
        store.close()


def test_cli_refuses_a_base_model_with_other_features(quiet_store, base_dir, tmp_path):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(base_dir, other)
    card = json.loads((other / "model_card.json").read_text())
    card["features"] = card["features"][:-1]
    (other / "model_card.json").write_text(json.dumps(card))
    args = ["--store", quiet_store, "--out", str(tmp_path / "m"), "--no-progress"]
    result = CliRunner().invoke(train, [*args, "--base-model", str(other)])
    assert result.exit_code != 0
    assert "other features" in result.output and "lacks 1" in result.output
    assert not (tmp_path / "m").exists()
    clash = CliRunner().invoke(train, [*args, "--base-model", str(other), "--from-scratch"])
    assert clash.exit_code != 0 and "exclude --from-scratch" in clash.output


def test_cli_warm_start_on_a_history_without_failures_is_refused(quiet_store, tmp_path):
    args = ["--store", quiet_store, "--out", str(tmp_path / "m"), "--no-progress", "--warm-start"]
    result = CliRunner().invoke(train, args)
    assert result.exit_code != 0 and "no GPU failure in the history" in result.output
    assert not (tmp_path / "m").exists()


def test_cli_with_a_few_failures_recalibrates_the_shipped_model(quiet_store, tmp_path):
    from gpuwarden.models.artifact import DEFAULT_DIR
    from gpuwarden.store import open_store

    store = open_store(quiet_store)
    try:
        gpus = store.gpus().sort_values("uuid").head(3)
    finally:
        store.close()
    path = tmp_path / "failures.csv"
    lines = ["timestamp,hostname,gpu,UUID,kind"]
    lines += [f"{T0 + 6 * 86400:.0f},{g.hostname},{g.gpu},{g.uuid},hbm" for g in gpus.itertuples()]
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "mine"
    args = ["--store", quiet_store, "--failures", str(path), "--out", str(out), "--no-progress"]
    result = CliRunner().invoke(train, [*args, "--step", "6h"])
    assert result.exit_code == 0, result.output
    assert "recalibrated the shipped model: 3 failing GPUs" in result.output
    card = json.loads((out / "model_card.json").read_text())
    assert card["base_model"]["sha256"] == model_digest(DEFAULT_DIR)
    assert card["transfer"]["how"] == "recalibrate" and card["training_data"]["failures"] == 3


def test_a_user_models_card_says_which_drift_its_trees_grew_on():
    from gpuwarden.models.transfer import _drift_seen

    base = {"min": 0.45, "max": 1.56, "fleets": 25}
    fleet = {"min": 0.3, "max": 2.1, "fleets": 1}
    assert _drift_seen(base, fleet, {"how": "warm"}) == {"min": 0.3, "max": 2.1, "fleets": 26}
    for how in ("shipped", "recalibrate"):  # the base's trees only: the base's range
        assert _drift_seen(base, fleet, {"how": how}) == base
    assert _drift_seen(None, fleet, {"how": "warm"}) is None


def test_a_recalibrated_or_warm_model_has_seen_its_base_levels_and_this_fleets():
    from gpuwarden.models.transfer import _level_seen

    base = {"sbe_per_day_7d@0.75": 5.0, "pcie_replay_per_min_7d@0.9": 0.01, "fleets": 25}
    fleet = {"sbe_per_day_7d@0.75": 40.0, "fleets": 1}
    assert _level_seen(base, fleet) == {
        "pcie_replay_per_min_7d@0.9": 0.01,
        "sbe_per_day_7d@0.75": 40.0,
        "fleets": 26,
    }
    assert _level_seen(None, fleet) == fleet and _level_seen(base, None) == base


def test_a_base_that_averages_draws_loads_recalibrates_and_refuses_warm_start(
    train_sim, eval_sim, tmp_path
):
    import skops.io as sio

    drawn = train_on_panel(train_sim.panel, options=TrainOptions(step_h=6, draws=2))
    assert "mean log-odds of 2 draws" in drawn.card["estimator"]
    assert drawn.card["options"]["draws"] == 2
    folder = save_model(drawn, tmp_path / "drawn")
    names = set(sio.get_untrusted_types(file=folder / "model.skops"))
    assert "gpuwarden.models.estimator.MeanOfDraws" in names and names <= TRUSTED_TYPES
    base = load_base_model(folder)
    ds = training_rows(eval_sim.panel, options=FAST)
    np.testing.assert_array_equal(base.risk(ds.X.iloc[:500]), drawn.risk(ds.X.iloc[:500]))
    est, info = fit_from_base(base, ds, how="recalibrate")
    assert info["how"] == "recalibrate" and 0 < info["threshold"] < 1
    # the recalibrated model keeps the mean of both draws, and orders rows by it
    raw = base.estimator.estimator_.decision_function(
        ds.X.to_numpy(np.float64)[:, base.estimator.used_features_]
    )
    assert est.estimator_ is not base.estimator.estimator_
    order = np.argsort(raw, kind="stable")
    assert (np.diff(est.predict_proba(ds.X)[:, 1][order]) >= -1e-12).all()
    with pytest.raises(InputError, match="averages 2; recalibrate it instead"):
        fit_from_base(base, ds, how="warm", options=WarmOptions(extra_iter=5))


def test_each_draw_can_hide_the_hbm_temperature_of_its_own_nodes(train_sim):
    from gpuwarden.models.train import hide_memory_temperature

    panel = train_sim.panel
    options = TrainOptions(step_h=6, draws=2, robust_share=0.5)
    hosts = panel.keys["hostname"].to_numpy()

    def hidden(seed):
        mem = hide_memory_temperature(panel, 0.5, seed).gauge["mem_temp_c"]
        return set(hosts[np.isnan(mem).all(axis=0)])

    # draw 1 hides other nodes than draw 0: rows of its own, the same rows and labels
    assert hidden(0) != hidden(1000)
    ds0, ds1 = (training_rows(panel, options=options, draw=k) for k in (0, 1))
    assert ds0.meta[["key", "at"]].equals(ds1.meta[["key", "at"]])
    assert not ds0.X["mem_temp_c_24h"].isna().equals(ds1.X["mem_temp_c_24h"].isna())
    shared = train_on_panel(panel, options=options)
    own = train_on_panel(panel, options=replace(options, hide_per_draw=True))
    assert "each draw hides its own nodes' HBM temperature" in own.card["estimator"]
    assert own.card["options"]["hide_per_draw"] is True
    Xu = ds0.X.to_numpy(np.float64)[:, own.estimator.used_features_]
    a, b = shared.estimator.estimator_.members_, own.estimator.estimator_.members_
    np.testing.assert_array_equal(a[0].decision_function(Xu), b[0].decision_function(Xu))
    assert not np.allclose(a[1].decision_function(Xu), b[1].decision_function(Xu))


def test_the_choice_counts_a_gpu_in_both_blocks_once_and_says_so():
    from gpuwarden.models.transfer import auto_choice

    how, why = auto_choice(25, 20, 15)
    assert how == "recalibrate"
    assert why.startswith("25 failing GPUs (20 in the earlier block, 15 in the later, 10 of them")
    assert "in both" not in auto_choice(3, 2, 1)[1]
