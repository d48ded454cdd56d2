"""Loading telemetry, Xid and failure files: names, missing values, bad rows by line number,
gzip and Parquet, and files that cannot be read at all."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuwarden.errors import InputError
from gpuwarden.ingest import (
    IngestReport,
    IngestWarning,
    ingest_failures,
    ingest_smi_csv,
    ingest_telemetry,
    ingest_xids,
)
from gpuwarden.store.sqlite import SqliteStore

DATA = Path(__file__).parent / "data" / "ingest"
T0 = 1_714_564_800.0  # 2024-05-01T12:00:00Z
NAN = float("nan")


@pytest.fixture
def store():
    s = SqliteStore()
    yield s
    s.close()


def _by_gpu(store: SqliteStore, field: str) -> dict[str, list[float]]:
    frame = store.read_samples()
    return {uuid: rows[field].tolist() for uuid, rows in frame.groupby("uuid")}


def _same(a: list[float], b: list[float]) -> bool:
    return np.array_equal(np.array(a), np.array(b), equal_nan=True)


def test_telemetry_csv_maps_names_and_keeps_missing_missing(store):
    with pytest.warns(IngestWarning, match="ignoring unknown column.*container"):
        report = ingest_telemetry(store, DATA / "telemetry.csv")
    assert report == IngestReport(rows_stored=7, bad_rows=[], unknown_columns=["container"])
    # RFC 3339 (Z, +02:00, fractional) and Unix seconds (int, float) give the same clock
    assert _by_gpu(store, "ts") == {
        "GPU-aaaa": [T0, T0 + 10, T0 + 20, T0 + 30],
        "GPU-bbbb": [T0, T0 + 10, T0 + 20],
    }
    temp = _by_gpu(store, "gpu_temp_c")  # DCGM_FI_DEV_GPU_TEMP
    assert temp["GPU-aaaa"] == [41, 42, 45, 44] and _same(temp["GPU-bbbb"], [43, NAN, 44])
    reasons = _by_gpu(store, "clock_event_reasons")  # the legacy DCGM_FI_DEV_CLOCK_THROTTLE_REASONS
    assert reasons["GPU-aaaa"] == [0, 0, 32, 0] and _same(reasons["GPU-bbbb"], [4, NAN, 4])
    assert _same(_by_gpu(store, "mem_temp_c")["GPU-bbbb"], [NAN, NAN, 53])  # our own name
    ecc = _by_gpu(store, "ecc_sbe_volatile_total")
    assert ecc == {"GPU-aaaa": [5, 7, 0, 2], "GPU-bbbb": [0, 0, 1]}  # reset kept, 0 stays 0
    assert _same(_by_gpu(store, "power_w")["GPU-bbbb"], [NAN, NAN, 310])
    assert store.read_samples()["fb_used_mib"].isna().all()  # not in the file: missing
    gpus = store.gpus()
    assert gpus["model"].unique().tolist() == ["NVIDIA H100 80GB HBM3"]
    assert gpus["pci_bus_id"].tolist() == ["00000000:1B:00.0", "00000000:2B:00.0"]


GPU_INDEX = "a GPU index (an integer 0..4294967295)"
BAD_TELEMETRY = [
    (3, "timestamp 'yesterday' is neither RFC 3339 nor Unix seconds"),
    (7, "missing UUID"),
    (8, "missing hostname"),
    (9, f"gpu 'x' is not {GPU_INDEX}"),
    (11, "expected 7 fields, saw 8"),
    (13, f"gpu '1.5' is not {GPU_INDEX}"),
    (14, "timestamp 1714564800000 looks like milliseconds; expected Unix seconds"),
]


@pytest.mark.parametrize("chunk_rows", [3, 100_000])
def test_bad_telemetry_rows_are_reported_by_line_and_good_rows_stored(store, chunk_rows):
    report = ingest_telemetry(store, DATA / "telemetry_bad.csv", chunk_rows=chunk_rows)
    assert report.bad_rows == BAD_TELEMETRY  # line 10 is blank: no record, no report
    assert report.bad_rows_total == len(BAD_TELEMETRY) and report.rows_stored == 6
    got = store.read_samples()
    assert got["ts"].tolist() == [T0, T0 + 10, T0 + 20, T0 + 30, T0 + 80, T0 + 100]
    # line 5's 'hot' and line 6's negative counter: missing and counted, the rest of the row kept
    assert _same(got["gpu_temp_c"].tolist(), [41, 42, NAN, 43, 44, 45])
    assert _same(got["ecc_sbe_volatile_total"].tolist(), [5, 5, 5, NAN, 6, 7])
    assert report.rejected == {
        ("ecc_sbe_volatile_total", "out_of_range"): 1,
        ("gpu_temp_c", "not_a_number"): 1,
    }
    assert store.read_rejections()[["field", "reason", "count"]].values.tolist() == [
        ["ecc_sbe_volatile_total", "out_of_range", 1],
        ["gpu_temp_c", "not_a_number", 1],
    ]


def test_gzip_reads_like_plain_csv(store, tmp_path):
    packed = tmp_path / "telemetry.csv.gz"
    packed.write_bytes(gzip.compress((DATA / "telemetry_bad.csv").read_bytes()))
    report = ingest_telemetry(store, packed)
    assert report.bad_rows == BAD_TELEMETRY and report.rows_stored == 6


def _typed(path: Path) -> pd.DataFrame:
    """The telemetry file as a typed table, the way a Parquet export stores it."""
    raw = pd.read_csv(path).drop(columns=["container"])
    stamps = [
        pd.Timestamp(float(t), unit="s", tz="UTC") if t[0].isdigit() and "-" not in t
        else pd.Timestamp(t).tz_convert("UTC")
        for t in raw["timestamp"]
    ]  # fmt: skip
    return raw.assign(timestamp=pd.DatetimeIndex(stamps))


def test_parquet_reads_like_csv(tmp_path):
    parquet = tmp_path / "telemetry.parquet"
    _typed(DATA / "telemetry.csv").to_parquet(parquet)
    with SqliteStore() as from_csv, SqliteStore() as from_parquet:
        with pytest.warns(IngestWarning):
            ingest_telemetry(from_csv, DATA / "telemetry.csv")
        report = ingest_telemetry(from_parquet, parquet)
        assert report == IngestReport(rows_stored=7)
        pd.testing.assert_frame_equal(from_parquet.read_samples(), from_csv.read_samples())


def test_parquet_bad_rows_count_lines_as_a_csv_export_would(store, tmp_path):
    table = _typed(DATA / "telemetry.csv")
    table.loc[2, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] = -1.0
    table.loc[4, "UUID"] = None
    table.to_parquet(tmp_path / "t.parquet")
    report = ingest_telemetry(store, tmp_path / "t.parquet", chunk_rows=2)
    assert report.bad_rows == [(6, "missing UUID")]
    assert report.rows_stored == 6
    assert report.rejected == {("ecc_sbe_volatile_total", "out_of_range"): 1}


def _truncated_gzip(tmp_path: Path) -> Path:
    path = tmp_path / "cut.csv.gz"
    whole = gzip.compress((DATA / "telemetry.csv").read_bytes() * 50)
    path.write_bytes(whole[: len(whole) - 40])
    return path


def _file(name: str, data: bytes):
    def make(tmp_path: Path) -> Path:
        (tmp_path / name).write_bytes(data)
        return tmp_path / name

    return make


@pytest.mark.parametrize(
    "make, problem",
    [
        (lambda p: p / "absent.csv", "cannot read"),
        (_file("empty.csv", b""), "the file is empty"),
        (_file("plain.csv.gz", b"timestamp\n"), "not gzip-compressed"),
        (_truncated_gzip, "bad gzip file"),
        (_file("x.parquet", b"timestamp\n"), "not a Parquet file"),
        (_file("img.csv", b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x80" * 64), "not a readable CSV"),
        (_file("x.csv", b"when,where,value\n1,n1,3\n"), "missing required column"),
    ],
)
def test_unreadable_files_raise_and_store_nothing(store, tmp_path, make, problem):
    path = make(tmp_path)
    with pytest.raises(InputError, match=problem) as info:
        ingest_telemetry(store, path)
    assert path.name in str(info.value)
    assert store.read_samples().empty and store.gpus().empty


def test_missing_columns_are_named(store, tmp_path):
    path = tmp_path / "noid.csv"
    path.write_text("timestamp,hostname,gpu,DCGM_FI_DEV_GPU_TEMP\n1714564800,n1,0,40\n")
    with pytest.raises(InputError, match=r"noid.csv: missing required column UUID"):
        ingest_telemetry(store, path)
    twice = tmp_path / "twice.csv"
    twice.write_text("ts,timestamp,hostname,gpu,UUID\n")
    with pytest.raises(InputError, match="'ts' and 'timestamp' both give timestamp"):
        ingest_telemetry(store, twice)


def test_a_name_and_its_legacy_alias_merge(store, tmp_path):
    path = tmp_path / "both.csv"
    path.write_text(
        "timestamp,hostname,gpu,UUID,DCGM_FI_DEV_CLOCKS_EVENT_REASONS,DCGM_FI_DEV_CLOCK_THROTTLE_REASONS\n"
        "1714564800,n1,0,GPU-a,4,\n"
        "1714564810,n1,0,GPU-a,,8\n"
        "1714564820,n1,0,GPU-a,1,1\n"
        "1714564830,n1,0,GPU-a,1,2\n"
    )
    report = ingest_telemetry(store, path)
    assert report.bad_rows == [
        (
            5,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS and DCGM_FI_DEV_CLOCK_THROTTLE_REASONS disagree (1 vs 2)",
        )
    ]
    assert store.read_samples()["clock_event_reasons"].tolist() == [4, 8, 1]


def test_ingesting_twice_changes_nothing(store):
    with pytest.warns(IngestWarning):
        ingest_telemetry(store, DATA / "telemetry.csv")
        first = store.read_samples()
        ingest_telemetry(store, DATA / "telemetry.csv")
    pd.testing.assert_frame_equal(store.read_samples(), first)
    ingest_xids(store, DATA / "xids.csv")
    ingest_xids(store, DATA / "xids.csv")
    assert len(store.read_events()) == 3


def test_progress_bar(store, tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text((DATA / "telemetry_bad.csv").read_text())
    ingest_telemetry(store, path, progress=True)
    assert "13rows" in capsys.readouterr().err.replace(" ", "")  # the malformed line is no row


def test_xids_become_events(store):
    report = ingest_xids(store, DATA / "xids.csv")
    assert report == IngestReport(rows_stored=3)
    events = store.read_events()
    assert events[["ts", "hostname", "gpu", "uuid", "kind", "code"]].values.tolist() == [
        [T0 + 300, "node1", 0, "GPU-aaaa", "xid", 79],
        [T0 + 300, "node1", 1, "GPU-bbbb", "xid", 48],
        [T0 + 360, "node2", 3, "GPU-cccc", "xid", 94],
    ]


def test_bad_xid_rows(store):
    report = ingest_xids(store, DATA / "xids_bad.csv")
    assert report.bad_rows == [
        (3, "missing xid"),
        (4, "xid 'seventy' is not an Xid number (an integer 0..4294967295)"),
        (5, "timestamp 'not-a-time' is neither RFC 3339 nor Unix seconds"),
        (6, f"gpu '-1' is not {GPU_INDEX}"),
    ]
    assert store.read_events()["code"].tolist() == [79, 31]


def test_failures(store):
    assert ingest_failures(store, DATA / "failures.csv") == IngestReport(rows_stored=2)
    report = ingest_failures(store, DATA / "failures_bad.csv")
    assert report.bad_rows == [
        (3, "missing kind"),
        (4, f"gpu 'zero' is not {GPU_INDEX}"),
        (5, "repair_s -5 is not a duration in seconds"),
    ]
    got = store.read_failures()
    assert got["kind"].tolist() == ["xid79_fell_off_bus", "dbe_row_remap_failure", "ecc"]
    assert got["repair_s"].tolist()[0] == 7200.0 and got["xid"].tolist()[0] == 79
    assert got["xid"].isna().tolist() == [False, True, True]
    assert got["precursor_start_ts"].isna().all()  # real records have no precursor time


def test_cells_are_read_as_typed(store, tmp_path):
    path = tmp_path / "cells.csv"
    path.write_text(
        "timestamp,hostname,gpu,UUID,DCGM_FI_DEV_GPU_TEMP,DCGM_FI_DEV_POWER_USAGE\n"
        "1714564800,007,0,GPU-a, 41 ,NaN\n"
        "1714564810,007,0,GPU-a,NA,300\n"
    )
    report = ingest_telemetry(store, path)
    assert report.bad_rows == []  # 'NA' is no number: missing and counted, the row kept
    assert report.rejected == {("gpu_temp_c", "not_a_number"): 1}  # 'NaN': missing, uncounted
    got = store.read_samples()
    assert got["hostname"].tolist() == ["007", "007"]  # a hostname is text, not the number 7
    assert _same(got["gpu_temp_c"].tolist(), [41.0, NAN])
    assert _same(got["power_w"].tolist(), [NAN, 300.0])


def test_sentinels_and_impossible_readings_in_a_csv_are_missing_and_counted(store, tmp_path):
    path = tmp_path / "sentinels.csv"
    path.write_text(
        "timestamp,hostname,gpu,UUID,modelName,DCGM_FI_DEV_GPU_TEMP,DCGM_FI_DEV_MEMORY_TEMP,"
        "power_w,energy_mj,DCGM_FI_DEV_GPU_UTIL\n"
        f"{T0:.0f},n1,0,GPU-t4,Tesla T4,74,0,68.2,2147483632,91\n"
        f"{T0:.0f},n1,1,GPU-h1,NVIDIA H100 80GB HBM3,60,9223372036854775794,140737488355330,"
        "9223372036854775808,2147483634\n"
        f"{T0 + 10:.0f},n1,1,GPU-h1,NVIDIA H100 80GB HBM3,61,9.223372036854776e+18,2000,"
        "5000,\n"
    )
    report = ingest_telemetry(store, path)
    assert report.bad_rows == [] and report.rows_stored == 3
    assert report.rejected == {
        ("mem_temp_c", "no_sensor"): 1,
        ("mem_temp_c", "sentinel"): 2,
        ("power_w", "sentinel"): 1,
        ("power_w", "out_of_range"): 1,  # 2000 W: above 2 x an H100's 700 W
        ("energy_mj", "sentinel"): 1,
        ("gpu_util_pct", "out_of_range"): 1,  # an int32 sentinel on DCGM's int64 utilisation
    }
    got = store.read_samples()
    assert got["gpu_temp_c"].tolist() == [74, 60, 61]  # every row kept
    assert got["energy_mj"].tolist()[0] == 2147483632  # an int64 counter: kept
    assert _same(got["mem_temp_c"].tolist(), [NAN, NAN, NAN])
    assert _same(got["power_w"].tolist(), [68.2, NAN, NAN])
    assert _same(got["gpu_util_pct"].tolist(), [91, NAN, NAN])
    counted = store.read_rejections()
    assert counted["count"].sum() == 7 and set(counted["uuid"]) == {"GPU-t4", "GPU-h1"}
    again = ingest_telemetry(store, path)  # loading it again changes nothing
    assert again.rejected == report.rejected and store.read_rejections()["count"].sum() == 7


SMI_LOG = """timestamp, index, uuid, pci.bus_id, name, temperature.gpu, temperature.memory, power.draw [W]
2026/01/01 00:00:00.000, 0, GPU-aaaa, 00000000:17:00.0, NVIDIA H100 80GB HBM3, 40, 50, 300.00 W
2026/01/01 00:00:00.000, 1, GPU-bbbb, 00000000:2A:00.0, NVIDIA H100 80GB HBM3, 41, 900, [N/A]
2026/01/01 00:01:00.000, 0, GPU-aaaa, 00000000:17:00.0, NVIDIA H100 80GB HBM3, 42, 51, 310.00 W
"""


def test_smi_csv_gzip_rejections_counted_and_a_reload_changes_nothing(store, tmp_path):
    path = tmp_path / "log.csv.gz"
    path.write_bytes(gzip.compress(SMI_LOG.encode()))
    report = ingest_smi_csv(store, path, host="n1", chunk_rows=2)
    assert (report.rows_stored, report.bad_rows, report.lines_read) == (3, [], 3)
    assert report.rejected == {("mem_temp_c", "out_of_range"): 1}  # 900 C
    assert _by_gpu(store, "gpu_temp_c") == {"GPU-aaaa": [40, 42], "GPU-bbbb": [41]}
    assert _same(_by_gpu(store, "power_w")["GPU-bbbb"], [NAN])
    assert _same(_by_gpu(store, "mem_temp_c")["GPU-bbbb"], [NAN])
    assert set(store.read_samples()["hostname"]) == {"n1"}
    ingest_smi_csv(store, path, host="n1")
    assert len(store.read_samples()) == 3


def test_smi_csv_that_is_not_one_names_the_file(store, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match=r"x\.csv: not nvidia-smi --format=csv"):
        ingest_smi_csv(store, path)
    assert len(store.read_samples()) == 0
