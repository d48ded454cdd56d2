"""Issue 15's ingest findings: one bad cell must not stop a load, a bad line is named by its
line in the file, impossible values never reach the store, and no traceback or numpy warning
reaches the user. Each test here failed on the code before the fix."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.ingest import ingest_telemetry, ingest_xids
from gpuwarden.store.sqlite import SqliteStore

T0 = 1_714_564_800  # 2024-05-01T12:00:00Z
HEADER = (
    "timestamp,hostname,gpu,UUID,modelName,DCGM_FI_DEV_GPU_TEMP,DCGM_FI_DEV_PCIE_REPLAY_COUNTER\n"
)
H100 = "NVIDIA H100 80GB HBM3"
GPU_INDEX = "is not a GPU index (an integer 0..4294967295)"


@pytest.fixture
def store():
    s = SqliteStore()
    yield s
    s.close()


def _line(
    k: int, *, ts: object = None, gpu: object = 0, temp: object = 40, replay: object = 1
) -> str:
    ts = T0 + k if ts is None else ts
    return f"{ts},n1,{gpu},GPU-{k % 4},{H100},{temp},{replay}\n"


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text(HEADER + "".join(lines))
    return path


def test_a_huge_gpu_index_deep_in_the_file_stops_nothing(store, tmp_path):
    # 3,000 rows read 100 at a time; the bad cells sit in later chunks, far from their start
    lines = [_line(k) for k in range(3000)]
    bad = {2502: "99999999999999999999", 1733: "1e30", 2900: "4294967296", 40: "-1"}
    for line, cell in bad.items():
        lines[line - 2] = _line(line - 2, gpu=cell)
    path = _write(tmp_path / "t.csv", lines)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning would fail the test
        report = ingest_telemetry(store, path, chunk_rows=100)
    assert report.bad_rows == [(n, f"gpu '{bad[n]}' {GPU_INDEX}") for n in sorted(bad)]
    assert report.rows_stored == 3000 - len(bad)
    stored = store.read_samples()
    assert len(stored) == 3000 - len(bad)  # every good row, before and after the bad ones
    assert set(stored["ts"]) == {T0 + k for k in range(3000)} - {T0 + n - 2 for n in bad}


def test_the_largest_gpu_index_is_kept_and_one_more_is_refused(store, tmp_path):
    path = _write(tmp_path / "t.csv", [_line(0, gpu=2**32 - 1), _line(1, gpu=2**32)])
    report = ingest_telemetry(store, path)
    assert report.bad_rows == [(3, f"gpu '4294967296' {GPU_INDEX}")]
    assert store.read_samples()["gpu"].tolist() == [2**32 - 1]


def test_impossible_metric_values_are_missing_counted_and_their_rows_kept(store, tmp_path):
    lines = [
        _line(0, temp="inf", replay="inf"),
        _line(1, temp="-inf", replay="1e308"),
        _line(2, temp="-300", replay="-inf"),
        _line(3, temp="1e308", replay="Infinity"),
        _line(4, temp="hot", replay="NaN"),  # no number: counted; NaN: missing, not counted
        _line(5, temp="41", replay="7"),
    ]
    report = ingest_telemetry(store, _write(tmp_path / "t.csv", lines))
    assert report.bad_rows == [] and report.rows_stored == 6
    got = store.read_samples()
    # nothing infinite or impossible is stored; summary can no longer show "pcie_replay inf"
    assert got["gpu_temp_c"][:5].isna().all() and got["pcie_replay_total"][:5].isna().all()
    assert got["gpu_temp_c"].tolist()[5] == 41 and got["pcie_replay_total"].tolist()[5] == 7
    assert report.rejected == {
        ("gpu_temp_c", "out_of_range"): 3,  # inf, -inf, -300
        ("gpu_temp_c", "sentinel"): 1,  # 1e308 is above the int64 blank values
        ("gpu_temp_c", "not_a_number"): 1,
        ("pcie_replay_total", "out_of_range"): 3,  # inf, -inf, Infinity
        ("pcie_replay_total", "sentinel"): 1,
    }
    assert store.read_rejections()["count"].sum() == 9


@pytest.mark.parametrize(
    "cell, reason",
    [
        ("-5", "timestamp -5 is outside 2000-01-01..2100-01-01"),
        ("0", "timestamp 0 is outside 2000-01-01..2100-01-01"),
        ("9999999999", "timestamp 9999999999 is outside 2000-01-01..2100-01-01"),
        ("1e300", "timestamp 1e+300 is outside 2000-01-01..2100-01-01"),
        (
            "1714564800000000",
            "timestamp 1714564800000000 looks like microseconds; expected Unix seconds",
        ),
        (
            "1.7145648e18",
            "timestamp 1714564800000000000 looks like nanoseconds; expected Unix seconds",
        ),
        ("inf", "timestamp inf is no time"),
        ("nan", "timestamp 'nan' is neither RFC 3339 nor Unix seconds"),
        ("1970-01-01T00:00:00Z", "timestamp 0 is outside 2000-01-01..2100-01-01"),
    ],
)
def test_an_impossible_time_rejects_its_line(store, tmp_path, cell, reason):
    path = _write(tmp_path / "t.csv", [_line(0), _line(1, ts=cell), _line(2)])
    report = ingest_telemetry(store, path)
    assert report.bad_rows == [(3, reason)]
    assert store.read_samples()["ts"].tolist() == [T0, T0 + 2]


def test_rows_with_fewer_cells_than_the_header_are_rejected(store, tmp_path):
    path = _write(
        tmp_path / "t.csv",
        [_line(0), f"{T0 + 1},n1,0,GPU-1\n", f"{T0 + 2},n1,0,GPU-2,{H100},40\n", _line(3)],
    )
    report = ingest_telemetry(store, path)
    assert report.bad_rows == [(3, "expected 7 fields, saw 4"), (4, "expected 7 fields, saw 6")]
    assert store.read_samples()["ts"].tolist() == [T0, T0 + 3]


def test_a_broken_line_costs_that_line_only(store, tmp_path):
    # an unterminated quote and bytes that are not UTF-8: before, either stopped the whole load
    lines = [_line(k) for k in range(300)]
    lines[100] = f'{T0 + 100},"n1,0,GPU-0,{H100},40,1\n'
    path = tmp_path / "t.csv"
    body = (HEADER + "".join(lines)).encode()
    body = body.replace(f"{T0 + 200},n1".encode(), f"{T0 + 200},n\xff1".encode("latin-1"))
    path.write_bytes(body)
    report = ingest_telemetry(store, path, chunk_rows=64)
    assert [line for line, _ in report.bad_rows] == [102, 202]
    assert "not UTF-8" in report.bad_rows[1][1]
    assert len(store.read_samples()) == 298


def test_nothing_already_stored_is_lost_on_bad_input(store, tmp_path):
    ingest_telemetry(store, _write(tmp_path / "good.csv", [_line(k) for k in range(10)]))
    before = store.read_samples()
    bad = _write(tmp_path / "bad.csv", [_line(0, gpu="1e30", temp="hot"), "x,y\n", _line(3, ts=-5)])
    report = ingest_telemetry(store, bad)
    assert report.rows_stored == 0 and report.bad_rows_total == 3
    pd.testing.assert_frame_equal(store.read_samples(), before)


def test_xid_numbers_and_gpu_indices_beyond_32_bits_are_refused(store, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text(
        "timestamp,hostname,gpu,UUID,xid\n"
        f"{T0},n1,0,GPU-a,79\n"
        f"{T0},n1,99999999999999999999,GPU-a,79\n"
        f"{T0},n1,0,GPU-a,1e30\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = ingest_xids(store, path)
    assert [line for line, _ in report.bad_rows] == [3, 4]
    assert store.read_events()["code"].tolist() == [79]


# -- Parquet -------------------------------------------------------------------------------------


def _parquet(path: Path, **columns: pa.Array) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def _ids(n: int) -> dict[str, pa.Array]:
    return {
        "timestamp": pa.array([T0 + k for k in range(n)], pa.int64()),
        "hostname": pa.array(["n1"] * n),
        "gpu": pa.array([0] * n, pa.int64()),
        "UUID": pa.array([f"GPU-{k}" for k in range(n)]),
    }


def test_a_parquet_metric_column_of_lists_is_missing_and_counted(store, tmp_path):
    path = _parquet(
        tmp_path / "t.parquet",
        **_ids(3),
        DCGM_FI_DEV_GPU_TEMP=pa.array([[40.0, 41.0], None, []], pa.list_(pa.float64())),
        DCGM_FI_DEV_POWER_USAGE=pa.array([300.0, 310.0, 320.0]),
    )
    report = ingest_telemetry(store, path)
    assert report.bad_rows == [] and report.rows_stored == 3
    assert report.rejected == {("gpu_temp_c", "not_a_number"): 2}  # the null is only missing
    got = store.read_samples()
    assert got["gpu_temp_c"].isna().all() and got["power_w"].tolist() == [300.0, 310.0, 320.0]


def test_the_cli_says_what_a_list_column_did_without_a_traceback(tmp_path):
    path = _parquet(
        tmp_path / "t.parquet",
        **_ids(2),
        DCGM_FI_DEV_GPU_TEMP=pa.array([[40.0], [41.0]], pa.list_(pa.float64())),
    )
    db = tmp_path / "s.db"
    result = CliRunner().invoke(
        main, ["ingest", "--store", f"sqlite:///{db}", "--telemetry", str(path), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, Exception)
    assert "2 gpu_temp_c (not_a_number)" in result.output


def test_a_boolean_parquet_time_column_rejects_every_line(store, tmp_path):
    ids = _ids(3) | {"timestamp": pa.array([True, False, None])}
    report = ingest_telemetry(store, _parquet(tmp_path / "t.parquet", **ids))
    assert report.bad_rows == [
        (2, "timestamp 'True' is not a time"),
        (3, "timestamp 'False' is not a time"),
        (4, "missing timestamp"),
    ]
    assert report.rows_stored == 0 and store.read_samples().empty


def test_parquet_identity_cells_of_the_wrong_type_reject_their_lines(store, tmp_path):
    n = 4
    ids = _ids(n) | {
        "gpu": pa.array([0, 2**32, 2**63, None], pa.uint64()),
        "UUID": pa.array([["GPU-0"], ["GPU-1"], ["GPU-2"], ["GPU-3"]]),  # lists, not text
    }
    report = ingest_telemetry(store, _parquet(tmp_path / "t.parquet", **ids))
    assert [line for line, _ in report.bad_rows] == [2, 3, 4, 5]
    assert "UUID \"['GPU-0']\" is not text" in report.bad_rows[0][1]
    assert f"gpu '4294967296' {GPU_INDEX}" in report.bad_rows[1][1]
    assert "missing gpu" in report.bad_rows[3][1]


def test_parquet_times_out_of_pandas_range_are_named_not_a_crash(store, tmp_path):
    stamps = pa.array([T0 * 10**6, 253402300799 * 10**6, -(10**15)], pa.timestamp("us", "UTC"))
    report = ingest_telemetry(
        store, _parquet(tmp_path / "t.parquet", **(_ids(3) | {"timestamp": stamps}))
    )
    assert [line for line, _ in report.bad_rows] == [3, 4]  # year 9999 and 1938
    assert store.read_samples()["ts"].tolist() == [float(T0)]


# -- the command -----------------------------------------------------------------------------------


def _cli(*args: str):
    return CliRunner().invoke(main, ["ingest", *args, "--no-progress"])


def test_cli_names_every_bad_line_in_a_report_and_exits_1(tmp_path):
    lines = [_line(k) for k in range(200)]
    bad = list(range(2, 200, 7))
    for n in bad:
        lines[n - 2] = _line(n - 2, gpu="1e30")
    path = _write(tmp_path / "t.csv", lines)
    result = _cli("--store", f"sqlite:///{tmp_path / 's.db'}", "--telemetry", str(path))
    assert result.exit_code == 1
    assert f"{path}:2: gpu '1e30' {GPU_INDEX}" in result.output  # the first ones on the terminal
    assert f"{path}:{bad[-1]}:" not in result.output  # not all of them
    assert f"{len(bad)} lines not stored" in result.output
    report = Path(f"{path}.bad-lines.txt")
    assert f"all listed in {report}" in result.output
    assert [int(t.split(":")[1]) for t in report.read_text().splitlines()] == bad


def test_cli_bad_lines_option_and_a_clean_reload(tmp_path):
    path = _write(tmp_path / "t.csv", [_line(0), _line(1, ts=-5), _line(2, temp="inf")])
    own = tmp_path / "all-bad.txt"
    result = _cli(
        "--store",
        f"sqlite:///{tmp_path / 's.db'}",
        "--telemetry",
        str(path),
        "--bad-lines",
        str(own),
    )
    assert result.exit_code == 1
    assert own.read_text() == f"{path}:3: timestamp -5 is outside 2000-01-01..2100-01-01\n"
    assert not Path(f"{path}.bad-lines.txt").exists()
    # the default report, then a fixed file: an impossible reading alone exits 0, the old
    # report of that file is gone
    _cli("--store", f"sqlite:///{tmp_path / 's.db'}", "--telemetry", str(path))
    assert Path(f"{path}.bad-lines.txt").exists()
    _write(path, [_line(0), _line(2, temp="inf")])
    result = _cli("--store", f"sqlite:///{tmp_path / 's.db'}", "--telemetry", str(path))
    assert result.exit_code == 0, result.output
    assert "1 gpu_temp_c (out_of_range)" in result.output
    assert not Path(f"{path}.bad-lines.txt").exists()


def test_readings_are_finite_after_any_load(store, tmp_path):
    lines = [
        _line(k, temp=v, replay=v) for k, v in enumerate(["inf", "-inf", "1e308", "nan", "12"])
    ]
    ingest_telemetry(store, _write(tmp_path / "t.csv", lines))
    values = store.read_samples()[["gpu_temp_c", "pcie_replay_total"]].to_numpy(dtype=float)
    assert not np.isinf(values).any()
    assert [v for v in values[:, 1] if not math.isnan(v)] == [12.0]


def test_a_report_that_cannot_be_written_does_not_stop_the_load(tmp_path):
    path = _write(tmp_path / "t.csv", [_line(0), _line(1, gpu="x"), _line(2)])
    db = tmp_path / "s.db"
    nowhere = tmp_path / "no-such-dir" / "bad.txt"
    result = _cli(
        "--store", f"sqlite:///{db}", "--telemetry", str(path), "--bad-lines", str(nowhere)
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert (
        f"{path}: 1 line not stored; cannot write the list: cannot write {nowhere}" in result.output
    )
    with SqliteStore(db) as store:
        assert len(store.read_samples()) == 2
