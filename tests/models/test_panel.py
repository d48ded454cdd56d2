"""The hourly panel: aggregation, reset-aware increases, GPU lives split at failures, events,
and the store path (rollups + raw) agreeing with the in-memory path, with nothing read after
the scoring time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from modelkit import T0, make_frame, no_events, no_failures

from gpuwarden.counters import column_increases as increases
from gpuwarden.counters import step_increases
from gpuwarden.errors import InputError
from gpuwarden.models import _hourly as H
from gpuwarden.models.history import load_panel
from gpuwarden.models.panel import build_panel, panel_from_frames
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Event, GpuId

GPUS = [("node000", 0, "GPU-a"), ("node000", 1, "GPU-b")]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 1000)), min_size=1, max_size=40))
def test_increases_match_the_counters_module(values):
    series = np.array([np.nan if v is None else float(v) for v in values])
    got = increases(series[:, None])[:, 0]
    np.testing.assert_array_equal(got, step_increases(series))


def test_increases_never_negative_across_a_reset():
    # 100 -> reset to 3 -> 10: increases 3 and 7, never -97
    last = np.array([[np.nan], [100.0], [3.0], [np.nan], [10.0]])
    np.testing.assert_array_equal(increases(last)[:, 0], [np.nan, np.nan, 3.0, np.nan, 7.0])


def test_from_raw_takes_last_counter_mean_gauge_peak_and_hw_bit():
    frame = make_frame(
        2,
        GPUS[:1],
        values={
            "ecc_sbe_volatile_total": lambda ts, g: np.arange(ts.size) * 2.0,
            "mem_temp_c": lambda ts, g: 60.0 + (ts - T0) / 3600,
            "clock_event_reasons": lambda ts, g: np.where(np.arange(ts.size) == 3, 0x8, 0x1),
        },
    )
    hourly = H.from_raw(frame.sample(frac=1.0, random_state=1))  # order must not matter
    first = hourly[hourly["hour"] == T0].iloc[0]
    assert first["ecc_sbe_volatile_total"] == 22.0  # the last reading of the hour
    assert first["mem_temp_c"] == pytest.approx(60.0 + 55 / 120)
    assert first["mem_temp_c_max"] == pytest.approx(60.0 + 55 / 60)
    assert first["hw_slowdown"] == 1.0
    assert hourly[hourly["hour"] == T0 + 3600].iloc[0]["hw_slowdown"] == 0.0


def test_combine_merges_an_hour_split_between_chunks():
    frame = make_frame(2, GPUS[:1], values={"ecc_sbe_volatile_total": lambda ts, g: ts - T0})
    cut = T0 + 1800
    parts = [H.from_raw(frame[frame["ts"] < cut]), H.from_raw(frame[frame["ts"] >= cut])]
    merged = H.combine(parts).sort_values("hour").reset_index(drop=True)
    whole = H.from_raw(frame).sort_values("hour").reset_index(drop=True)
    assert len(merged) == 2
    pd.testing.assert_series_equal(
        merged["ecc_sbe_volatile_total"], whole["ecc_sbe_volatile_total"]
    )


def test_a_failed_uuid_that_comes_back_is_a_new_life():
    frame = make_frame(10, GPUS[:1])
    failures = pd.DataFrame(
        {
            "ts": [T0 + 4.5 * 3600],
            "hostname": ["node000"],
            "gpu": [0],
            "uuid": ["GPU-a"],
            "kind": ["hbm_degradation"],
            "precursor_start_ts": [T0 + 3600.0],
        }
    )
    events = pd.DataFrame(
        {
            "ts": [T0 + 4.5 * 3600, T0 + 8 * 3600],
            "uuid": ["GPU-a", "GPU-a"],
            "kind": ["xid", "xid"],
            "code": [79.0, 13.0],
        }
    )
    panel = build_panel(
        H.from_raw(frame), frame[["uuid", "hostname", "gpu", "model", "rack"]], events, failures
    )
    assert panel.keys["key"].tolist() == ["GPU-a", "GPU-a#1"]
    assert panel.keys["fail_ts"].iloc[0] == T0 + 4.5 * 3600
    assert np.isnan(panel.keys["fail_ts"].iloc[1])
    # hours 0..4 belong to the first life, 5.. to the second
    assert panel.seen[:5, 0].all() and not panel.seen[5:, 0].any()
    assert panel.seen[5:, 1].all() and not panel.seen[:5, 1].any()
    # the Xid 79 at the failure's own time belongs to the life that failed
    assert panel.events["xid_fatal"][4, 0] == 1 and panel.fatal_xid[4, 0] == 79
    assert panel.events["xid_app"][8, 1] == 1


def test_missing_fields_stay_missing():
    frame = make_frame(3, GPUS, values={"mem_temp_c": lambda ts, g: np.full(ts.size, np.nan)})
    panel = panel_from_frames([frame], no_events(), no_failures())
    assert np.isnan(panel.gauge["mem_temp_c"]).all()
    assert np.isnan(panel.retired_total).all()  # not reported: absent, not zero
    assert (panel.inc["sbe"][1:] == 0).all()  # reported and flat: zero


def _sim_store(frames, events, failures) -> SqliteStore:
    store = SqliteStore(":memory:")
    for f in frames:
        store.write_frame(f)
    store.write_events(events)
    store.write_failures(failures)
    return store


@pytest.fixture(scope="module")
def small_fleet():
    from gpuwarden.sim import Fleet, FleetSpec

    fleet = Fleet(
        FleetSpec(nodes=2, gpus_per_node=4, days=3, step_s=300, seed=4, accel=200, start_ts=T0)
    )
    frames, events = [], []
    for chunk in fleet.chunks(progress=False):
        frames.append(chunk.samples)
        events += chunk.events
    return frames, events, fleet.failures


@pytest.mark.parametrize("compacted", [False, True], ids=["raw only", "rollups + raw"])
def test_store_path_matches_frame_path(small_fleet, compacted):
    from gpuwarden.models.panel import events_frame, failures_frame

    frames, events, failures = small_fleet
    store = _sim_store(frames, events, failures)
    end = T0 + 3 * 86400 - 1800  # half an hour into the last hour: rollups then raw
    if compacted:
        store.compact(end)
    got = load_panel(store, start=T0, end=end)
    want = panel_from_frames(
        [f[f["ts"] < end] for f in frames],
        events_frame([e for e in events if e.ts < end]),
        failures_frame(failures),
    )
    assert got.keys["key"].tolist() == want.keys["key"].tolist()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.seen, want.seen)
    for name in want.inc:
        np.testing.assert_allclose(got.inc[name], want.inc[name], rtol=1e-6, equal_nan=True)
    for name in ("mem_temp_c", "gpu_temp_c", "mem_temp_c_max", "hw_slowdown"):
        np.testing.assert_allclose(got.gauge[name], want.gauge[name], rtol=1e-5, equal_nan=True)
    for name in want.events:
        np.testing.assert_array_equal(got.events[name], want.events[name])
    assert got.last_fraction == pytest.approx(0.5)


def test_nothing_at_or_after_end_is_read():
    frame = make_frame(
        5,
        GPUS[:1],
        values={"ecc_sbe_volatile_total": lambda ts, g: np.where(ts >= T0 + 4 * 3600, 1e6, 0.0)},
    )
    store = SqliteStore(":memory:")
    store.write_frame(frame)
    gpu = GpuId("node000", 0, "GPU-a")
    store.write_events([Event(T0 + 4 * 3600, gpu, "xid", 48)])
    panel = load_panel(store, start=T0, end=T0 + 4 * 3600)
    assert np.nanmax(panel.inc["sbe"]) == 0
    assert panel.events["xid_fatal"].sum() == 0


def test_empty_window_is_an_input_error():
    with pytest.raises(InputError, match="empty"):
        load_panel(SqliteStore(":memory:"), start=T0, end=T0)
