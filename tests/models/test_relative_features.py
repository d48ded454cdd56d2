"""Scale-free features (issue 17): a GPU's counters against its own past and its node's other
GPUs read the same whatever the units' scale; telemetry gaps are counted, never zeros."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from modelkit import T0, make_frame, no_events, no_failures

from gpuwarden.models.features import FEATURE_NAMES, RELATIVE, compute_features, rows_at
from gpuwarden.models.panel import panel_from_frames

GPUS = [("node000", i, f"GPU-{i}") for i in range(4)]
HOURS = 8 * 24
SCALE_FREE = ("new_24h", "active_share_72h", "node_rank_24h", "model_rank_24h", "anomaly")
NEAR = ("log_vs_own", "peak_vs_own", "vs_quietest_14d", "growth_72h", "vs_node_log_24h")


def _growing(scale: float):
    """GPU 0's count grows 2x every 8 h over the last 2 days from a low, steady past; the
    other GPUs see a low background."""

    def counter(ts, g):
        h = (ts - T0) / 3600.0
        if g == 0:
            per_h = np.where(h >= HOURS - 48, 2.0 ** ((h - (HOURS - 48)) / 8.0) * 10, 2.0)
        else:
            per_h = np.full(h.size, 2.0 if g == 1 else 0.0)
        return np.cumsum(per_h * scale * 300 / 3600)

    return counter


def _last(*frames: pd.DataFrame) -> pd.DataFrame:
    """Every GPU's features at the panel's last hour, by UUID."""
    panel = panel_from_frames(list(frames), no_events(), no_failures())
    meta, X = compute_features(panel, rows_at(panel, [panel.shape[0] - 1]))
    return X.set_index(meta["uuid"])


def _features(scale: float) -> pd.DataFrame:
    values = {
        "pcie_replay_total": _growing(scale),
        "nvlink_crc_flit_errors_total": _growing(scale),
        "ecc_sbe_volatile_total": _growing(scale),
    }
    return _last(make_frame(HOURS, GPUS, values=values))


def test_relative_features_do_not_move_when_every_count_is_scaled():
    base = _features(10.0)
    for scale in (100.0, 1000.0):
        other = _features(scale)
        for _, prefix, _, _ in RELATIVE:
            for suffix in SCALE_FREE:
                col = f"{prefix}_{suffix}"
                np.testing.assert_allclose(other[col], base[col], err_msg=col)
            for suffix in NEAR:  # log1p smoothing: equal within a few percent of the scale
                col = f"{prefix}_{suffix}"
                np.testing.assert_allclose(other[col], base[col], rtol=0.05, atol=0.02, err_msg=col)
    # and they say what happened: GPU 0 outranks its peers, is growing, several signs at once
    row = base.loc["GPU-0"]
    assert row["nvlink_crc_node_rank_24h"] == 1.0
    assert row["nvlink_crc_growth_72h"] > 0.02
    assert row["nvlink_crc_log_vs_own"] > np.log(4)
    assert row["nvlink_crc_anomaly"] >= 3
    assert base.loc["GPU-2", "nvlink_crc_anomaly"] == 0
    # an absolute rate is not scale-free: the reason the relative ones exist
    assert (
        _features(1000.0).loc["GPU-0", "nvlink_crc_per_min_24h"]
        > 50 * row["nvlink_crc_per_min_24h"]
    )


def test_a_counter_starting_from_nothing_is_new_and_a_steady_one_is_not():
    def start_late(ts, g):
        h = (ts - T0) / 3600.0
        per_h = np.where(h >= HOURS - 10, 5.0, 0.0) if g == 0 else np.full(h.size, 5.0)
        return np.cumsum(per_h * 300 / 3600)

    X = _last(make_frame(HOURS, GPUS[:2], values={"pcie_replay_total": start_late}))
    assert X.loc["GPU-0", "pcie_replay_new_24h"] == 1.0
    assert X.loc["GPU-1", "pcie_replay_new_24h"] == 0.0
    # one day of history: no baseline, so "new" is unknown rather than yes or no
    short = _last(make_frame(20, GPUS[:1], values={"pcie_replay_total": start_late}))
    assert np.isnan(short["pcie_replay_new_24h"].iloc[0])


def _burst_or_climb(scale: float) -> pd.DataFrame:
    """GPU 0: one busy hour 12 h ago, quiet since; GPU 1: a steady climb over the last day."""

    def counter(ts, g):
        h = (ts - T0) / 3600.0
        if g == 0:
            per_h = np.where((h >= HOURS - 13) & (h < HOURS - 12), 600.0, 1.0)
        else:
            per_h = np.where(h >= HOURS - 24, 1.0 + (h - (HOURS - 24)) * 2.0, 1.0)
        return np.cumsum(per_h * scale * 300 / 3600)

    values = {"pcie_replay_total": counter, "nvlink_crc_flit_errors_total": counter}
    return _last(make_frame(HOURS, GPUS[:2], values=values))


def test_a_burst_that_has_passed_reads_apart_from_a_climb():
    base, scaled = _burst_or_climb(1.0), _burst_or_climb(100.0)
    for prefix in ("pcie_replay", "nvlink_crc"):
        burst, climb = base.loc["GPU-0"], base.loc["GPU-1"]
        # the burst: one hour holds most of the day, the last 6 h are quieter than the day
        assert burst[f"{prefix}_peak_share_24h"] > 0.8
        assert burst[f"{prefix}_accel_6h"] < -0.3
        # the climb: no hour stands out, the last 6 h are the busiest
        assert climb[f"{prefix}_peak_share_24h"] < 0.1
        assert climb[f"{prefix}_accel_6h"] > 0.05
        # the peak share is scale-free; the acceleration (log1p of rates per minute, as the
        # rise over the week) keeps its sign and grows with the scale
        col = f"{prefix}_peak_share_24h"
        np.testing.assert_allclose(scaled[col], base[col], rtol=1e-6, err_msg=col)
        col = f"{prefix}_accel_6h"
        assert scaled.loc["GPU-0", col] < burst[col] and scaled.loc["GPU-1", col] > climb[col]
    assert base.loc["GPU-0", "pcie_replay_active_hours_7d"] == 168


def _climb_or_steady(hours: int) -> pd.DataFrame:
    """GPU 0: single-bit errors climbing linearly from none over 3 weeks; GPU 1: a board that
    has always been as busy as GPU 0 is now."""

    def counter(ts, g):
        h = (ts - T0) / 3600.0
        per_h = 20.0 * h / hours if g == 0 else np.full(h.size, 20.0)
        return np.cumsum(per_h * 300 / 3600)

    return _last(make_frame(hours, GPUS[:2], values={"ecc_sbe_volatile_total": counter}))


def test_a_climb_over_weeks_reads_against_the_quietest_day_not_the_last_week():
    X = _climb_or_steady(21 * 24)
    climb, steady = X.loc["GPU-0"], X.loc["GPU-1"]
    # against the week before, three weeks of climbing look nearly flat ...
    assert climb["sbe_log_vs_own"] < 0.25
    # ... against its quietest day of the two weeks, they do not; the busy board's do not move
    assert climb["sbe_vs_quietest_14d"] > 0.6
    assert abs(steady["sbe_vs_quietest_14d"]) < 0.05
    # under 6 whole days before the last one there is no quietest day to speak of
    assert np.isnan(_climb_or_steady(6 * 24).loc["GPU-0", "sbe_vs_quietest_14d"])
    assert not np.isnan(_climb_or_steady(8 * 24).loc["GPU-0", "sbe_vs_quietest_14d"])


def test_scoring_loads_all_the_history_the_features_read():
    """``score`` loads ``HISTORY_H`` hours before the scoring hour: features from that much
    history equal those from all of it, so a scored GPU reads as the model was trained."""
    from gpuwarden.models.features import HISTORY_H

    def climb(ts, g):  # a month of single-bit errors climbing from none
        per_h = 20.0 * (ts - T0) / (30 * 24 * 3600.0) * (g + 1)
        return np.cumsum(per_h * 300 / 3600)

    frame = make_frame(30 * 24, GPUS, values={"ecc_sbe_volatile_total": climb})
    full = _last(frame)

    def last_of(hours: float) -> pd.DataFrame:
        return _last(frame[frame["ts"] > frame["ts"].max() - hours * 3600])

    np.testing.assert_allclose(last_of(HISTORY_H).to_numpy(float), full.to_numpy(float))
    # a week, as scoring loaded before the quietest-day features, would not do
    week = last_of(7 * 24 + 2)
    assert (week["sbe_vs_quietest_14d"] < full["sbe_vs_quietest_14d"] - 0.1).all()


def test_gaps_are_counted_and_never_read_as_zeros():
    frame = make_frame(HOURS, GPUS[:2], values={"pcie_replay_total": _growing(1.0)})
    ts = frame["ts"].to_numpy()
    h = (ts - T0) // 3600
    # GPU-1 sends nothing for hours 150-155 (6 h) and 180-182 (3 h): within the last day
    # and the week
    quiet = (frame["uuid"] == "GPU-1") & (((h >= 150) & (h < 156)) | ((h >= 180) & (h < 183)))
    X = _last(frame[~quiet.to_numpy()])
    assert X.loc["GPU-1", "gap_hours_24h"] == 3
    assert X.loc["GPU-1", "gap_hours_7d"] == 9
    assert X.loc["GPU-1", "longest_gap_h_7d"] == 6
    assert X.loc["GPU-0", ["gap_hours_24h", "gap_hours_7d", "longest_gap_h_7d"]].tolist() == [
        0,
        0,
        0,
    ]
    # the silent hours are unread, not zero: GPU-1's hourly mean is over the hours it reported
    assert X.loc["GPU-1", "pcie_replay_active_share_72h"] == pytest.approx(
        X.loc["GPU-0", "pcie_replay_active_share_72h"], abs=0.02
    )
    # a GPU life that began an hour ago has no gap before its first sample
    late = make_frame(3, [("node001", 0, "GPU-9")], start=T0 + (HOURS - 3) * 3600)
    assert _last(frame, late).loc["GPU-9", "gap_hours_7d"] == 0


def test_width_drop_run_counts_hours_below_full_width():
    def width(ts, g):
        h = (ts - T0) / 3600.0
        return np.where((g == 0) & (h >= HOURS - 5), 8.0, 16.0)

    X = _last(make_frame(HOURS, GPUS[:2], values={"pcie_link_width": width}))
    assert X.loc["GPU-0", "pcie_width_low_run_h"] == 5
    assert X.loc["GPU-0", "pcie_width_deficit_1h"] == 0.5
    assert X.loc["GPU-1", "pcie_width_low_run_h"] == 0
    assert set(FEATURE_NAMES) >= {"gap_hours_24h", "pcie_width_low_run_h", "nvlink_crc_anomaly"}


def test_fleets_side_by_side_keep_their_own_peers_and_hours():
    from gpuwarden.models.simdata import concat_panels

    a = panel_from_frames(
        [make_frame(HOURS, GPUS, values={"nvlink_crc_flit_errors_total": _growing(1.0)})],
        no_events(),
        no_failures(),
    )
    # the same hostnames, a day later: must not become node peers of the first fleet's GPUs
    b = panel_from_frames(
        [make_frame(HOURS - 24, GPUS, start=T0 + 24 * 3600)], no_events(), no_failures()
    )
    both = concat_panels([a, b], ["one", "two"])
    assert both.shape == (a.shape[0], a.shape[1] + b.shape[1])
    assert not both.seen[:24, a.shape[1] :].any()
    _, alone = compute_features(a, rows_at(a, [a.shape[0] - 1]))
    meta, side = compute_features(both, rows_at(both, [both.shape[0] - 1]))
    mine = meta["hostname"].str.startswith("one/").to_numpy()
    assert meta["key"].str.startswith(("one/", "two/")).all()
    np.testing.assert_allclose(
        side[mine]["nvlink_crc_node_rank_24h"], alone["nvlink_crc_node_rank_24h"]
    )
    np.testing.assert_allclose(side[mine]["nvlink_crc_log_vs_own"], alone["nvlink_crc_log_vs_own"])
