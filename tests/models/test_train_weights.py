"""Training weights: a fleet's rare failure modes are not outvoted by its common one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuwarden.models.labels import Dataset
from gpuwarden.models.train import kind_weights


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
