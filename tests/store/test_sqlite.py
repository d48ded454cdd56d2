"""SqliteStore: round trips, missing values, idempotency, filters, rollups and retention, the
schema version, and a reader working while another process writes."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest

from gpuwarden.errors import ConfigError, InputError, SchemaError, StoreError
from gpuwarden.store import open_store
from gpuwarden.store._schema import SCHEMA_VERSION
from gpuwarden.store.base import Store
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import (
    FIELD_NAMES,
    FRAME_ID_COLUMNS,
    Batch,
    Event,
    Failure,
    GpuId,
    Sample,
    samples_to_frame,
)

A = GpuId("node1", 0, "GPU-aaaa", "00000000:1B:00.0", "H100", "rack1")
B = GpuId("node1", 1, "GPU-bbbb", "00000000:2B:00.0", "H100", "rack1")
C = GpuId("node2", 0, "GPU-cccc", "00000000:1B:00.0", "A100", "rack2")
T0 = 1_714_564_800.0  # 2024-05-01T12:00:00Z, on an hour boundary


@pytest.fixture
def store():
    s = SqliteStore()
    yield s
    s.close()


def _samples(gpus=(A, B), steps=3, step_s=10.0, t0=T0):
    return [
        Sample(
            t0 + k * step_s, g, {"gpu_temp_c": 40.0 + k + g.index, "ecc_sbe_volatile_total": 0.0}
        )
        for k in range(steps)
        for g in gpus
    ]


def test_implements_the_protocol_and_opens_by_url(tmp_path, monkeypatch):
    with SqliteStore() as plain:
        assert isinstance(plain, Store)
    memory = open_store("sqlite:///:memory:")
    assert isinstance(memory, SqliteStore) and memory.path == ":memory:"
    absolute = open_store(f"sqlite:///{tmp_path}/abs.db?retention=7d&rollup_retention=30d")
    assert absolute.path == f"{tmp_path}/abs.db" and (tmp_path / "abs.db").exists()
    assert absolute.retention_s == 7 * 86400 and absolute.rollup_retention_s == 30 * 86400
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///rel.db?busy_timeout=5")
    assert (tmp_path / "rel.db").exists() and relative.busy_timeout_s == 5
    bare = open_store("bare.db")
    assert (tmp_path / "bare.db").exists() and isinstance(bare, SqliteStore)
    for s in (memory, absolute, relative, bare):
        s.close()


@pytest.mark.parametrize(
    "url, problem",
    [
        ("sqlite:///x.db?retention=forever", "not a duration"),
        ("sqlite:///x.db?keep=1", "unknown parameter 'keep'"),
        ("sqlite://host/x.db", "no host"),
        ("sqlite:///", "names no database"),
        ("sqlite:///x.db?retention=0", "must be positive"),
    ],
)
def test_bad_urls_say_why(url, problem):
    with pytest.raises(ConfigError, match=problem):
        SqliteStore.from_url(url)


def test_batch_round_trip_matches_samples_to_frame(store):
    samples = _samples()
    event = Event(T0 + 5, B, "xid", 79, "fell off the bus")
    store.write_batch(Batch(T0, tuple(samples), (event,)))
    got = store.read_samples()
    want = samples_to_frame(samples).sort_values(["ts", "hostname", "gpu"], ignore_index=True)
    pd.testing.assert_frame_equal(got, want)
    events = store.read_events()
    assert events.to_dict("records") == [
        {"ts": T0 + 5, "hostname": "node1", "gpu": 1, "uuid": "GPU-bbbb", "kind": "xid",
         "code": 79, "detail": "fell off the bus"}
    ]  # fmt: skip


def test_nan_stays_nan_and_zero_stays_zero(store):
    frame = samples_to_frame(
        [Sample(T0, A, {"gpu_temp_c": 0.0, "ecc_dbe_volatile_total": 0.0}), Sample(T0, B, {})]
    )
    store.write_frame(frame)
    got = store.read_samples()
    assert got.loc[0, "gpu_temp_c"] == 0.0 and got.loc[0, "ecc_dbe_volatile_total"] == 0.0
    assert got.loc[0, ["mem_temp_c", "power_w"]].isna().all()
    assert got.loc[1, list(FIELD_NAMES)].isna().all()
    assert list(got.columns) == [*FRAME_ID_COLUMNS, *FIELD_NAMES]
    assert (got[list(FIELD_NAMES)].dtypes == np.float64).all()


def test_counter_reset_is_stored_as_read(store):
    readings = [5.0, 7.0, 0.0, 2.0]  # the driver reloaded between the 2nd and 3rd reading
    samples = [
        Sample(T0 + 10 * k, A, {"ecc_sbe_volatile_total": v}) for k, v in enumerate(readings)
    ]
    store.write_frame(samples_to_frame(samples))
    assert store.read_samples()["ecc_sbe_volatile_total"].tolist() == readings


def test_writing_the_same_rows_twice_keeps_one_and_the_last_write_wins(store):
    frame = samples_to_frame(_samples())
    assert store.write_frame(frame) == 6
    store.write_frame(frame)
    store.write_batch(Batch(T0, tuple(_samples())))
    assert len(store.read_samples()) == 6
    corrected = frame.copy()
    corrected.loc[0, "gpu_temp_c"] = 99.0
    store.write_frame(corrected.iloc[[0]])
    got = store.read_samples(uuids=[frame.loc[0, "uuid"]], end=T0 + 1)
    assert got["gpu_temp_c"].tolist() == [99.0]
    event = Event(T0, A, "xid", 48)
    assert store.write_events([event, event]) == 1
    assert store.write_events([event, Event(T0, A, "gpu_lost")]) == 1
    assert len(store.read_events()) == 2


def test_filters_by_time_gpu_host_and_field(store):
    store.write_frame(samples_to_frame(_samples(gpus=(A, B, C), steps=4)))
    window = store.read_samples(start=T0 + 10, end=T0 + 30)
    assert sorted(set(window["ts"])) == [T0 + 10, T0 + 20]  # [start, end)
    assert set(store.read_samples(uuids=["GPU-cccc"])["uuid"]) == {"GPU-cccc"}
    node1 = store.read_samples(hostnames=["node1"])
    assert set(node1["uuid"]) == {"GPU-aaaa", "GPU-bbbb"}
    assert node1[["ts", "gpu"]].apply(tuple, axis=1).is_monotonic_increasing
    both = store.read_samples(hostnames=["node1"], uuids=["GPU-bbbb", "GPU-cccc"])
    assert set(both["uuid"]) == {"GPU-bbbb"}
    none = store.read_samples(uuids=[])
    assert none.empty and list(none.columns) == [*FRAME_ID_COLUMNS, *FIELD_NAMES]
    few = store.read_samples(fields=["power_w", "gpu_temp_c"])
    assert list(few.columns) == [*FRAME_ID_COLUMNS, "power_w", "gpu_temp_c"]
    with pytest.raises(InputError, match="unknown field.*gpu_temp"):
        store.read_samples(fields=["gpu_temp"])


def test_rows_sort_by_time_then_host_then_gpu(store):
    shuffled = samples_to_frame(_samples(gpus=(C, B, A), steps=2)).sample(frac=1, random_state=3)
    store.write_frame(shuffled)
    got = store.read_samples()
    assert got[["ts", "hostname", "gpu"]].values.tolist() == [
        [T0, "node1", 0], [T0, "node1", 1], [T0, "node2", 0],
        [T0 + 10, "node1", 0], [T0 + 10, "node1", 1], [T0 + 10, "node2", 0],
    ]  # fmt: skip


def test_gpus_table_tracks_first_last_and_the_newest_slot(store):
    store.write_frame(samples_to_frame(_samples(gpus=(A,), steps=2)))
    moved = GpuId("node9", 3, A.uuid, "", "H100", "")  # same board, new slot, no rack known
    store.write_events([Event(T0 + 100, moved, "gpu_recovered")])
    store.write_events([Event(T0 - 100, A, "xid", 13)])  # an old event changes no slot
    row = store.gpus().iloc[0].to_dict()
    assert row == {"hostname": "node9", "gpu": 3, "uuid": A.uuid, "pci_bus_id": A.pci_bus_id,
                   "model": "H100", "rack": "rack1", "first_ts": T0 - 100, "last_ts": T0 + 100}  # fmt: skip
    assert store.read_samples()["hostname"].unique().tolist() == ["node9"]


def test_failures_round_trip_and_replace(store):
    store.write_failures([Failure(T0, A, "xid79", precursor_start_ts=T0 - 3600, repair_s=600.0,
                                  xid=79), Failure(T0 + 1, B, "thermal")])  # fmt: skip
    store.write_failures([Failure(T0 + 1, B, "thermal", repair_s=60.0)], source="test")
    got = store.read_failures()
    assert got.columns.tolist() == ["ts", "hostname", "gpu", "uuid", "kind",
                                    "precursor_start_ts", "repair_s", "xid"]  # fmt: skip
    assert got["xid"].dtype == "Int64" and got["xid"].isna().tolist() == [False, True]
    assert got["repair_s"].tolist() == [600.0, 60.0]
    assert got["precursor_start_ts"].iloc[0] == T0 - 3600 and math.isnan(got.iloc[1, 5])
    assert len(store.read_failures(start=T0 + 1)) == 1


def test_events_filter_by_kind_and_uuid(store):
    store.write_events([Event(T0, A, "xid", 79), Event(T0 + 1, B, "gpu_lost"),
                        Event(T0 + 2, A, "gpu_recovered")])  # fmt: skip
    assert store.read_events(kinds=["xid", "gpu_lost"])["kind"].tolist() == ["xid", "gpu_lost"]
    assert store.read_events(uuids=[A.uuid], start=T0 + 1)["kind"].tolist() == ["gpu_recovered"]
    assert store.read_events(kinds=["gpu_lost"])["code"].isna().all()


def test_bad_frames_are_refused_and_lose_nothing(store):
    good = samples_to_frame(_samples(steps=1))
    store.write_frame(good)
    bad_ts = good.assign(ts=[T0, np.nan])
    with pytest.raises(InputError, match="'ts' is not a finite time in row 1"):
        store.write_frame(bad_ts)
    with pytest.raises(InputError, match="lacks column.*uuid"):
        store.write_frame(good.drop(columns=["uuid"]))
    with pytest.raises(InputError, match="'power_w' is not numeric"):
        store.write_frame(good.assign(power_w=["300", "lots"]))
    with pytest.raises(InputError, match="'uuid' is empty in row 0"):
        store.write_frame(good.assign(uuid=["", "GPU-x"]))
    with pytest.raises(InputError, match="'gpu' is not a GPU index"):
        store.write_frame(good.assign(gpu=[0.5, 1]))
    pd.testing.assert_frame_equal(store.read_samples(), good)


def test_a_failed_batch_is_rolled_back_whole(store):
    broken = Sample(T0, A, {"gpu_temp_c": object()})  # a collector bug: not a number
    with pytest.raises(StoreError, match="write_batch"):
        store.write_batch(Batch(T0, (broken,), (Event(T0, A, "xid", 79),)))
    assert store.gpus().empty and store.read_events().empty
    # the id the rolled-back GPU had is given to the next one; nothing may point at A
    store.write_batch(Batch(T0, (Sample(T0, B, {"gpu_temp_c": 40.0}),)))
    store.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": 50.0}),)))
    got = store.read_samples()
    assert got[["uuid", "gpu_temp_c"]].values.tolist() == [[A.uuid, 50.0], [B.uuid, 40.0]]


def test_unknown_frame_columns_are_ignored_with_a_warning(store):
    frame = samples_to_frame(_samples(steps=1)).assign(label=1, rack="r7")
    with pytest.warns(UserWarning, match="ignoring frame column.*label"):
        store.write_frame(frame)
    assert set(store.gpus()["rack"]) == {"r7"}


def test_categorical_text_columns_as_the_simulator_writes_them(store):
    frame = samples_to_frame(_samples(gpus=(A, B, C), steps=2))
    text = ["hostname", "uuid", "model", "pci_bus_id"]
    store.write_frame(frame.astype({c: "category" for c in text}))
    pd.testing.assert_frame_equal(store.read_samples(), frame)


def test_write_frame_shows_progress(store, capsys):
    store.chunk_rows = 2  # three commits for six rows
    assert store.write_frame(samples_to_frame(_samples()), progress=True) == 6
    assert "6/6" in capsys.readouterr().err


def _gauge_and_counter_rows():
    # GPU A every 60 s for two hours; temperature climbs, a counter resets at minute 7.
    rows = []
    for k in range(120):
        ts = T0 + 60 * k
        ecc = float(k) if k < 7 else float(k - 7)
        values = {"gpu_temp_c": 50.0 + k % 5, "ecc_sbe_volatile_total": ecc,
                  "clock_event_reasons": float(1 << (k % 3)), "remapped_rows_pending": 0.0}  # fmt: skip
        if k == 3:
            values["gpu_temp_c"] = math.nan  # a missed reading is not a zero in the mean
            values["remapped_rows_pending"] = 1.0
        rows.append(Sample(ts, A, values))
    return rows


def test_rollups_mean_max_last_and_bitwise_or(store):
    store.write_frame(samples_to_frame(_gauge_and_counter_rows()))
    store.compact(now=T0 + 7200)
    five = store.read_samples(resolution_s=300, fields=[
        "gpu_temp_c", "gpu_temp_c_max", "ecc_sbe_volatile_total", "clock_event_reasons",
        "remapped_rows_pending", "remapped_rows_pending_max", "power_w"])  # fmt: skip
    assert len(five) == 24 and five["ts"].iloc[1] == T0 + 300
    first, second = five.iloc[0], five.iloc[1]
    assert first["gpu_temp_c"] == pytest.approx((50 + 51 + 52 + 54) / 4)  # minute 3 missing
    assert first["gpu_temp_c_max"] == 54.0
    assert first["ecc_sbe_volatile_total"] == 4.0  # last value, not a sum or max
    assert second["ecc_sbe_volatile_total"] == 2.0  # after the reset: as read
    assert first["clock_event_reasons"] == 7.0  # bits 1|2|4 seen during the bucket
    assert first["remapped_rows_pending"] == pytest.approx(0.2)
    assert first["remapped_rows_pending_max"] == 1.0
    assert five["power_w"].isna().all()  # never read stays missing
    hourly = store.read_samples(resolution_s=3600)
    assert hourly["ts"].tolist() == [T0, T0 + 3600]
    assert hourly["ecc_sbe_volatile_total"].tolist() == [52.0, 112.0]
    with pytest.raises(InputError, match="rollups exist for 300, 3600"):
        store.read_samples(resolution_s=60)


def test_compact_keeps_rollups_past_raw_retention_and_drops_them_later(tmp_path):
    store = SqliteStore(tmp_path / "r.db", retention_s=86400, rollup_retention_s=10 * 86400)
    store.write_frame(samples_to_frame(_gauge_and_counter_rows()))
    store.compact(now=T0 + 2 * 86400)
    assert store.read_samples().empty
    hourly = store.read_samples(resolution_s=3600, fields=["ecc_sbe_volatile_total"])
    assert hourly["ecc_sbe_volatile_total"].tolist() == [52.0, 112.0]
    store.compact(now=T0 + 2 * 86400)  # again: nothing changes
    assert len(store.read_samples(resolution_s=300)) == 24
    store.compact(now=T0 + 11 * 86400)
    assert store.read_samples(resolution_s=300).empty
    store.close()


def test_retention_keeps_whole_hours_and_late_writes_are_rolled_up_again(store):
    store.retention_s = 3600
    store.write_frame(samples_to_frame(_gauge_and_counter_rows()))
    store.compact(now=T0 + 7200 + 1800)  # cutoff T0 + 5400, rounded down to T0 + 3600
    assert store.read_samples()["ts"].min() == T0 + 3600
    late = Sample(T0 + 3600 + 30, A, {"gpu_temp_c": 90.0})
    store.write_batch(Batch(late.ts, (late,)))
    store.compact(now=T0 + 7200 + 1800)
    bucket = store.read_samples(resolution_s=300, start=T0 + 3600, end=T0 + 3601,
                                fields=["gpu_temp_c_max"])  # fmt: skip
    assert bucket["gpu_temp_c_max"].tolist() == [90.0]


def test_schema_version_and_newer_files_are_refused(tmp_path):
    path = tmp_path / "v.db"
    with SqliteStore(path) as store:
        assert store.schema_version() == SCHEMA_VERSION
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaError, match=f"version {SCHEMA_VERSION + 1}, newer"):
        SqliteStore(path)


def test_a_new_catalogue_field_is_added_to_an_old_file(tmp_path):
    path = tmp_path / "m.db"
    with SqliteStore(path) as store:
        store.write_frame(samples_to_frame(_samples(steps=1)))
    conn = sqlite3.connect(path)  # as if the file predates the clock_event_reasons field
    conn.execute("ALTER TABLE samples DROP COLUMN clock_event_reasons")
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        got = store.read_samples()
        assert got["clock_event_reasons"].isna().all() and len(got) == 2
        assert got["gpu_temp_c"].notna().all()


def test_a_version_1_file_is_upgraded_in_place_and_keeps_its_rows(tmp_path):
    path = tmp_path / "v1.db"
    with SqliteStore(path) as store:
        store.write_frame(samples_to_frame(_gauge_and_counter_rows()))
        store.compact(now=T0 + 2 * 86400)
        before = store.read_samples()
        hourly_before = store.read_samples(resolution_s=3600)
    conn = sqlite3.connect(path)  # what gpuwarden wrote before the profiling fields existed
    for table in ("samples", "rollups"):
        for name in ("gr_engine_active", "tensor_active"):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {name}")
    conn.execute("DROP TABLE verdicts")
    conn.execute("DROP TABLE gpu_assignments")
    conn.execute("DROP TABLE nodes")
    conn.execute("DROP TABLE rejections")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        assert store.schema_version() == 5
        assert store.read_assignments().empty and store.read_nodes().empty
        assert store.read_verdicts().empty  # no verdicts yet: the dashboard says so
        assert store.read_rejections().empty
        after = store.read_samples()
        assert len(after) == len(before) > 0
        assert after["gr_engine_active"].isna().all() and after["tensor_active"].isna().all()
        kept = [c for c in before.columns if c not in ("gr_engine_active", "tensor_active")]
        pd.testing.assert_frame_equal(after[kept], before[kept])
        assert len(store.read_samples(resolution_s=3600)) == len(hourly_before)
        new = Sample(T0 + 9000, A, {"gr_engine_active": 0.82, "tensor_active": 0.41})
        store.write_batch(Batch(new.ts, (new,)))
        row = store.read_samples(start=new.ts, fields=["gr_engine_active", "tensor_active"])
        assert row[["gr_engine_active", "tensor_active"]].iloc[0].tolist() == [0.82, 0.41]


def test_files_that_are_not_stores_are_refused(tmp_path):
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.close()
    with pytest.raises(StoreError, match="not a gpuwarden store"):
        SqliteStore(other)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(StoreError, match="junk.db"):
        SqliteStore(junk)
    with pytest.raises(StoreError, match="cannot open"):
        SqliteStore(tmp_path / "no" / "such" / "dir.db")


def test_a_closed_store_says_so():
    store = SqliteStore()
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.read_samples()


def test_reader_sees_only_committed_rows_while_a_writer_holds_the_lock(tmp_path):
    path = tmp_path / "wal.db"
    store = SqliteStore(path)
    store.write_frame(samples_to_frame(_samples(steps=1)))
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO samples (ts, gpu_id) VALUES (?, 1)", (T0 + 999,))
    reader = SqliteStore(path, busy_timeout_s=0.1)  # would fail fast if reads had to wait
    assert len(reader.read_samples()) == 2
    with pytest.raises(StoreError, match="locked by another writer"):
        reader.write_frame(samples_to_frame(_samples(steps=1, t0=T0 + 50)))
    writer.execute("COMMIT")
    assert len(reader.read_samples()) == 3
    for s in (store, reader):
        s.close()
    writer.close()


_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from gpuwarden.store.sqlite import SqliteStore
    from gpuwarden.telemetry import Batch, GpuId, Sample
    path, batches, half, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    store = SqliteStore(path)
    gpus = [GpuId("node%d" % (i // 8), i % 8, "GPU-%04d" % i) for i in range(64)]
    for k in range(batches):
        if k == batches // 2:
            half.touch()  # let the reader check a known state, then write on while it reads
            while not go.exists():
                time.sleep(0.01)
        ts = 1.7e9 + 10 * k
        store.write_batch(Batch(ts, tuple(Sample(ts, g, {"gpu_temp_c": 50.0 + k}) for g in gpus)))
    store.close()
    """
)


