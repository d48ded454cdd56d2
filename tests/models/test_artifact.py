"""Model files: skops round trip with a model card, trusted-type checks, damaged files, the
shipped default model."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from gpuwarden.errors import InputError
from gpuwarden.models.artifact import (
    CARD_FILE,
    DEFAULT_DIR,
    MODEL_FILE,
    RiskModel,
    load_model,
    save_model,
)
from gpuwarden.models.features import FEATURE_NAMES, compute_features, rows_at


def test_round_trip_keeps_predictions_and_card(tiny_model, eval_sim, tmp_path):
    folder = save_model(tiny_model, tmp_path / "m")
    assert (folder / MODEL_FILE).is_file() and (folder / CARD_FILE).is_file()
    with zipfile.ZipFile(folder / MODEL_FILE) as z:  # a skops zip, not a pickle
        assert "schema.json" in z.namelist()
    loaded = load_model(folder)
    panel = eval_sim.panel
    _, X = compute_features(panel, rows_at(panel, [200, 400]))
    np.testing.assert_array_equal(loaded.risk(X), tiny_model.risk(X))
    card = json.loads((folder / CARD_FILE).read_text())
    for key in (
        "gpuwarden_version",
        "features",
        "training_data",
        "metrics",
        "threshold",
        "horizon_s",
        "created",
    ):
        assert key in card, key
    assert card["features"] == list(FEATURE_NAMES)
    assert card["threshold"] == loaded.threshold == 0.7
    assert card["training_data"]["failures"] >= 4
    assert 0 <= card["metrics"]["calibration_block"]["pr_auc"] <= 1
    assert load_model(folder / MODEL_FILE).risk(X).shape == (len(X),)


def test_untrusted_types_are_refused(tiny_model, tmp_path):
    import fractions

    evil = RiskModel(tiny_model.estimator, tiny_model.card)
    evil.estimator.extra_ = fractions.Fraction(1, 3)  # a type not on the list
    try:
        folder = save_model(evil, tmp_path / "evil")
    finally:
        del evil.estimator.extra_
    with pytest.raises(InputError, match="does not load: fractions.Fraction"):
        load_model(folder)


def test_damaged_or_missing_files_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="no model"):
        load_model(tmp_path / "nothing")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / MODEL_FILE).write_bytes(b"\x80\x04 pickle bytes, not a zip")
    with pytest.raises(InputError, match="not a skops model file"):
        load_model(bad)


def test_a_model_on_other_features_is_refused(tmp_path):
    from sklearn.linear_model import LogisticRegression

    X = np.random.default_rng(0).normal(size=(50, 3))
    lr = LogisticRegression().fit(X, (X[:, 0] > 0).astype(int))
    folder = save_model(RiskModel(lr, {}), tmp_path / "lr")
    with pytest.raises(InputError, match="other features"):
        load_model(folder)


def test_save_wants_a_folder(tiny_model, tmp_path):
    with pytest.raises(InputError, match="folder"):
        save_model(tiny_model, tmp_path / "model.skops")


@pytest.mark.skipif(not (DEFAULT_DIR / MODEL_FILE).is_file(), reason="run `make model` first")
def test_the_shipped_default_model_loads_and_is_small():
    model = load_model()
    assert (DEFAULT_DIR / MODEL_FILE).stat().st_size < 2 * 1024 * 1024
    assert model.card["training_data"]["failures"] > 50
    assert {"validation", "held_out_family"} <= set(model.card["metrics"])
    # the threshold comes from the validation fleets' operating curves, and the card says so
    from gpuwarden.models.make_default import FAMILY_BUDGET, VALIDATION_BUDGET
    from gpuwarden.sim.family import VALIDATION_SEEDS

    choice = model.card["threshold_choice"]
    assert model.threshold == choice["threshold"] and "validation fleets" in choice["rule"]
    # ... chosen on today's validation members: `make model` rebuilds this card
    assert f"family members {', '.join(map(str, VALIDATION_SEEDS))}," in choice["rule"]
    (d,) = [c for c in choice["curve"] if c["threshold"] == model.threshold]
    (f,) = [c for c in choice["family_curve"] if c["threshold"] == model.threshold]
    assert (
        d["false_flags_per_1000"] <= VALIDATION_BUDGET
        and f["false_flags_per_1000"] <= FAMILY_BUDGET
    )
    # the shipped calibration is centred: it keeps the trees' order inside a step
    assert model.estimator.centres_ is not None
    assert "centred isotonic" in model.card["estimator"]
