"""The read tier of the store contract: every backend, given ``DATA`` by its loader
(fixture ``loaded``)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from gpuwarden.counters import step_increases
from gpuwarden.health import VERDICT_COLUMNS
from gpuwarden.store import window
from gpuwarden.store.base import ReadableStore
from gpuwarden.telemetry import FRAME_ID_COLUMNS

from . import FIELDS, GPUS, HOURS, RESET_AT, STEP, T0, A, B, C, by_gpu_time, expected_raw


def test_read_tier_protocol(loaded: ReadableStore) -> None:
    assert isinstance(loaded, ReadableStore)


def test_samples_come_back_in_the_wide_layout(loaded: ReadableStore) -> None:
    got = loaded.read_samples(fields=FIELDS)
    assert list(got.columns) == [*FRAME_ID_COLUMNS, *FIELDS]
    assert all(got[f].dtype == np.float64 for f in FIELDS)
    assert got["ts"].is_monotonic_increasing
    pd.testing.assert_frame_equal(by_gpu_time(got), by_gpu_time(expected_raw()), check_dtype=False)


def test_nan_stays_nan_never_zero(loaded: ReadableStore) -> None:
    got = loaded.read_samples(fields=["mem_temp_c", "power_w"])
    c = got[got["uuid"] == C.uuid]
    assert c["mem_temp_c"].isna().all()
    b = got[got["uuid"] == B.uuid].reset_index(drop=True)
    assert b["power_w"].isna().sum() == len(b[((b["ts"] - T0) / STEP) % 7 == 0])
    assert (got["power_w"].dropna() != 0).all()
    for res in (300, 3600):
        win = loaded.read_window(
            start=T0, end=T0 + HOURS * 3600, fields=["mem_temp_c"], resolution_s=res
        )
        assert win.loc[win["uuid"] == C.uuid, "mem_temp_c"].isna().all()


def test_time_windows_are_half_open(loaded: ReadableStore) -> None:
    got = loaded.read_samples(start=T0 + 10 * STEP, end=T0 + 20 * STEP, fields=["gpu_temp_c"])
    assert got["ts"].min() == T0 + 10 * STEP and got["ts"].max() == T0 + 19 * STEP
    assert len(got) == 10 * len(GPUS)
    ev = loaded.read_events(start=T0 + 600.0, end=T0 + 7300.0)
    assert list(ev["ts"]) == [T0 + 600.0]


def test_uuid_and_hostname_filters(loaded: ReadableStore) -> None:
    one = loaded.read_samples(uuids=[B.uuid], fields=["gpu_temp_c"])
    assert set(one["uuid"]) == {B.uuid}
    host = loaded.read_samples(hostnames=["node2"], fields=["gpu_temp_c"])
    assert set(host["uuid"]) == {C.uuid}
    win = loaded.read_window(
        start=T0, end=T0 + 3 * 3600 + 60, fields=["gpu_temp_c"], resolution_s=300, uuids=[A.uuid]
    )
    assert set(win["uuid"]) == {A.uuid}
    assert loaded.read_samples(uuids=["GPU-none"], fields=["gpu_temp_c"]).empty


def test_gpus_lists_every_gpu_seen(loaded: ReadableStore) -> None:
    gpus = loaded.gpus().set_index("uuid")
    assert set(gpus.index) == {g.uuid for g in GPUS}
    assert gpus.loc[C.uuid, "hostname"] == "node2" and gpus.loc[C.uuid, "model"] == "A100"


def test_events_read_back(loaded: ReadableStore) -> None:
    ev = loaded.read_events()
    assert list(ev["kind"]) == ["xid", "xid", "gpu_lost"]
    assert list(ev["code"].astype("float")[:2]) == [63.0, 79.0] and pd.isna(ev["code"].iloc[2])
    assert list(loaded.read_events(kinds=["gpu_lost"])["uuid"]) == [C.uuid]
    assert list(loaded.read_events(uuids=[A.uuid])["detail"]) == ["row remap pending"]


def test_failures_read_back(loaded: ReadableStore) -> None:
    f = loaded.read_failures()
    assert len(f) == 1
    row = f.iloc[0]
    assert (row["uuid"], row["kind"], row["ts"]) == (C.uuid, "fell_off_bus", T0 + 7500.0)
    assert row["precursor_start_ts"] == T0 and int(row["xid"]) == 79


def test_verdicts_read_back_with_reasons_and_features(loaded: ReadableStore) -> None:
    v = loaded.read_verdicts()
    assert list(v.columns) == list(VERDICT_COLUMNS)
    assert list(v["state"]) == ["ok", "at-risk", "unhealthy"]
    at_risk = v.iloc[1]
    assert at_risk["changed_from"] == "ok" and at_risk["since"] == T0 + 7200.0
    (reason,) = at_risk["reasons"]
    assert reason == "SBE errors climbing" and dict(reason.features) == {"sbe_per_h": 42.0}
    assert math.isnan(v.iloc[2]["risk"]) and v.iloc[2]["reasons"] == ("GPU lost",)
    latest = loaded.read_verdicts(latest=True)
    assert sorted(zip(latest["uuid"], latest["state"], strict=True)) == [
        (A.uuid, "at-risk"),
        (C.uuid, "unhealthy"),
    ]


@pytest.fixture
def rollup_rtol() -> float:
    """How far a window's mean may be from ``window.aggregate``'s, relatively: 0 (to the bit)
    where the store rolls up with it (SQLite). A backend whose server averages (InfluxDB's
    ``mean``, PromQL's ``avg_over_time``) adds in another order and overrides this fixture
    with a tolerance of a few ulps; counters, peaks and bitmasks stay exact either way."""
    return 0.0


WINDOWS = [
    (T0, T0 + HOURS * 3600),  # everything: rollups, then the raw tail
    (T0 + 1234.0, T0 + 3 * 3600 + 900.0),  # neither end on a bucket boundary
    (T0 + 600.0, T0 + 2 * 3600 - 30.0),  # ends inside the rolled-up stretch
    (T0 + 2 * 3600 + 1600.0, T0 + 2 * 3600 + 1900.0),  # only the raw tail
]


@pytest.mark.parametrize("resolution_s", [300, 3600])
@pytest.mark.parametrize(("start", "end"), WINDOWS)
def test_read_window_equals_raw_samples_aggregated(
    loaded: ReadableStore, start: float, end: float, resolution_s: int, rollup_rtol: float
) -> None:
    fields = [*FIELDS, "gpu_temp_c_max", "mem_temp_c_max"]
    got = loaded.read_window(start=start, end=end, fields=fields, resolution_s=resolution_s)
    first = np.floor(start / resolution_s) * resolution_s
    raw = loaded.read_samples(start=first, end=end, fields=window.raw_fields(fields))
    want = window.bucketed(raw, fields, resolution_s)
    assert list(got.columns) == [*FRAME_ID_COLUMNS, *fields]
    assert got["ts"].is_monotonic_increasing
    assert not got.duplicated(["uuid", "ts"]).any()
    assert got["ts"].max() < end
    pd.testing.assert_frame_equal(
        by_gpu_time(got)[["ts", "uuid", *fields]],
        by_gpu_time(want)[["ts", "uuid", *fields]],
        check_exact=rollup_rtol == 0,
        rtol=rollup_rtol,
        atol=0.0,
    )
    exact = [f for f in fields if f not in ("gpu_temp_c", "mem_temp_c", "power_w")]
    pd.testing.assert_frame_equal(  # last values, peaks and ORs: to the bit on every backend
        by_gpu_time(got)[exact], by_gpu_time(want)[exact], check_exact=True
    )


def test_read_window_raw_is_read_samples(loaded: ReadableStore) -> None:
    got = loaded.read_window(start=T0 + 60.0, end=T0 + 600.0, fields=FIELDS)
    want = loaded.read_samples(start=T0 + 60.0, end=T0 + 600.0, fields=FIELDS)
    pd.testing.assert_frame_equal(got, want)


def test_read_window_sees_nothing_at_or_after_end(loaded: ReadableStore) -> None:
    end = T0 + 3600 + 1800.0  # inside a bucket rolled up with samples after it
    got = loaded.read_window(
        start=T0, end=end, fields=["ecc_sbe_volatile_total"], resolution_s=3600
    )
    last = got[(got["uuid"] == B.uuid) & (got["ts"] == T0 + 3600)]
    # B's counter grows by 2 a minute: the last reading before end, not the hour's last
    assert last["ecc_sbe_volatile_total"].item() == 2.0 * (1800 / STEP - 1 + 60)


@pytest.mark.parametrize("resolution_s", [None, 300, 3600])
def test_counters_across_a_driver_reset(loaded: ReadableStore, resolution_s: int | None) -> None:
    frame = loaded.read_window(
        start=T0,
        end=T0 + HOURS * 3600,
        fields=["ecc_sbe_volatile_total"],
        resolution_s=resolution_s,
        uuids=[A.uuid, B.uuid],
    )
    frame = by_gpu_time(frame)
    inc = step_increases(frame["ecc_sbe_volatile_total"], frame["uuid"])
    assert np.nanmin(inc) >= 0  # a reset is never a negative increase
    total = pd.Series(inc).groupby(frame["uuid"].to_numpy()).sum()
    b = frame.loc[frame["uuid"] == B.uuid, "ecc_sbe_volatile_total"].to_numpy()
    a = frame.loc[frame["uuid"] == A.uuid, "ecc_sbe_volatile_total"].to_numpy()
    assert total[B.uuid] == b[-1] - b[0]  # no reset: the plain difference
    # A's reset: what it counted before, plus all it counted since (never the drop)
    before = a[(frame.loc[frame["uuid"] == A.uuid, "ts"] < RESET_AT).to_numpy()]
    assert a[-1] == 2.0 * (int(HOURS * 3600 / STEP) - 1 - 100) + 1.0
    assert before[-1] - a[0] + a[-1] <= total[A.uuid] <= total[B.uuid]
    assert total[A.uuid] > a[-1] - a[0]
