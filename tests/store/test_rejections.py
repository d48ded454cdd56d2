"""The SQLite store keeps readings rejected as impossible: written with a batch or alone, read
back counted per GPU, field and reason, idempotent, dropped with the raw samples, migrated in."""

from __future__ import annotations

import sqlite3

from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Batch, GpuId, Rejection, Sample

T4 = GpuId("node1", 0, "GPU-t4", "00000000:37:00.0", "Tesla T4")
H100 = GpuId("node1", 1, "GPU-h100", "00000000:2B:00.0", "NVIDIA H100 80GB HBM3")
T0 = 1_714_564_800.0


def _batch(ts: float) -> Batch:
    return Batch(
        ts,
        samples=(Sample(ts, T4, {"gpu_temp_c": 74.0}), Sample(ts, H100, {"gpu_temp_c": 60.0})),
        rejected=(
            Rejection(ts, T4, "mem_temp_c", "no_sensor", 0.0),
            Rejection(ts, H100, "power_w", "out_of_range", 5000.0),
        ),
        screened=True,
    )


def test_rejections_are_stored_with_the_batch_and_counted_per_gpu_and_field() -> None:
    with SqliteStore() as store:
        for k in range(3):
            store.write_batch(_batch(T0 + 15 * k))
        store.write_batch(_batch(T0))  # a replayed batch changes nothing
        store.write_rejections([Rejection(T0 + 60, T4, "mem_temp_c", "no_sensor", 0.0)])
        table = store.read_rejections()
        assert table[["hostname", "gpu", "field", "reason", "count"]].values.tolist() == [
            ["node1", 0, "mem_temp_c", "no_sensor", 4],
            ["node1", 1, "power_w", "out_of_range", 3],
        ]
        assert table["first_ts"].tolist() == [T0, T0]
        assert table["last_ts"].tolist() == [T0 + 60, T0 + 30]
        assert store.read_rejections(start=T0 + 30)["count"].tolist() == [2, 1]
        assert store.read_rejections(end=T0).empty


def test_rejections_go_with_the_raw_samples_past_retention() -> None:
    with SqliteStore(retention_s=86400) as store:
        store.write_batch(_batch(T0))
        store.write_batch(_batch(T0 + 3 * 86400))
        store.compact(now=T0 + 3 * 86400 + 60)
        assert store.read_rejections()["first_ts"].tolist() == [T0 + 3 * 86400] * 2


def test_a_version_4_file_gets_an_empty_rejections_table(tmp_path) -> None:
    path = tmp_path / "v4.db"
    SqliteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE rejections")
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        assert store.schema_version() == 5
        assert store.read_rejections().empty
        store.write_batch(_batch(T0))
        assert store.read_rejections()["count"].sum() == 2
