"""Evaluation metrics on hand-made rows (lead time, recall at 24 h, false-flag episodes,
PR-AUC), and the side-by-side evaluation of a model and the rules on a held-out fleet."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from gpuwarden.models import _metrics as M
from gpuwarden.models.artifact import DEFAULT_DIR, MODEL_FILE, load_model
from gpuwarden.models.evaluate import _oracle, evaluate_dataset, failures_of
from gpuwarden.models.labels import Dataset, build_dataset, scoring_indices

H = 3600.0


def _rows(keys_hours: dict[str, int]) -> pd.DataFrame:
    parts = [pd.DataFrame({"key": k, "at": np.arange(n) * H}) for k, n in keys_hours.items()]
    return pd.concat(parts, ignore_index=True)


def test_lead_time_is_from_the_first_flag_within_the_horizon():
    meta = _rows({"a": 100, "b": 100, "c": 100})
    fail = pd.DataFrame(
        {
            "key": ["a", "b", "c"],
            "fail_ts": [99.5 * H, 99.5 * H, 30 * H],
            "fail_kind": ["hbm", "hbm", "gsp"],
        }
    )
    flag = np.zeros(len(meta), bool)
    flag[(meta["key"] == "a") & (meta["at"] >= 60 * H)] = True  # from 39.5 h before
    flag[(meta["key"] == "b") & (meta["at"] == 90 * H)] = True  # 9.5 h before only
    table = M.failure_table(meta, flag, fail, horizon_s=7 * 86400)
    got = table.set_index("key")
    assert got.loc["a", "lead_h"] == pytest.approx(39.5) and got.loc["a", "caught"]
    assert got.loc["b", "lead_h"] == pytest.approx(9.5) and not got.loc["b", "caught"]
    assert np.isnan(got.loc["c", "lead_h"]) and not got.loc["c", "caught"]
    summary = M.summarise(table, 0, 10.0, sudden_kinds=("gsp",)).set_index("mode")
    assert summary.loc["ALL with precursors", "recall_24h"] == 0.5
    assert summary.loc["ALL sudden", "failures"] == 1  # counted, not dropped
    assert summary.loc["ALL with precursors", "median_lead_h"] == pytest.approx(24.5)


def test_a_failure_too_early_in_the_record_is_not_judged():
    meta = _rows({"a": 100})
    fail = pd.DataFrame({"key": ["a"], "fail_ts": [10 * H], "fail_kind": ["hbm"]})
    assert M.failure_table(meta, np.ones(100, bool), fail, horizon_s=7 * 86400).empty


def test_false_flags_count_episodes_merged_within_a_day():
    meta = _rows({"a": 200, "b": 200})
    y = np.zeros(len(meta), int)
    known = np.ones(len(meta), bool)
    flag = np.zeros(len(meta), bool)
    a = (meta["key"] == "a").to_numpy()
    at = meta["at"].to_numpy() / H
    flag[a & (at >= 10) & (at < 12)] = True  # episode 1
    flag[a & (at >= 20) & (at < 22)] = True  # 8 h later: the same incident
    flag[a & (at >= 100) & (at < 101)] = True  # 78 h later: a new one
    b = ~a
    flag[b & (at >= 50) & (at < 60)] = True
    y[b] = 1  # b fails within the horizon: its flag is not false
    onsets, days = M.false_flags(meta, flag, y, known)
    assert onsets == 2 and days == pytest.approx(200 / 24)
    hourly, _ = M.false_flags(meta, flag, y, known, merge_gap_s=H)
    assert hourly == 3


def test_pr_auc_uses_known_rows_only():
    y = np.array([1, 0, 1, 0])
    s = np.array([0.9, 0.1, 0.2, 0.8])
    assert M.pr_auc(y, s, np.array([True, True, False, False])) == 1.0
    assert np.isnan(M.pr_auc(y, s, np.array([False, True, False, True])))


def test_model_and_rules_side_by_side_on_a_held_out_fleet(eval_sim, tiny_model, tmp_path):
    panel = eval_sim.panel
    ds = build_dataset(panel, scoring_indices(panel, step_h=1), drop_unknown=False)
    ev = evaluate_dataset(ds, failures_of(panel), tiny_model, horizon_s=7 * 86400, out_dir=tmp_path)
    t = ev.table.set_index("mode")
    assert t.loc["ALL sudden", "failures"] + t.loc["ALL with precursors", "failures"] == (
        t.drop(index=["ALL sudden", "ALL with precursors"])["failures"].sum()
    )
    s = ev.summary
    assert 0 < s["gpu_days"] and s["model_false_flags_per_1000"] is not None
    assert 0 < s["model_pr_auc"] <= 1 and 0 < s["ceiling_24h"] <= 1
    # even a tiny model ranks (GPU, time) rows better than the rules' yes/no
    assert s["model_pr_auc"] > s["rules_pr_auc"]
    assert {p.name for p in ev.plots.values()} == {
        "pr_curve.png",
        "reliability.png",
        "lead_time.png",
        "tradeoff.png",
    }
    text = ev.render()
    assert (
        "| ALL sudden |" in text
        and "Ceiling:" in text
        and "a model passes it only by ranking" in text
    )
    assert 0 < s["oracle_pr_auc"] <= s["oracle_pr_auc_no_sudden"] <= 1
    # both false-flag figures are named; the 30-day one says why it is absent on a short fleet
    assert "| false flags per 1,000 GPU-days, 7-day label (flag episodes" in text
    if s.get("model_false_flag_days_30d_per_1000") is None:
        assert "30-day outcome | - (no GPU-day here has 30 days of history after it" in text
    else:
        assert "| false flags per 1,000 GPU-days, 30-day outcome (flagged GPU-days" in text


def test_the_ground_truth_bound_counts_slow_declines_and_sudden_failures_against_any_model():
    meta = _rows({"a": 400, "b": 400, "c": 400})
    kind = {"a": "hbm", "b": "gsp", "c": ""}
    meta["fail_kind"] = meta["key"].map(kind)
    fail_ts = meta["key"].map({"a": 399.5 * H, "b": 399.5 * H}).to_numpy(float)
    pre = meta["key"].map({"a": 200 * H}).to_numpy(float)  # a precursor of 8.3 days
    at = meta["at"].to_numpy()
    y = ((fail_ts > at) & (fail_ts <= at + 7 * 86400)).astype(int)
    inside = (y == 1) & (at >= pre) & (meta["fail_kind"] != "gsp").to_numpy()
    ds = Dataset(meta, pd.DataFrame(index=meta.index), y)
    known = np.ones(len(meta), bool)
    got = _oracle(ds, inside, pre, known, ("gsp",))
    # a's precursor is flagged from its first hour, 31 hours before its label turns positive
    negative_days = (y == 0).sum() / 24
    assert got["oracle_false_flags_per_1000"] == pytest.approx(1 / negative_days * 1000)
    # a's 168 positive rows ranked first, b's (sudden) 168 never: half the recall at precision 1
    assert got["oracle_pr_auc"] == pytest.approx(0.5 + 0.5 * 336 / 1200)
    assert got["oracle_pr_auc_no_sudden"] == pytest.approx(1.0)


@pytest.mark.skipif(not (DEFAULT_DIR / MODEL_FILE).is_file(), reason="run `make model` first")
def test_shipped_model_beats_the_rules_on_a_small_held_out_fleet(eval_sim):
    panel = eval_sim.panel
    ds = build_dataset(panel, scoring_indices(panel, step_h=2), drop_unknown=False)
    ev = evaluate_dataset(ds, failures_of(panel), load_model(), horizon_s=7 * 86400)
    s = ev.summary
    assert s["model_false_flags_per_1000"] < s["rules_false_flags_per_1000"] / 2
    assert s["model_pr_auc"] > 2 * s["rules_pr_auc"]
    t = ev.table.set_index("mode").loc["ALL with precursors"]
    assert t["model_caught"] >= t["rules_caught"] - 2  # as many caught, give or take noise


def test_thirty_day_false_flags_count_flagged_gpu_days_of_gpus_that_do_not_fail_soon():
    days = 60
    meta = _rows({"ok": days * 24, "dies": days * 24, "late": days * 24})
    meta["at"] = meta["at"] + H  # a row at the end of each hour
    fail = {"ok": np.nan, "dies": 20.5 * 86400, "late": 59.0 * 86400}
    meta["fail_ts"] = meta["key"].map(fail)
    meta = meta[~(meta["at"] >= meta["fail_ts"])].reset_index(drop=True)  # a life ends there
    flag = np.zeros(len(meta), bool)
    at = meta["at"].to_numpy()
    # "ok" is flagged for 2 hours on day 3 and all of day 10; "dies" on day 5 (fails on day
    # 20: within 30 days, not false); "late" on day 12 (fails on day 59: 47 days on, false)
    flag[(meta["key"] == "ok") & (at > 3 * 86400) & (at <= 3 * 86400 + 2 * H)] = True
    flag[(meta["key"] == "ok") & (at > 10 * 86400) & (at <= 11 * 86400)] = True
    flag[(meta["key"] == "dies") & (at > 5 * 86400) & (at <= 6 * 86400)] = True
    flag[(meta["key"] == "late") & (at > 12 * 86400) & (at <= 13 * 86400)] = True
    # a flag in the last 30 days is left out: its outcome is unknown
    flag[(meta["key"] == "ok") & (at > 40 * 86400) & (at <= 41 * 86400)] = True
    on, gpu_days = M.false_flag_days(meta, flag)
    assert on == 3
    # the days that end 30 days before the record's end or earlier (0-29): all 30 of "ok",
    # 28 of "late" (days 28 and 29 end within 30 days of its failure), none of "dies"
    assert gpu_days == 58
    assert M.false_flag_days(meta.iloc[:0], flag[:0]) == (0, 0.0)


def test_catchable_is_a_precursor_that_began_a_day_ahead():
    f = pd.DataFrame(
        {
            "fail_ts": [100 * H, 100 * H, 100 * H],
            "precursor_start_ts": [50 * H, 90 * H, np.nan],
        }
    )
    assert M.catchable(f).tolist() == [True, False, False]
    q = M.lead_quantiles(np.array([10.0, 20.0, np.nan, 30.0]))
    assert q["p50"] == 20.0 and q["p10"] == pytest.approx(12.0)


def test_a_link_rule_flag_counts_as_the_models_flag(eval_sim, tiny_model, monkeypatch):
    """The evaluation judges what ``score`` decides: a GPU at-risk from a link rule is flagged,
    as a hard signal is, whatever its risk. With the risk threshold out of reach, only hard
    signals and link rules flag; turning the rules off loses the PCIe failures they flagged
    (in this small fleet the width drops less than a day before the failure: flagged, with a
    lead under 24 h)."""
    panel = eval_sim.panel
    ds = build_dataset(panel, scoring_indices(panel, step_h=1), drop_unknown=False)
    assert (ds.X["pcie_width_low_run_h"] >= 2).any()  # the fleet holds a link trained down
    unreachable = dataclasses.replace(tiny_model, card={**tiny_model.card, "threshold": 1.01})
    lead = {}
    for setting in ("on", "off"):
        monkeypatch.setenv("GPUWARDEN_LINK_RULES", setting)
        ev = evaluate_dataset(ds, failures_of(panel), unreachable, horizon_s=7 * 86400)
        t = ev.table.set_index("mode")
        lead[setting] = t.loc["pcie_degradation", "model_lead_h"]
        assert ev.summary["model_pr_auc"] > 0  # the risk's ranking, rules or not
    assert lead["on"] > 0 and not np.isfinite(lead["off"])


@pytest.mark.parametrize("hbm_drift_c, untested", [(0.0, False), (4.0, True)])
def test_evaluate_says_how_far_the_fleet_drifts_from_the_training_fleets(
    tmp_path, hbm_drift_c, untested
):
    """``gpuwarden evaluate`` prints the fleet's HBM-core spread drift (median over the days)
    beside what the shipped model was trained on, and says when it is beyond it."""
    from dataclasses import replace

    from click.testing import CliRunner

    from gpuwarden.models.cli import evaluate
    from gpuwarden.models.score import SPREAD_DRIFT_LIMIT_C
    from gpuwarden.models.simdata import fleet_spec
    from gpuwarden.sim import Fleet
    from gpuwarden.store.sqlite import SqliteStore

    spec = fleet_spec(nodes=2, days=10.0, accel=1.0, seed=5, start_ts=1_767_225_600.0)
    fleet = Fleet(replace(spec, thermal_drift_hbm_c=hbm_drift_c))
    db = tmp_path / "fleet.db"
    with SqliteStore(db) as store:
        for chunk in fleet.chunks(progress=False):
            store.write_frame(chunk.samples)
            store.write_events(chunk.events)
        store.write_failures(fleet.failures)
    r = CliRunner().invoke(evaluate, ["--store", f"sqlite:///{db}", "--out", str(tmp_path / "ev")])
    assert r.exit_code == 0, r.output
    said = [line for line in r.output.splitlines() if line.startswith("Temperature drift: ")]
    assert len(said) == 1, r.output
    drift = float(said[0].split("moved ")[1].split(" C")[0])
    assert (drift > SPREAD_DRIFT_LIMIT_C) is untested, said
    assert ("thermal reasons are untested" in said[0]) is untested
    assert f"trained on fleets reading up to {SPREAD_DRIFT_LIMIT_C:g} C" in said[0]


def test_the_operating_curve_is_read_at_the_lines_asked_for(eval_sim, tiny_model):
    from gpuwarden.models.evaluate import CURVE_THRESHOLDS
    from gpuwarden.models.make_default import line_grid

    panel = eval_sim.panel
    ds = build_dataset(panel, scoring_indices(panel, step_h=1), drop_unknown=False)
    fails = failures_of(panel)
    coarse = evaluate_dataset(ds, fails, tiny_model, horizon_s=7 * 86400).summary
    fine = evaluate_dataset(
        ds, fails, tiny_model, horizon_s=7 * 86400, curve_thresholds=line_grid(0.01)
    ).summary
    at = {c["threshold"]: c for c in fine["operating_curve"]}
    assert {0.57, 0.3, 0.8} <= set(at) and 0.29 not in at and 0.81 not in at
    assert len(at) == len({*CURVE_THRESHOLDS, *line_grid(0.01), tiny_model.threshold})
    # the lines both read agree, and a higher line never catches more
    for c in coarse["operating_curve"]:
        assert at[c["threshold"]] == c
    recall = [at[t]["recall_24h"] for t in sorted(at)]
    assert all(a >= b for a, b in zip(recall, recall[1:], strict=False))
    assert recall[0] > recall[-1]


def test_thresholds_on_the_same_point_of_the_trade_off_share_one_label():
    """Thresholds that catch as many at as many false flags were printed over one another
    ("0.3" on "0.4" read as neither): they are one label, lowest to highest."""
    from gpuwarden.models._plots import _same_point

    curve = [(0.2, 0.75, 4.0), (0.3, 0.75, 4.0), (0.4, 0.75, 4.0), (0.5, 0.75, 2.3),
             (0.9, 0.5, 0.0), (0.95, 0.5, 0.0)]  # fmt: skip
    assert _same_point(curve) == {
        (0.75, 4.0): "0.2-0.4",
        (0.75, 2.3): "0.5",
        (0.5, 0.0): "0.9-0.95",
    }
