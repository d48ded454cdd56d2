"""The write tier of the store contract: stores that accept writes (fixture ``empty``: a
fresh, empty store per test)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gpuwarden.errors import InputError
from gpuwarden.health import GpuState, Reason, Verdict
from gpuwarden.store import window
from gpuwarden.store.base import ReadableStore, Store, WritableStore
from gpuwarden.telemetry import Batch, Event, Sample

from . import DATA, FIELDS, HOURS, T0, A, B, by_gpu_time, frame_of, load_writable


def test_write_tier_protocol(empty: Store) -> None:
    assert isinstance(empty, WritableStore) and isinstance(empty, ReadableStore)


def test_a_rejected_batch_stores_nothing_of_it(empty: Store) -> None:
    good = Batch(T0, (Sample(T0, A, {"gpu_temp_c": 40.0}),))
    empty.write_batch(good)
    bad = Batch(
        T0 + 60,
        (Sample(T0 + 60, A, {"gpu_temp_c": 41.0}), Sample(math.nan, B, {"gpu_temp_c": 1.0})),
        (Event(T0 + 60, B, "xid", 13),),
    )
    with pytest.raises(InputError, match="ts"):
        empty.write_batch(bad)
    got = empty.read_samples(fields=["gpu_temp_c"])
    assert list(got["ts"]) == [T0] and list(got["gpu_temp_c"]) == [40.0]
    assert empty.read_events().empty


def test_a_bad_frame_is_refused_with_its_column_and_loses_nothing(empty: Store) -> None:
    load_writable(empty, compact=False)
    before = empty.read_samples()
    frame = frame_of(DATA.samples[:6]).assign(ts=lambda f: f["ts"] + 86400)
    frame["gpu_temp_c"] = frame["gpu_temp_c"].astype(object)
    frame.loc[3, "gpu_temp_c"] = "hot"
    with pytest.raises(InputError, match="gpu_temp_c"):
        empty.write_frame(frame)
    with pytest.raises(InputError, match="uuid"):
        empty.write_frame(frame.drop(columns="uuid"))
    pd.testing.assert_frame_equal(empty.read_samples(), before)


def test_writing_a_sample_again_replaces_it(empty: Store) -> None:
    empty.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": 40.0}),)))
    empty.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": 45.0}),)))
    got = empty.read_samples(fields=["gpu_temp_c"])
    assert list(got["gpu_temp_c"]) == [45.0]


def test_a_repeated_event_is_kept_once(empty: Store) -> None:
    assert empty.write_events(DATA.events) == len(DATA.events)
    assert empty.write_events(DATA.events[:1]) == 0
    assert len(empty.read_events()) == len(DATA.events)


def test_a_verdict_for_the_same_gpu_and_time_is_replaced(empty: Store) -> None:
    first = Verdict(T0, A, GpuState.OK, risk=0.2)
    second = Verdict(T0, A, GpuState("at-risk"), risk=0.9, reasons=(Reason("hot", {"t": 90.0}),))
    empty.write_verdicts([first])
    empty.write_verdicts([second])
    v = empty.read_verdicts()
    assert len(v) == 1 and v.iloc[0]["state"] == "at-risk" and v.iloc[0]["risk"] == 0.9
    assert dict(v.iloc[0]["reasons"][0].features) == {"t": 90.0}


def test_a_repeated_failure_is_kept_once(empty: Store) -> None:
    empty.write_failures(DATA.failures)
    empty.write_failures(DATA.failures)
    assert len(empty.read_failures()) == 1


def test_compact_keeps_what_read_window_returns(empty: Store) -> None:
    load_writable(empty, compact=False)
    fields = [*FIELDS, "mem_temp_c_max"]
    span = {"start": T0, "end": T0 + HOURS * 3600, "fields": fields}
    before = {r: empty.read_window(**span, resolution_s=r) for r in (300, 3600)}
    empty.compact(DATA.rolled_until)
    for r, frame in before.items():
        pd.testing.assert_frame_equal(empty.read_window(**span, resolution_s=r), frame)


def test_a_bucket_rolled_up_half_full_is_read_again_from_raw(empty: Store) -> None:
    # compact mid-hour, as a collector's hourly compact does; the rest of the hour comes later
    cut = T0 + 3600 + 1200.0
    empty.write_frame(frame_of([s for s in DATA.samples if s.ts < cut]))
    empty.compact(cut)
    empty.write_frame(frame_of([s for s in DATA.samples if cut <= s.ts < T0 + 3 * 3600]))
    for r in (300, 3600):
        got = empty.read_window(start=T0, end=T0 + 3 * 3600, fields=FIELDS, resolution_s=r)
        raw = empty.read_samples(start=T0, end=T0 + 3 * 3600, fields=FIELDS)
        pd.testing.assert_frame_equal(
            by_gpu_time(got)[["ts", "uuid", *FIELDS]],
            by_gpu_time(window.bucketed(raw, FIELDS, r))[["ts", "uuid", *FIELDS]],
        )
