"""Scoring a store: one row per reporting GPU, states, reasons in words with the Xid action,
backtests that agree with live scores, and the degrading GPUs named."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from modelkit import T0, make_frame

from gpuwarden.errors import InputError
from gpuwarden.models.features import FEATURE_NAMES
from gpuwarden.models.reasons import explain, group_shares
from gpuwarden.models.score import COLUMNS, backtest, records, score_store
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Batch, Event, GpuId, Sample


@pytest.fixture(scope="module")
def sim_store():
    """12 days of a 4-node fleet at a high failure rate, in a SQLite store (compacted)."""
    from gpuwarden.models.simdata import fleet_spec
    from gpuwarden.sim import Fleet

    fleet = Fleet(fleet_spec(nodes=4, days=12.0, accel=150.0, seed=21, start_ts=T0))
    store = SqliteStore(":memory:")
    for chunk in fleet.chunks(progress=False):
        store.write_frame(chunk.samples)
        store.write_events(chunk.events)
    store.write_failures(fleet.failures)
    store.compact(T0 + 12 * 86400)
    yield store, fleet
    store.close()


def test_one_row_per_reporting_gpu_worst_first(sim_store, tiny_model):
    store, fleet = sim_store
    at = T0 + 10 * 86400
    rows = score_store(store, tiny_model, at=at)
    assert list(rows.columns) == [*COLUMNS, "evidence", "action", "missing", "rule"]
    assert (rows["missing"] == ()).all()  # the simulator reads every signal
    assert rows["uuid"].is_unique and (rows["at"] == at).all()
    alive = store.read_samples(start=at - 86400, end=at, fields=["gpu_temp_c"])
    assert set(rows["uuid"]) == set(alive["uuid"]) - _replaced_by(store, at)
    assert rows["risk"].between(0, 1).all()
    assert set(rows["state"]) <= {"ok", "at-risk", "unhealthy"}
    rank = rows["state"].map({"unhealthy": 0, "at-risk": 1, "ok": 2}).to_numpy()
    assert (np.diff(rank) >= 0).all()
    flagged = rows[rows["state"] != "ok"]
    assert (flagged["reasons"].str.len() > 0).all()
    recs = records(rows)
    assert recs[0].uuid == rows["uuid"].iloc[0] and isinstance(recs[0].risk, float)


def _replaced_by(store, at: float) -> set[str]:
    """Boards a newer one had replaced in their slot by ``at``."""
    boards = store.gpus()
    pairs = boards.merge(boards, on=["hostname", "gpu"], suffixes=("", "_new"))
    later = (pairs["uuid_new"] != pairs["uuid"]) & (pairs["first_ts_new"] > pairs["first_ts"])
    return set(pairs.loc[later & (pairs["first_ts_new"] <= at), "uuid"])


def test_a_replaced_board_is_out_of_the_fleet_once_its_successor_reports(sim_store, tiny_model):
    """The old board reported in the last day, with the errors that got it replaced; once a
    new UUID reports in its slot it is not scored (the decision engine would take it for
    the slot again), and before that it is."""
    store, _ = sim_store
    boards = store.gpus()
    new = boards[boards["first_ts"] > T0 + 2 * 86400].sort_values("first_ts").iloc[0]
    slot = boards[(boards["hostname"] == new["hostname"]) & (boards["gpu"] == new["gpu"])]
    old = slot[slot["last_ts"] <= new["first_ts"]].sort_values("last_ts").iloc[-1]
    assert new["first_ts"] < old["last_ts"] + 86400  # it would be scored for a day
    after = score_store(store, tiny_model, at=float(new["first_ts"]) + 3 * 3600)
    assert new["uuid"] in set(after["uuid"]) and old["uuid"] not in set(after["uuid"])
    assert (after["hostname"] + "/" + after["gpu"].astype(str)).is_unique
    before = score_store(store, tiny_model, at=float(old["last_ts"]) - 600)
    assert old["uuid"] in set(before["uuid"]) and new["uuid"] not in set(before["uuid"])


def test_a_board_renumbered_into_a_dead_boards_slot_takes_it(tiny_model):
    """GPU 3 falls off the bus; after the boot GPU 4 reports as 3 and 5 as 4. The dead board
    reported in the last day, but another board reports in its slot after it went quiet: it
    is out of the fleet, and each slot is scored once."""
    store = SqliteStore(":memory:")
    boot = T0 + 30 * 3600
    ids = {u: GpuId("n1", i, u, model="H100-80GB") for i, u in ((3, "GPU-x"), (4, "GPU-y"))}
    ids["GPU-z"] = GpuId("n1", 5, "GPU-z", model="H100-80GB")
    ts = T0
    while ts < boot + 6 * 3600:
        if ts < boot - 3600:
            gpus = list(ids.values())
        else:  # x is gone; y and z report one index lower
            gpus = [
                GpuId("n1", 3, "GPU-y", model="H100-80GB"),
                GpuId("n1", 4, "GPU-z", model="H100-80GB"),
            ]
        store.write_batch(Batch(ts, tuple(Sample(ts, g, {"gpu_temp_c": 50.0}) for g in gpus)))
        ts += 600
    rows = score_store(store, tiny_model, at=boot + 5 * 3600)
    store.close()
    assert sorted(zip(rows["uuid"], rows["gpu"], strict=True)) == [("GPU-y", 3), ("GPU-z", 4)]


def test_the_trees_predict_on_the_score_threads_setting(sim_store, tiny_model, monkeypatch):
    from dataclasses import replace

    from threadpoolctl import threadpool_info

    from gpuwarden import tuning

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(tuning, "_score_threads", 3)  # not any machine's default here
    seen: list[set[int]] = []

    class Spy:  # the model's estimator, noting OpenMP's threads each time it predicts
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def predict_proba(self, X):
            seen.append({p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"})
            return self.inner.predict_proba(X)

    store, _ = sim_store
    rows = score_store(
        store, replace(tiny_model, estimator=Spy(tiny_model.estimator)), at=T0 + 10 * 86400
    )
    assert len(rows) and seen and all(s == {3} for s in seen)


def test_degrading_gpus_are_named_with_reasons(sim_store, tiny_model):
    """Each slow failure's GPU is flagged, with reasons, in the 12 hours before it fails (scored
    every hour, 20-40 minutes into it, as a live score would be)."""
    store, fleet = sim_store
    due = [
        f
        for f in fleet.failures
        if f.precursor_start_ts is not None
        and f.ts - f.precursor_start_ts > 12 * 3600
        and f.ts > T0 + 8 * 86400
    ]
    assert due, "the fixture fleet should hold slow failures"
    named = 0
    for f in due:
        for back_h in range(1, 13):
            rows = score_store(store, tiny_model, at=f.ts - back_h * 3600).set_index("uuid")
            if f.gpu.uuid in rows.index and rows.loc[f.gpu.uuid, "state"] != "ok":
                assert rows.loc[f.gpu.uuid, "reasons"]
                named += 1
                break
    assert named == len(due)


def test_default_at_is_just_after_the_newest_sample(sim_store, tiny_model):
    store, _ = sim_store
    rows = score_store(store, tiny_model)
    newest = store.gpus()["last_ts"].max()
    assert rows["at"].iloc[0] == pytest.approx(newest + 1)


def test_backtest_on_the_hour_matches_live_scores(sim_store, tiny_model):
    store, _ = sim_store
    start, end = T0 + 9 * 86400, T0 + 9 * 86400 + 12 * 3600
    bt = backtest(store, tiny_model, start=start, end=end, step_s=6 * 3600)
    assert sorted(bt["at"].unique()) == [start, start + 6 * 3600, end]
    live = score_store(store, tiny_model, at=start + 6 * 3600)
    got = bt[bt["at"] == start + 6 * 3600].set_index("uuid").sort_index()
    want = live.set_index("uuid").sort_index()
    np.testing.assert_allclose(got["risk"], want["risk"], atol=1e-6)
    assert (got["state"] == want["state"]).all()
    # off the hour, each time reads its own window
    odd = backtest(store, tiny_model, start=start + 600, end=start + 600, step_s=3600)
    assert (odd["at"] == start + 600).all() and len(odd) > 0


def test_backtest_bad_ranges_are_input_errors(sim_store, tiny_model):
    store, _ = sim_store
    with pytest.raises(InputError, match="step"):
        backtest(store, tiny_model, start=T0, end=T0 + 3600, step_s=0)
    with pytest.raises(InputError, match="before"):
        backtest(store, tiny_model, start=T0 + 3600, end=T0, step_s=3600)


def test_empty_store_is_an_input_error(tiny_model):
    with pytest.raises(InputError, match="no telemetry"):
        score_store(SqliteStore(":memory:"), tiny_model)


def test_hard_signal_reason_carries_the_xid_action(tiny_model):
    gpus = [("node000", 0, "GPU-0"), ("node000", 1, "GPU-1")]
    store = SqliteStore(":memory:")
    store.write_frame(make_frame(30, gpus))
    store.write_events([Event(T0 + 29 * 3600, GpuId("node000", 1, "GPU-1"), "xid", 95)])
    rows = score_store(store, tiny_model, at=T0 + 30 * 3600).set_index("uuid")
    assert rows.loc["GPU-1", "state"] == "unhealthy"
    assert "Xid 95" in rows.loc["GPU-1", "reasons"]
    assert "drain and reset the GPU" in rows.loc["GPU-1", "reasons"]
    assert rows.loc["GPU-0", "state"] != "unhealthy"


def test_reasons_say_the_numbers_of_the_group_that_raises_the_risk(tiny_model):
    base = {n: 0.0 for n in FEATURE_NAMES}
    base.update(
        mem_temp_c_1h=60,
        mem_temp_c_24h=60,
        spread_c_1h=2,
        spread_c_24h=2,
        pcie_replay_vs_limit_1h=0.0,
    )
    sick = dict(
        base,
        sbe_per_day_1h=900,
        sbe_per_day_6h=700,
        sbe_per_day_24h=400,
        sbe_per_day_7d=60,
        sbe_rise_24h=np.log(401 / 6),
        sbe_rise_day=3.0,
        sbe_trend_24h=0.2,
        sbe_accel_6h=0.5,
        sbe_active_hours_24h=24,
        sbe_active_hours_7d=30,
        remap_correctable_7d=12,
        xid63_7d=12,
        sbe_per_day_24h_vs_node=400,
        sbe_per_day_24h_vs_rack=400,
        # the same GPU read against its own past and its peers
        sbe_log_vs_own=np.log1p(400 / 24) - np.log1p(6 / 24),
        sbe_peak_vs_own=2.0,
        sbe_growth_72h=0.03,
        sbe_active_share_72h=0.6,
        sbe_node_rank_24h=1.0,
        sbe_vs_node_log_24h=np.log1p(400 / 24),
        sbe_model_rank_24h=1.0,
        sbe_anomaly=4,
    )
    X = pd.DataFrame([base, sick])[list(FEATURE_NAMES)].astype(np.float32)
    meta = pd.DataFrame({"fatal_xid": [np.nan, np.nan]})
    shares = group_shares(tiny_model.estimator, X)
    assert shares.loc[1].idxmax() == "memory"
    reasons = explain(tiny_model.estimator, X, meta, np.array([False, True]))
    assert reasons[0] == ""
    assert "single-bit errors 400/day, up 67x on the days before" in reasons[1]
    assert "12 correctable row remaps this week" in reasons[1]


def test_reasons_count_one_as_one():
    """One of a thing is said in the singular: "1 uncorrectable row remap this week", not
    "1 uncorrectable row remaps"; two stay plural."""
    from gpuwarden.models.reasons import _SAY

    row = pd.Series(0.0, index=list(FEATURE_NAMES))
    row[["remap_uncorrectable_7d", "dbe_7d", "retired_pages_7d", "xid_hw_24h"]] = 1.0
    row[["nvlink_recovery_24h", "xid_app_24h"]] = [1.0, 2.0]
    said = "; ".join(_SAY["memory"](row) + _SAY["nvlink"](row) + _SAY["xid"](row))
    for one in ("1 uncorrectable row remap this week", "1 double-bit error this week",
                "1 page retired this week", "1 NVLink recovery today", "1 hardware Xid today",
                "2 application Xids today"):  # fmt: skip
        assert one + ";" in said + ";", said


def test_minutes_into_an_hour_the_risk_is_that_of_the_last_whole_hour(sim_store, tiny_model):
    """The model learnt on whole hours: a few minutes of a new hour must not read as an hour
    with few errors. Risk holds until the hour is whole; hard signals count at once."""
    store, _ = sim_store
    hour = T0 + 10 * 86400
    whole = score_store(store, tiny_model, at=hour).set_index("uuid")
    for minutes in (5, 9, 30, 55):
        now = score_store(store, tiny_model, at=hour + 60 * minutes).set_index("uuid")
        both = whole.index.intersection(now.index)
        assert len(both) >= 0.9 * len(whole)
        diff = (now.loc[both, "risk"] - whole.loc[both, "risk"]).abs()
        assert diff.max() < 0.02, (minutes, diff.sort_values().tail(3))
        calm = now.loc[both, "state"] != "unhealthy"
        assert (now.loc[both][calm]["state"] == whole.loc[both][calm]["state"]).all()


def test_a_hard_signal_minutes_into_an_hour_counts_at_once(tiny_model):
    gpus = [("n1", i, f"GPU-{i}") for i in range(4)]
    store = SqliteStore(":memory:")
    store.write_frame(make_frame(26.25, gpus))  # a day and a quarter hour of healthy readings
    store.write_events([Event(T0 + 26 * 3600 + 300, GpuId("n1", 2, "GPU-2"), "xid", 79, "")])
    rows = score_store(store, tiny_model, at=T0 + 26 * 3600 + 600).set_index("uuid")
    assert rows.loc["GPU-2", "state"] == "unhealthy" and "Xid 79" in rows.loc["GPU-2", "reasons"]
    assert (rows.drop(index="GPU-2")["state"] == "ok").all()
    store.close()


def test_a_signal_the_store_lacks_is_named_not_scored_as_clean(tiny_model, tmp_path):
    """dcgm-exporter's default counters have no ECC counts and no NVLink errors: every GPU's
    reasons and the command's warnings say so, with the metrics that would bring them."""
    from click.testing import CliRunner

    from gpuwarden.models.cli import score
    from gpuwarden.models.simdata import fleet_spec
    from gpuwarden.sim import Fleet

    fleet = Fleet(fleet_spec(nodes=2, days=3.0, accel=1.0, seed=5, start_ts=T0))
    lacking = [
        "ecc_sbe_volatile_total", "ecc_sbe_aggregate_total", "ecc_dbe_volatile_total",
        "ecc_dbe_aggregate_total", "nvlink_crc_flit_errors_total", "nvlink_crc_data_errors_total",
        "nvlink_replay_errors_total", "nvlink_recovery_errors_total",
    ]  # fmt: skip
    with SqliteStore(tmp_path / "default-counters.db") as store:
        for chunk in fleet.chunks(progress=False):
            store.write_frame(chunk.samples.drop(columns=lacking, errors="ignore"))
        rows = score_store(store, tiny_model)
    said = ("single-bit ECC errors", "double-bit ECC errors", "NVLink errors")
    assert len(rows) == 16 and (rows["missing"] == said).all()
    last = [e[-1] for e in rows["evidence"]]
    assert all(
        str(r) == "not in the store, so left out of the risk: " + ", ".join(said) for r in last
    )
    r = CliRunner().invoke(score, ["--store", f"sqlite:///{tmp_path / 'default-counters.db'}"])
    assert r.exit_code == 0, r.output
    warnings = [line for line in r.output.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 3
    assert "16 of 16 GPUs have no single-bit ECC errors in the store" in warnings[0]
    assert "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL or DCGM_FI_DEV_ECC_SBE_AGG_TOTAL" in warnings[0]
    assert "deploy/dcgm-exporter/gpuwarden-counters.csv" in warnings[0]


def _drifting_store(tmp_path, hbm_drift_c: float):
    from dataclasses import replace

    from gpuwarden.models.simdata import fleet_spec
    from gpuwarden.sim import Fleet

    spec = fleet_spec(nodes=2, days=9.0, accel=1.0, seed=5, start_ts=T0)
    fleet = Fleet(replace(spec, thermal_drift_hbm_c=hbm_drift_c))
    db = tmp_path / "fleet.db"
    with SqliteStore(db) as store:
        for chunk in fleet.chunks(progress=False):
            store.write_frame(chunk.samples)
    return db


@pytest.mark.parametrize("hbm_drift_c, warned", [(0.0, False), (1.0, False), (4.0, True)])
def test_a_fleet_whose_temperatures_drift_is_warned_of(tmp_path, hbm_drift_c, warned):
    """The shipped model was trained on fleets whose HBM-core spread moved up to 1.6 C a day
    (its card says so); ``score`` says when the fleet's median GPU moves more (its thermal
    reasons are untested)."""
    from click.testing import CliRunner

    from gpuwarden.models.artifact import load_model
    from gpuwarden.models.cli import score
    from gpuwarden.models.score import SPREAD_DRIFT_LIMIT_C, drift_warnings

    db = _drifting_store(tmp_path, hbm_drift_c)
    with SqliteStore(db) as store:
        rows = score_store(store, load_model())
    drift = rows.attrs["spread_drift_c"]
    assert rows.attrs["spread_drift_limit_c"] == SPREAD_DRIFT_LIMIT_C
    assert (drift > SPREAD_DRIFT_LIMIT_C) is warned, drift
    assert bool(drift_warnings(rows)) is warned
    r = CliRunner().invoke(score, ["--store", f"sqlite:///{db}"])
    assert r.exit_code == 0, r.output
    said = [line for line in r.output.splitlines() if "from day to day" in line]
    assert len(said) == int(warned)
    if warned:
        assert said[0].startswith("warning: the HBM-core temperature spread moves ")
        assert "its thermal reasons are untested there" in said[0]


def test_a_model_trained_on_a_still_fleet_warns_sooner(tiny_model, train_sim, tmp_path):
    """A model's card records the drift of the fleets it was trained on (here one still fleet);
    its warning starts above that, not at the shipped model's 1.6 C."""
    from gpuwarden.models.score import (
        CARD_DRIFT_KEY,
        drift_limit,
        drift_warnings,
        training_spread_drift,
    )

    seen = tiny_model.card[CARD_DRIFT_KEY]
    assert seen == training_spread_drift(train_sim.panel)
    assert seen["fleets"] == 1 and 0.1 < seen["min"] == seen["max"] < 0.8
    limit = drift_limit(tiny_model.card)
    assert seen["max"] <= limit < seen["max"] + 0.1
    with SqliteStore(_drifting_store(tmp_path, 1.0)) as store:
        rows = score_store(store, tiny_model)
    assert rows.attrs["spread_drift_limit_c"] == limit < rows.attrs["spread_drift_c"]
    (line,) = drift_warnings(rows)
    assert f"(up to {limit:g} C)" in line


def test_a_card_without_the_record_keeps_the_old_limit():
    from gpuwarden.models.score import SPREAD_DRIFT_LIMIT_C, drift_limit

    assert drift_limit({}) == SPREAD_DRIFT_LIMIT_C
    assert drift_limit({"spread_drift_trained_c": None}) == SPREAD_DRIFT_LIMIT_C
    assert drift_limit({"spread_drift_trained_c": {"min": 0.4, "max": 1.56, "fleets": 2}}) == 1.6
    assert drift_limit({"spread_drift_trained_c": {"min": 0.4, "max": 1.5, "fleets": 2}}) == 1.5


def test_the_training_record_is_per_fleet_when_fleets_sit_side_by_side():
    from dataclasses import replace

    from gpuwarden.models.score import training_spread_drift
    from gpuwarden.models.simdata import concat_panels, fleet_spec, simulate_panel

    spec = fleet_spec(nodes=2, days=12.0, accel=1.0, seed=5, start_ts=T0)
    still = simulate_panel(spec).panel
    wander = simulate_panel(replace(spec, seed=6, thermal_drift_hbm_c=3.0)).panel
    alone = [training_spread_drift(p)["max"] for p in (still, wander)]
    both = training_spread_drift(concat_panels([still, wander], ["a", "b"]))
    assert both == {"min": min(alone), "max": max(alone), "fleets": 2}
    assert alone[1] > 1.0 > 0.6 > alone[0]  # the mixed panel would read in between


def test_too_short_a_history_has_no_drift_to_warn_of():
    from modelkit import no_events, no_failures

    from gpuwarden.models.panel import panel_from_frames
    from gpuwarden.models.score import drift_warnings, fleet_spread_drift

    gpus = [("node000", i, f"GPU-{i}") for i in range(2)]
    panel = panel_from_frames([make_frame(48, gpus)], no_events(), no_failures())
    assert fleet_spread_drift(panel, panel.shape[0] - 1) is None
    assert drift_warnings(pd.DataFrame()) == []


def test_a_small_rise_on_a_still_fleet_is_said_against_the_fleet():
    from gpuwarden.models.reasons import _thermal

    row = pd.Series({n: np.nan for n in FEATURE_NAMES})
    row[["mem_temp_c_1h", "spread_c_1h", "spread_rise_c", "spread_rise_vs_fleet"]] = [
        64.0,
        4.0,
        1.4,
        7.2,
    ]
    assert _thermal(row) == [
        "HBM-core spread up 1.4 C on the week before, 7x the fleet's usual move"
    ]
    row["spread_rise_vs_fleet"] = 1.5  # an ordinary day where every board moves: nothing said
    assert _thermal(row) == []
    row["spread_rise_c"] = 3.5  # 3 C or more is said in degrees, whatever the fleet
    assert _thermal(row)[0].startswith("HBM 64 C, 4 C above the core")


def test_hotter_at_the_same_power_is_said_against_the_fleet():
    from gpuwarden.models.reasons import _thermal

    row = pd.Series({n: np.nan for n in FEATURE_NAMES})
    row[["core_load_rise_vs_fleet", "hbm_load_rise_vs_fleet"]] = [4.2, np.nan]
    assert _thermal(row) == [
        "core runs hotter at the same power than last week, 4x the fleet's usual move"
    ]
    row["hbm_load_rise_vs_fleet"] = 6.0
    assert _thermal(row)[0].startswith("HBM runs hotter at the same power than last week, 6x")
    row[["core_load_rise_vs_fleet", "hbm_load_rise_vs_fleet"]] = [2.0, 1.0]
    assert _thermal(row) == []


def test_the_older_week_is_read_for_the_counters_only_and_changes_no_feature(sim_store):
    """``score`` reads every field for the last week and only ``LONG_FIELDS`` before it (half
    the cost of two weeks in full); every feature reads as from a full read of both weeks."""
    from gpuwarden.models.features import HISTORY_H, LONG_FIELDS, RECENT_H, compute_features
    from gpuwarden.models.features import rows_at as rows_of
    from gpuwarden.models.history import load_panel

    store, _ = sim_store
    at = T0 + 11.5 * 86400 + 1200.0  # mid-hour, with 11.5 days behind it
    start = at - HISTORY_H * 3600

    def last_hour(**split) -> pd.DataFrame:
        panel = load_panel(store, start=start, end=at, **split)
        meta, X = compute_features(panel, rows_of(panel, [panel.shape[0] - 1]))
        return X.set_index(meta["key"].to_numpy()).sort_index()

    full = last_hour()
    split = last_hour(recent_from=at - RECENT_H * 3600, long_fields=LONG_FIELDS)
    assert list(split.index) == list(full.index) and len(full) >= 16
    assert full["sbe_vs_quietest_14d"].notna().any()
    np.testing.assert_allclose(split.to_numpy(float), full.to_numpy(float), equal_nan=True)
    # the split is real: before it, a field outside LONG_FIELDS is not read at all
    older = load_panel(
        store, start=start, end=at - 8 * 86400, recent_from=at, long_fields=LONG_FIELDS
    )
    assert np.isnan(older.gauge["gpu_temp_c"]).all()
    assert not np.isnan(older.inc["sbe"]).all()


def test_the_error_level_reads_percentiles_of_the_gpus_that_read_a_field():
    from gpuwarden.models.score import ERROR_LEVEL_MIN_GPUS, error_level

    n = ERROR_LEVEL_MIN_GPUS * 2
    X = pd.DataFrame(
        {
            "sbe_per_day_7d": np.r_[np.arange(n - 5, dtype=float), [np.nan] * 5],
            "pcie_replay_per_min_7d": np.r_[np.ones(ERROR_LEVEL_MIN_GPUS - 1), [np.nan] * 21],
        }
    )
    level = error_level(X)
    sbe = np.arange(n - 5, dtype=float)  # unread GPUs are left out, not read as 0
    assert level == {
        "sbe_per_day_7d@0.75": pytest.approx(np.quantile(sbe, 0.75)),
        "sbe_per_day_7d@0.9": pytest.approx(np.quantile(sbe, 0.9)),
    }  # PCIe: read on too few GPUs to say


def _noisy_store(tmp_path, factor: float):
    from gpuwarden.models.simdata import fleet_spec
    from gpuwarden.sim import Fleet

    spec = fleet_spec(nodes=4, days=9.0, accel=1.0, seed=5, start_ts=T0).counters_scaled(factor)
    db = tmp_path / "fleet.db"
    with SqliteStore(db) as store:
        for chunk in Fleet(spec).chunks(progress=False):
            store.write_frame(chunk.samples)
    return db


@pytest.mark.parametrize("factor, warned", [(1.0, False), (100.0, True)])
def test_a_fleet_logging_many_times_the_training_errors_is_warned_of(tmp_path, factor, warned):
    """The shipped card records its training fleets' error levels; a fleet whose every error
    rate runs 100x the default simulator's is past them, and ``score`` says so (wave 23: at x10
    W's false flags rose from 0.15 to 3.3 per 1,000 GPU-days; since wave 24 the training
    family's benign noise reaches x40, so x30 is no longer past it)."""
    from click.testing import CliRunner

    from gpuwarden.models.artifact import load_model
    from gpuwarden.models.cli import score
    from gpuwarden.models.score import CARD_LEVEL_KEY, ERROR_LEVEL_MARGIN, level_warnings

    db = _noisy_store(tmp_path, factor)
    model = load_model()
    with SqliteStore(db) as store:
        rows = score_store(store, model)
    trained = model.card[CARD_LEVEL_KEY]
    limit = rows.attrs["error_level_limit"]
    assert limit == {k: ERROR_LEVEL_MARGIN * v for k, v in trained.items() if k != "fleets"}
    level = rows.attrs["error_level"]
    assert set(level) == set(limit)
    assert any(level[k] > limit[k] for k in level) is warned, (level, limit)
    assert bool(level_warnings(rows)) is warned
    r = CliRunner().invoke(score, ["--store", f"sqlite:///{db}"])
    assert r.exit_code == 0, r.output
    said = [line for line in r.output.splitlines() if "log more errors" in line]
    assert len(said) == int(warned)
    if warned:
        assert said[0].startswith("warning: the fleet's GPUs log more errors than")
        assert "at_risk_threshold" in said[0]


def test_error_levels_read_as_written():
    from gpuwarden.models.score import level_text

    # single-bit errors per day run to thousands; replays per minute to thousandths
    assert level_text(5940.2) == "5,940" and level_text(138_700.0) == "138,700"
    assert level_text(23.5) == "23.5" and level_text(0.0792) == "0.0792"


def test_the_training_error_level_is_the_highest_fleets_and_cards_record_it(tiny_model, train_sim):
    from gpuwarden.models.score import (
        CARD_LEVEL_KEY,
        level_limit,
        level_warnings,
        training_error_level,
    )
    from gpuwarden.models.simdata import concat_panels, fleet_spec, simulate_panel

    assert tiny_model.card[CARD_LEVEL_KEY] == training_error_level(train_sim.panel)
    assert tiny_model.card[CARD_LEVEL_KEY]["fleets"] == 1
    spec = fleet_spec(nodes=4, days=10.0, accel=1.0, seed=5, start_ts=T0)
    quiet = simulate_panel(spec).panel
    loud = simulate_panel(spec.counters_scaled(30.0)).panel
    alone = [training_error_level(p) for p in (quiet, loud)]
    both = training_error_level(concat_panels([quiet, loud], ["a", "b"]))
    assert both["fleets"] == 2 and alone[0]["fleets"] == alone[1]["fleets"] == 1
    for key in set(both) - {"fleets"}:
        assert both[key] == max(a.get(key, 0.0) for a in alone)
    assert alone[1]["sbe_per_day_7d@0.75"] > 10 * max(alone[0]["sbe_per_day_7d@0.75"], 0.1)
    # a card without the record (models trained before wave 23) never warns
    assert level_limit({}) == {} and level_limit({CARD_LEVEL_KEY: None}) == {}
    assert level_warnings(pd.DataFrame()) == []


def test_a_backtest_table_says_when_each_row_was_scored():
    """A backtest printed one row per GPU per time without the time, closed with "378 GPUs at
    <the last time>", and filled its first rows with ok ones while an unhealthy row went
    unshown."""
    from gpuwarden.models.score import render_table

    rows = [
        {"at": at, "hostname": "n1", "gpu": g, "uuid": f"GPU-{g}", "model": "H100", "risk": 0.1,
         "state": "ok", "reasons": ""}
        for at in (1_767_225_600.0, 1_767_247_200.0) for g in range(3)
    ]  # fmt: skip
    rows[-1].update(state="unhealthy", risk=0.4, reasons="fatal Xid")
    text = render_table(pd.DataFrame(rows), top=2)
    lines = text.splitlines()
    assert lines[0].startswith("scored at (UTC)   host")
    assert any(ln.startswith("2026-01-01 06:00  n1") and "unhealthy" in ln for ln in lines), text
    assert lines[-1] == (
        "... 4 more; 6 rows: 3 GPUs at 2 scoring times, 2026-01-01 00:00 .. 2026-01-01 06:00 "
        "UTC: 1 unhealthy, 0 at-risk, 5 ok"
    )
    one = render_table(pd.DataFrame(rows[:3]), top=5)
    assert one.splitlines()[-1] == "3 GPUs at 2026-01-01 00:00 UTC: 0 unhealthy, 0 at-risk, 3 ok"


def test_a_backfill_marks_each_change_of_state_as_serve_does(tiny_model):
    """``score --into`` once stored no ``changed_from``: a week whose GPU went unhealthy read
    as 0 transitions in the weekly report and the dashboard's changes."""
    from gpuwarden.models.score import backfill

    gpus = [("n1", i, f"GPU-{i}") for i in range(3)]
    store = SqliteStore(":memory:")
    store.write_frame(make_frame(40.25, gpus))
    xid_at = T0 + 30 * 3600 + 300
    store.write_events([Event(xid_at, GpuId("n1", 2, "GPU-2"), "xid", 79, "")])
    hour = 3600.0
    backfill(store, tiny_model, store, start=T0 + 26 * hour, end=T0 + 33 * hour)
    # a second run goes on from the verdicts the first stored
    backfill(store, tiny_model, store, start=T0 + 34 * hour, end=T0 + 40 * hour)
    v = store.read_verdicts().set_index("uuid").loc["GPU-2"].sort_values("ts")
    assert [str(s) for s in v["state"]] == ["ok"] * 5 + ["unhealthy"] * 10
    turn = T0 + 31 * hour  # the first hourly verdict after the Xid
    changes = store.read_verdicts(changes=True).dropna(subset=["changed_from"])
    turns = changes[["uuid", "ts", "changed_from"]].astype({"changed_from": str})
    assert list(turns.itertuples(index=False, name=None)) == [("GPU-2", turn, "ok")]
    assert (v["since"].iloc[5:] == turn).all()  # across the second run too
    assert (v["since"].iloc[:5] == T0 + 26 * hour).all()  # nothing stored before: its first row
    store.close()
