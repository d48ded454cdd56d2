"""Reductions against no prediction and their interval, from hand-made per-seed rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats

from gpuwarden.closedloop.report import mean_ci, reductions


def _rows(arm: str, interruptions: list[int]) -> list[dict]:
    return [
        {
            "arm": arm,
            "seed": seed,
            "sudden_fraction": 0.3,
            "interruptions": n,
            "interruptions_with_precursor": n,
            "inference_downtime_gpu_h": float(n),
            "training_lost_gpu_h": 0.0,
        }
        for seed, n in enumerate(interruptions)
    ]


def test_reduction_is_per_seed_and_its_interval_a_t_interval():
    frame = pd.DataFrame(_rows("none", [10, 20, 10]) + _rows("model", [2, 6, 4]))
    cut = reductions(frame).set_index(["arm", "metric"]).loc[("model", "interruptions")]
    per_seed = [0.8, 0.7, 0.6]
    assert cut["mean"] == pytest.approx(0.7)
    half = stats.t.ppf(0.975, 2) * pd.Series(per_seed).std() / math.sqrt(3)
    assert (cut["lo"], cut["hi"]) == pytest.approx((0.7 - half, 0.7 + half))


def test_the_interval_stops_at_a_full_reduction():
    """Seeds cut by 100%, 100% and 70%: the t interval's top passes 100%, which no seed can."""
    frame = pd.DataFrame(_rows("none", [10, 10, 10]) + _rows("model", [0, 0, 3]))
    cut = reductions(frame).set_index(["arm", "metric"]).loc[("model", "interruptions")]
    assert cut["mean"] == pytest.approx(0.9)
    assert cut["hi"] == 1.0
    half = stats.t.ppf(0.975, 2) * pd.Series([1.0, 1.0, 0.7]).std() / math.sqrt(3)
    assert cut["lo"] == pytest.approx(0.9 - half)


def test_a_seed_with_nothing_to_reduce_is_left_out():
    frame = pd.DataFrame(_rows("none", [0, 10]) + _rows("model", [0, 5]))
    cuts = reductions(frame).set_index(["arm", "metric"])
    # training lost is 0 in every seed: no reduction to speak of
    assert math.isnan(cuts.loc[("model", "training_lost_gpu_h"), "mean"])
    assert cuts.loc[("model", "interruptions"), "mean"] == pytest.approx(0.5)
    assert math.isnan(cuts.loc[("model", "interruptions"), "lo"])  # one seed: no interval


def test_mean_ci_of_nothing_is_nan():
    assert all(math.isnan(v) for v in mean_ci([]))  # type: ignore[arg-type]
