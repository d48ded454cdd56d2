"""Training weights: a fleet's rare failure modes are not outvoted by its common one, and a
named fleet's rows can weigh more than the others'."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuwarden.errors import InputError
from gpuwarden.models.labels import Dataset
from gpuwarden.models.train import TrainOptions, kind_weights, row_weights


def _dataset(lives: dict[str, int], rows_per_life: int = 3, healthy: int = 5) -> Dataset:
    keys, kinds = [], []
    for kind, n in lives.items():
        for i in range(n):
            keys += [f"{kind}-{i}"] * rows_per_life
            kinds += [kind] * rows_per_life
    y = np.r_[np.ones(len(keys), np.int8), np.zeros(healthy, np.int8)]
    keys += [f"ok-{i}" for i in range(healthy)]
    kinds += [""] * healthy
    meta = pd.DataFrame({"key": keys, "fail_kind": kinds, "at": 0.0})
    return Dataset(meta, pd.DataFrame({"x": np.zeros(len(y))}), y)


def test_rarer_kinds_weigh_more_by_the_square_root_of_their_rarity():
    ds = _dataset({"hbm_degradation": 16, "nvlink_degradation": 1, "pcie_degradation": 4})
    w = pd.Series(kind_weights(ds, 0.5), index=ds.meta["fail_kind"]).groupby(level=0).first()
    assert w["hbm_degradation"] == 1.0
    assert w["pcie_degradation"] == pytest.approx(2.0)
    assert w["nvlink_degradation"] == pytest.approx(4.0)
    assert w[""] == 1.0  # healthy rows keep their weight


def test_sudden_kinds_and_power_zero_are_left_alone():
    ds = _dataset({"hbm_degradation": 9, "gsp_error": 1})
    w = kind_weights(ds, 0.5)
    assert np.all(w[ds.meta["fail_kind"].to_numpy() == "gsp_error"] == 1.0)
    assert np.all(kind_weights(ds, 0.0) == 1.0)


def test_a_named_fleet_weighs_more_on_top_of_the_kind_weights():
    """``make_default --default-weight 2``: every row of fleet ``default`` (healthy and failing
    alike) weighs twice what ``kind_weights`` gives it, and no other fleet's row moves."""
    ds = _dataset({"hbm_degradation": 4, "pcie_degradation": 1})
    ds.meta["key"] = np.where(
        np.arange(len(ds)) % 2 == 0, "default/" + ds.meta["key"], "family100/" + ds.meta["key"]
    )
    base = kind_weights(ds, 0.5)
    w = row_weights(ds, TrainOptions(fleet_weights=(("default", 2.0),)))
    home = ds.meta["key"].str.startswith("default/").to_numpy()
    assert np.allclose(w[home], 2.0 * base[home]) and np.allclose(w[~home], base[~home])
    assert np.array_equal(row_weights(ds, TrainOptions()), base)
    assert base[home].max() > 1.0  # the rare kind's rows in it: weighed up, then doubled


def test_a_bad_fleet_weight_or_an_unknown_fleet_is_refused_by_name():
    ds = _dataset({"hbm_degradation": 2})
    ds.meta["key"] = "default/" + ds.meta["key"]
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InputError, match="fleet 'default': weight"):
            row_weights(ds, TrainOptions(fleet_weights=(("default", bad),)))
    with pytest.raises(InputError, match="fleet 'family7': no training row"):
        row_weights(ds, TrainOptions(fleet_weights=(("family7", 2.0),)))
    from gpuwarden.models.make_default import main

    with pytest.raises(SystemExit):
        main(["--default-weight", "0"])
