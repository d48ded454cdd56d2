"""Features: rates from reset-aware increases, windows, trends, missing-is-NaN, DCGM's PCIe
limit, and peer-relative signals that cancel a rack-wide heat wave."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from modelkit import T0, make_frame, no_events, no_failures

from gpuwarden.models.features import FEATURE_NAMES, FEATURES, compute_features, rows_at
from gpuwarden.models.panel import panel_from_frames

GPUS = [("node000", i, f"GPU-{i}") for i in range(4)]


def _last(frame: pd.DataFrame, events=None):
    panel = panel_from_frames([frame], no_events() if events is None else events, no_failures())
    meta, X = compute_features(panel, rows_at(panel, [panel.shape[0] - 1]))
    return panel, meta.set_index("uuid"), X.set_index(meta["uuid"])


def test_every_feature_is_documented_with_a_group_and_unit():
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    for f in FEATURES:
        assert (
            f.group in {"memory", "thermal", "pcie", "nvlink", "xid", "telemetry", "context"}
            and f.unit
            and f.help
        )


def test_sbe_rate_per_day_survives_a_volatile_reset():
    # 1 SBE every 5 minutes = 288/day; the volatile counter restarts at hour 30
    def sbe(ts, g):
        n = (ts - T0) / 300.0
        return np.where(ts < T0 + 30 * 3600, n, n - 360.0 + 0.0)

    frame = make_frame(
        48,
        GPUS[:1],
        values={
            "ecc_sbe_volatile_total": sbe,
            "ecc_sbe_aggregate_total": lambda ts, g: np.full(ts.size, np.nan),
        },
    )
    _, _, X = _last(frame)
    row = X.loc["GPU-0"]
    assert row["sbe_per_day_24h"] == pytest.approx(288.0, rel=0.02)
    assert row["sbe_per_day_1h"] == pytest.approx(288.0, rel=0.02)
    assert row["sbe_rise_24h"] == pytest.approx(0.0, abs=0.05)  # steady: no rise
    assert row["sbe_active_hours_24h"] == 24


def test_rising_sbe_shows_in_rise_trend_and_active_hours():
    def rising(ts, g):  # hourly count doubles every 6 h over the last day
        h = (ts - T0) / 3600.0
        per_h = np.where(h >= 144, 2.0 ** ((h - 144) / 6.0), 0.0)
        return np.cumsum(per_h * 300 / 3600)

    frame = make_frame(
        168,
        GPUS[:2],
        values={
            "ecc_sbe_volatile_total": lambda ts, g: rising(ts, g) if g == 0 else np.zeros(ts.size)
        },
    )
    _, _, X = _last(frame)
    sick, healthy = X.loc["GPU-0"], X.loc["GPU-1"]
    assert sick["sbe_rise_24h"] > 2 and sick["sbe_trend_24h"] > 0.05
    assert sick["sbe_accel_6h"] > 0.5
    assert healthy["sbe_per_day_24h"] == 0 and healthy["sbe_trend_24h"] == 0


def test_unreported_signals_are_nan_not_zero():
    frame = make_frame(30, GPUS[:1], values={"mem_temp_c": lambda ts, g: np.full(ts.size, np.nan)})
    _, _, X = _last(frame)
    row = X.loc["GPU-0"]
    for name in (
        "mem_temp_c_1h",
        "mem_temp_c_24h",
        "spread_c_24h",
        "spread_hours_over15_24h",
        "retired_pages_total",
        "retired_pages_7d",
    ):
        assert np.isnan(row[name]), name
    assert row["sbe_per_day_24h"] == 0  # reported as flat: a real zero


def test_a_new_gpu_has_no_week_before_to_compare_with():
    frame = make_frame(10, GPUS[:1])
    _, _, X = _last(frame)
    assert np.isnan(X.loc["GPU-0", "sbe_rise_24h"])  # no history before the last day
    assert np.isnan(X.loc["GPU-0", "mem_temp_rise_c"])


def test_history_hours_say_how_short_the_windows_are():
    _, _, X = _last(make_frame(10, GPUS[:1]))
    assert X.loc["GPU-0", "history_h"] == pytest.approx(9.0)  # the first hour has no increase
    _, _, X = _last(make_frame(200, GPUS[:1]))
    assert X.loc["GPU-0", "history_h"] == 168.0  # capped at the longest window


def test_a_slow_sbe_rise_shows_over_three_days():
    # 1/h for four days, then 8/h for three: the 3-day rise is log(1 + 192) - log(1 + 24)
    def sbe(ts, g):
        h = (ts - T0) / 3600.0
        return np.where(h < 96, h, 96 + (h - 96) * 8.0)

    _, _, X = _last(make_frame(168, GPUS[:1], values={"ecc_sbe_volatile_total": sbe}))
    row = X.loc["GPU-0"]
    assert row["sbe_rise_3d"] == pytest.approx(np.log1p(192.0) - np.log1p(24.0), abs=0.05)
    assert row["sbe_trend_3d"] > 0


def test_pcie_replays_against_dcgms_per_lane_limit():
    # Gen4 x16: DCGM allows 0.96 x 16 = 15.36 replays/min; this link does 30/min
    frame = make_frame(
        3,
        GPUS[:1],
        values={
            "pcie_link_gen_max": lambda ts, g: np.full(ts.size, 4.0),
            "pcie_replay_total": lambda ts, g: (ts - T0) / 60.0 * 30.0,
            "pcie_link_width": lambda ts, g: np.full(ts.size, 8.0),
        },
    )
    _, _, X = _last(frame)
    row = X.loc["GPU-0"]
    assert row["pcie_replay_per_min_1h"] == pytest.approx(30.0, rel=0.01)
    assert row["pcie_replay_vs_limit_1h"] == pytest.approx(30.0 / 15.36, rel=0.01)
    assert row["pcie_width_deficit_1h"] == pytest.approx(0.5)


def test_rack_heat_wave_is_not_a_sick_gpu():
    hot = lambda ts, g: 62.0 + np.where(ts > T0 + 20 * 3600, 10.0, 0.0)  # noqa: E731
    frame = make_frame(
        26, GPUS, values={"mem_temp_c": hot, "gpu_temp_c": lambda ts, g: hot(ts, g) - 2.0}
    )
    _, _, X = _last(frame)
    assert (X["mem_temp_c_1h"] == 72.0).all()
    assert (X["mem_temp_c_1h_vs_rack"] == 0).all() and (X["mem_temp_c_1h_vs_node"] == 0).all()


def test_one_hot_gpu_stands_out_from_its_node():
    frame = make_frame(
        26, GPUS, values={"mem_temp_c": lambda ts, g: np.full(ts.size, 80.0 if g == 2 else 62.0)}
    )
    _, _, X = _last(frame)
    assert X.loc["GPU-2", "mem_temp_c_1h_vs_node"] == pytest.approx(18.0)
    assert X.loc["GPU-2", "spread_c_1h"] == pytest.approx(20.0)
    assert X.loc["GPU-2", "spread_hours_over15_24h"] == 24


def test_gpu_without_a_rack_has_no_rack_peers():
    frame = make_frame(3, GPUS, rack="")
    _, _, X = _last(frame)
    assert X["mem_temp_c_1h_vs_rack"].isna().all()
    assert X["mem_temp_c_1h_vs_node"].notna().all()


def test_xids_are_split_into_hardware_and_application_classes():
    frame = make_frame(5, GPUS[:1])
    events = pd.DataFrame(
        {
            "ts": T0 + np.array([1.2, 2.5, 3.1, 4.5]) * 3600,
            "uuid": "GPU-0",
            "kind": "xid",
            "code": [13.0, 31.0, 63.0, 79.0],
        }
    )
    _, meta, X = _last(frame, events)
    row = X.loc["GPU-0"]
    assert row["xid_app_24h"] == 2 and row["xid_hw_24h"] == 2
    assert row["xid_fatal_24h"] == 1 and row["xid63_7d"] == 1
    assert meta.loc["GPU-0", "fatal_xid"] == 79


def test_partial_last_hour_is_scaled():
    from gpuwarden.models.history import load_panel
    from gpuwarden.store.sqlite import SqliteStore

    frame = make_frame(
        3, GPUS[:1], values={"ecc_sbe_volatile_total": lambda ts, g: (ts - T0) / 60.0}
    )  # 1 per minute = 1440/day
    store = SqliteStore(":memory:")
    store.write_frame(frame)
    panel = load_panel(store, start=T0, end=T0 + 2 * 3600 + 1200)  # 20 min into hour 3
    meta, X = compute_features(panel, rows_at(panel, [panel.shape[0] - 1]))
    assert X["sbe_per_day_1h"].iloc[0] == pytest.approx(1440.0, rel=0.05)