def test_a_reader_process_reads_while_a_writer_process_writes(tmp_path):
    path, half, go = tmp_path / "live.db", tmp_path / "half", tmp_path / "go"
    SqliteStore(path).close()  # create the schema first, so both sides open a current file
    batches = 200
    args = [sys.executable, "-c", _WRITER, str(path), str(batches), str(half), str(go)]
    writer = subprocess.Popen(args)
    reader = SqliteStore(path)
    try:
        while not half.exists():
            assert writer.poll() is None, "the writer died"
            time.sleep(0.01)
        assert len(reader.read_samples()) == 64 * (batches // 2)
        go.touch()
        counts = []
        while writer.poll() is None:
            got = reader.read_samples(fields=["gpu_temp_c"])
            counts.append(len(got))
            # A batch is one transaction: a reader sees all 64 GPUs of a timestamp or none.
            assert len(got) % 64 == 0
            assert (got.groupby("ts")["uuid"].count() == 64).all()
        assert writer.wait() == 0
        assert counts == sorted(counts)
        assert len(reader.read_samples()) == 64 * batches
    finally:
        if writer.poll() is None:
            writer.kill()
        reader.close()


def test_devices_that_are_not_gpus_keep_their_events_but_are_no_gpus(tmp_path):
    """An NVSwitch's SXid is filed under the switch (index -1): its event reads back, and the
    inventory, which panels and pages count, lists GPUs only."""
    from gpuwarden.collectors.kmsg import switch_id
    from gpuwarden.telemetry import Event, GpuId

    switch = switch_id("node7", "0000:05:00.0")
    with SqliteStore(tmp_path / "s.db") as store:
        store.write_events(
            [
                Event(T0, switch, "sxid", 20034, "LTSSM Fault Up"),
                Event(T0, GpuId("node7", 0, "GPU-a"), "xid", 79, ""),
            ]
        )
        assert list(store.gpus()["uuid"]) == ["GPU-a"]
        sx = store.read_events(kinds=["sxid"])
        assert (sx["hostname"].iloc[0], int(sx["code"].iloc[0])) == ("node7", 20034)
