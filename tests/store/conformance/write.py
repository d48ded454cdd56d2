"""The write tier of the store contract: stores that accept writes (fixture ``empty``: a
fresh, empty store per test)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gpuwarden.errors import InputError
from gpuwarden.health import GpuState, Reason, Verdict, state_changes
from gpuwarden.store import window
from gpuwarden.store.base import ReadableStore, Store, WritableStore
from gpuwarden.telemetry import Assignment, Batch, Event, NodeInfo, Sample, mig_uuid

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


def test_verdict_changes_leave_out_the_heartbeats_that_repeat_a_state(empty: Store) -> None:
    h = 1200.0  # every verdict inside the stores' "now" (T0 + HOURS h)
    at_risk, bad = GpuState("at-risk"), GpuState("unhealthy")
    empty.write_verdicts([
        Verdict(T0 + h, A, GpuState.OK, risk=0.1), Verdict(T0 + 2 * h, A, GpuState.OK, risk=0.2),
        Verdict(T0 + 3 * h, A, at_risk, risk=0.8, changed_from=GpuState.OK),
        Verdict(T0 + 4 * h, A, at_risk, risk=0.85),  # a heartbeat
        Verdict(T0 + 5 * h, A, GpuState.OK, risk=0.3, changed_from=at_risk),
        Verdict(T0 + 2.5 * h, B, bad, cause="hard-signal"),
        Verdict(T0 + 3.5 * h, B, bad, cause="hard-signal"),
    ])  # fmt: skip
    every = empty.read_verdicts()
    got = empty.read_verdicts(changes=True)
    assert list(zip(got["uuid"], got["ts"] - T0, got["state"], strict=True)) == [
        (A.uuid, h, "ok"), (B.uuid, 2.5 * h, "unhealthy"), (A.uuid, 3 * h, "at-risk"),
        (A.uuid, 5 * h, "ok"),
    ]  # fmt: skip
    pd.testing.assert_frame_equal(got, state_changes(every))
    # a window's first verdict of each GPU is kept: the state held when it opens
    late = empty.read_verdicts(start=T0 + 3.5 * h, changes=True)
    assert list(zip(late["uuid"], late["ts"] - T0, late["state"], strict=True)) == [
        (B.uuid, 3.5 * h, "unhealthy"), (A.uuid, 4 * h, "at-risk"), (A.uuid, 5 * h, "ok"),
    ]  # fmt: skip
    assert late.iloc[1]["risk"] == 0.85
    few = empty.read_verdicts(uuids=[B.uuid])  # a few GPUs: selected on a TSDB's server
    assert list(zip(few["uuid"], few["ts"] - T0, strict=True)) == [
        (B.uuid, 2.5 * h),
        (B.uuid, 3.5 * h),
    ]
    newest = empty.read_verdicts(latest=True, changes=True)  # latest: changes plays no part
    assert sorted(zip(newest["uuid"], newest["ts"] - T0, strict=True)) == sorted(
        [(A.uuid, 5 * h), (B.uuid, 3.5 * h)]
    )


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


# -- assignments, nodes and MIG instances (schema 4) ------------------------------------------


def _held(store: Store, **kw: object) -> list[tuple[object, ...]]:
    got = store.read_assignments(**kw)  # type: ignore[arg-type]
    return [
        (
            r.uuid,
            r.namespace,
            r.pod,
            r.container,
            r.ts_from,
            None if math.isnan(r.ts_to) else r.ts_to,
        )
        for r in got.itertuples()
    ]


def test_an_assignment_is_written_when_it_changes(empty: Store) -> None:
    def seen(ts: float, *pods: tuple[str, str, str]) -> None:
        rows = [Assignment(ts, A, *p) for p in pods] or [Assignment(ts, A)]
        empty.write_batch(
            Batch(ts, (Sample(ts, A, {"gpu_temp_c": 40.0}),), assignments=tuple(rows))
        )

    train = ("ml", "train-0", "pytorch")
    seen(T0, train)
    seen(T0 + 60, train)  # the same pod again: only last_seen moves
    seen(T0 + 60, train)  # a replayed batch changes nothing
    assert _held(empty) == [(A.uuid, "ml", "train-0", "pytorch", T0, None)]
    assert empty.read_assignments()["last_seen"].tolist() == [T0 + 60]
    seen(T0 + 120)  # empty labels: unassigned
    seen(T0 + 180, ("ml", "infer-1", "triton"), ("ml", "infer-2", "triton"))  # time-sliced
    assert _held(empty) == [
        (A.uuid, "ml", "train-0", "pytorch", T0, T0 + 120),
        (A.uuid, "ml", "infer-1", "triton", T0 + 180, None),
        (A.uuid, "ml", "infer-2", "triton", T0 + 180, None),
    ]
    assert [r[2] for r in _held(empty, start=T0 + 150)] == ["infer-1", "infer-2"]
    assert [r[2] for r in _held(empty, end=T0 + 150)] == ["train-0"]
    assert _held(empty, uuids=[B.uuid]) == []


def test_node_versions_read_back_by_hostname(empty: Store) -> None:
    empty.write_batch(Batch(T0, nodes=(NodeInfo(T0, "node1", "550.54.15"),)))
    empty.write_batch(Batch(T0 + 60, nodes=(NodeInfo(T0 + 60, "node1", "", "12.4"),)))
    empty.write_batch(Batch(T0 + 90, nodes=(NodeInfo(T0 + 90, "node2", "580.105.08", "13.0"),)))
    got = empty.read_nodes(hostnames=["node1"])
    assert got[["hostname", "driver_version", "cuda_driver_version"]].values.tolist() == [
        ["node1", "550.54.15", "12.4"]  # an unknown ("") never erases a known version
    ]
    assert got[["first_ts", "last_ts"]].values.tolist() == [[T0, T0 + 60]]
    assert empty.read_nodes()["hostname"].tolist() == ["node1", "node2"]


def test_mig_instances_are_kept_under_their_parent_and_never_counted_as_gpus(
    empty: Store,
) -> None:
    mig = A._replace(uuid=mig_uuid(A.uuid, "3"), model="H100 MIG 1g.10gb")
    samples = (Sample(T0, A, {"gpu_temp_c": 50.0}), Sample(T0, mig, {"gr_engine_active": 0.5}))
    empty.write_batch(Batch(T0, samples, assignments=(Assignment(T0, mig, "ml", "p", "c"),)))
    assert empty.gpus()["uuid"].tolist() == [A.uuid]
    assert empty.read_samples()["uuid"].tolist() == [A.uuid]
    assert empty.read_samples(hostnames=["node1"])["uuid"].tolist() == [A.uuid]
    assert empty.read_window(start=T0, end=T0 + 1)["uuid"].tolist() == [A.uuid]
    inst = empty.mig_instances()
    assert inst[["uuid", "parent_uuid", "model"]].values.tolist() == [
        [mig.uuid, A.uuid, "H100 MIG 1g.10gb"]
    ]
    got = empty.read_samples(uuids=[mig.uuid], fields=["gr_engine_active"])
    assert got["gr_engine_active"].tolist() == [0.5]
    assert empty.read_assignments()["uuid"].tolist() == [mig.uuid]
