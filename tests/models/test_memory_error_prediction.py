"""The HBM error prediction pipeline end to end on the vendored Calchas slice: store -> rows ->
split -> model, rule and published recipe -> scores. The figures on the whole log are
bench/bench_calchas.py's (docs/real-data.md); this checks the plumbing, and the rules each
piece must keep (no feature reads the future, no training label reads the test period)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuwarden.collectors.memory_errors import (
    KIND,
    accelerator_gpu,
    ingest_memory_errors,
    memory_error_frame,
)
from gpuwarden.models import memory_error_eval as E
from gpuwarden.models import memory_errors as M
from gpuwarden.store.sqlite import SqliteStore

SLICE = Path(__file__).parents[1] / "data" / "calchas" / "hbm_errors_slice.csv"
DAY = 86400.0


@pytest.fixture(scope="module")
def errors() -> pd.DataFrame:
    store = SqliteStore()
    ingest_memory_errors(store, SLICE)
    out = memory_error_frame(store.read_events(kinds=[KIND]))
    store.close()
    return out


def test_rows_see_only_the_past_and_label_the_next_seven_days(errors):
    table = M.observation_table(errors, "device")
    days = M.observation_days(errors)
    assert len(table) == errors["uuid"].nunique() * len(days)  # every device, every day
    assert (np.diff(days) == DAY).all() and days[-1] + M.HORIZON_S <= errors["ts"].max() + DAY
    # one device by hand: 0.108.38.181/DSA3 has CEs on 2022-05-31 and 2023-05-26.. (no UE)
    uuid = accelerator_gpu("0.108.38.181", "DSA3").uuid
    mine = errors[errors["uuid"] == uuid]
    rows = table[table["uuid"] == uuid].set_index("t")
    for t in rows.index[::37]:
        before = mine[mine["ts"] < t]
        week = before[before["ts"] >= t - 7 * DAY]
        assert rows.loc[t, "ce_all"] == (before["ecc"] == "CE").sum()
        assert rows.loc[t, "ce_7d"] == (week["ecc"] == "CE").sum()
        assert rows.loc[t, "rows_7d"] == week["row"].nunique()
        assert rows.loc[t, "y"] == 0
    # and a device whose UEs come later: labelled 1 exactly in the 7 days before each
    uuid = accelerator_gpu("0.108.38.232", "DSA2").uuid
    ue = errors[(errors["uuid"] == uuid) & errors["uncorrectable"]]["ts"].to_numpy()
    rows = table[table["uuid"] == uuid]
    want = [int(((ue >= t) & (ue < t + M.HORIZON_S)).any()) for t in rows["t"]]
    assert rows["y"].tolist() == want and sum(want) > 0


def test_bank_rows_start_after_the_banks_first_error(errors):
    table = M.observation_table(errors, "bank")
    first = errors.assign(key=M.unit_keys(errors, "bank")).groupby("key")["ts"].min()
    assert (table["t"].to_numpy() > table["key"].map(first).to_numpy()).all()
    assert {f"dev_{c}" for c in ("ue_7d", "h_since_ue")} <= set(table.columns)
    assert table["h_since_any"].notna().all()  # a known bank has erred before


def test_the_split_keeps_training_labels_out_of_the_test_period(errors):
    table = M.observation_table(errors, "device")
    train, test, cut = M.time_split(table)
    assert (train["t"] + M.HORIZON_S <= cut).all() and (test["t"] >= cut).all()
    assert len(np.unique(test["t"])) == pytest.approx(0.3 * len(np.unique(table["t"])), abs=1)


def test_the_pipeline_runs_end_to_end_on_the_slice(errors):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        scores = E.evaluate_level(M.observation_table(errors, "device"), "device", seeds=(0,))
    got = {(s.protocol, s.predictor) for s in scores}
    assert got == {
        (p, q)
        for p in ("all days", "new UE", "paper's protocol")
        for q in ("rule", "model", "paper's forest")
    }
    for s in scores:
        assert s.rows > 0 and 0 < s.positives <= s.rows
        for v in (s.precision, s.recall, s.f1):
            assert np.isnan(v) or 0 <= v <= 1


def test_prf_and_the_rule_by_hand():
    y = np.array([1, 1, 0, 0, 1])
    assert M.prf(y, np.array([1, 0, 1, 0, 0])) == pytest.approx((0.5, 1 / 3, 0.4))
    p, r, f = M.prf(y, np.zeros(5, bool))
    assert np.isnan(p) and r == 0 and np.isnan(f)
    rows = pd.DataFrame({"ue_7d": [0, 1, 0, 0], "ce_7d": [0, 0, 4, 5], "y": [0, 1, 0, 1]})
    assert M.rule_flags(rows, 5).tolist() == [False, True, False, True]
    assert M.fit_rule(rows) == 5


def test_coverage_counts_episodes_and_what_came_before(errors):
    table = M.observation_table(errors, "device")
    _, _, cut = M.time_split(table)
    c = E.coverage(table, errors, "device", cut)
    # by hand from the slice: UE episodes starting at or after the cut, per device
    n = 0
    for _, g in errors[errors["uncorrectable"]].groupby("uuid"):
        ts = np.sort(g["ts"].to_numpy())
        starts = ts[np.r_[True, np.diff(ts) > 7 * DAY]]
        n += int((starts >= cut).sum())
    assert c.episodes == n > 0
    assert c.with_ce_7d <= c.with_any_7d <= c.with_any_before <= c.episodes
    assert c.positive_rows_with_history <= c.positive_rows
