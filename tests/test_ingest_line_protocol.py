"""``gpuwarden ingest --line-protocol``: Telegraf's files into a store, bad lines named, the
good ones kept."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.errors import InputError
from gpuwarden.ingest import ingest_line_protocol
from gpuwarden.store.sqlite import SqliteStore

TELEGRAF = Path(__file__).resolve().parent / "data" / "telegraf"


def test_every_fixture_loads_into_a_store(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    stored = {
        p.name: ingest_line_protocol(store, p, host="h100-node").rows_stored
        for p in sorted(TELEGRAF.glob("*.lp"))
    }
    assert stored == {
        "dcgm_l40s_prometheus_v1.lp": 1, "dcgm_l40s_prometheus_v2.lp": 1,
        "h100_v13_from_q.lp": 1, "readme_gtx10xx.lp": 3, "tests_t4_a10g.lp": 2,
        "tests_a100_ada.lp": 2, "xid_count_t400_v1.lp": 6, "xid_count_t400_v2.lp": 6,
    }  # fmt: skip
    gpus = store.gpus().set_index("uuid")
    assert gpus.loc["GPU-00000000-0000-0000-0000-000000000000", "hostname"] == "h100-node"
    assert len(gpus) == 10  # the L40S and the T400 once each, from both shapes
    temps = store.read_samples(start=0, end=2e9, fields=["gpu_temp_c"]).set_index("uuid")
    assert temps.loc["GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", "gpu_temp_c"] == 17


def test_bad_lines_are_named_the_good_ones_stored_and_gzip_reads(tmp_path):
    text = (
        "nvidia_smi,index=0,uuid=GPU-1 temperature_gpu=40i 60000000000\n"
        "nvidia_smi,index=0,uuid=GPU-1 temperature_gpu=hot 120000000000\n"
        "nvidia_smi,index=1,uuid=GPU-2 temperature_gpu=41i\n"
        "nvidia_smi,index=0,uuid=GPU-1 temperature_gpu=42i 180000000000\n"
    )
    path = tmp_path / "t.lp.gz"
    path.write_bytes(gzip.compress(text.encode()))
    db = tmp_path / "s.db"
    result = CliRunner().invoke(
        main,
        ["ingest", "--store", f"sqlite:///{db}", "--line-protocol", str(path), "--host", "n1"],
        env={},
    )
    assert result.exit_code == 1, result.output
    assert "stored 2 samples (line protocol, 4 lines)" in result.output
    assert "t.lp.gz:2: not line protocol: field 'temperature_gpu'" in result.output
    assert "t.lp.gz:3: a nvidia_smi point without a time" in result.output
    assert "2 bad rows skipped (the good rows were stored)" in result.output
    temps = SqliteStore(db).read_samples(start=0, end=1e9, fields=["gpu_temp_c"])
    assert list(temps["gpu_temp_c"]) == [40, 42] and set(temps["hostname"]) == {"n1"}


def test_a_file_without_gpu_telemetry_stores_nothing_and_says_what_it_holds(tmp_path):
    path = tmp_path / "cpu.lp"
    path.write_text("cpu,host=h usage_idle=99.5 60000000000\nmem,host=h used=1i 60000000000\n")
    with pytest.raises(InputError, match="no GPU telemetry in line protocol.*found: cpu, mem"):
        ingest_line_protocol(SqliteStore(), path)
    result = CliRunner().invoke(
        main, ["ingest", "--store", f"sqlite:///{tmp_path / 's.db'}", "--line-protocol",
               str(path)], env={}
    )  # fmt: skip
    assert result.exit_code == 1 and "no GPU telemetry in line protocol" in result.output


def test_precision_scales_the_times(tmp_path):
    path = tmp_path / "s.lp"
    path.write_text("nvidia_smi,index=0,uuid=GPU-1 temperature_gpu=40i 1714564800\n")
    store = SqliteStore()
    ingest_line_protocol(store, path, host="h", precision="s")
    assert list(store.read_samples(start=0, end=2e9, fields=["gpu_temp_c"])["ts"]) == [1714564800]


def test_a_file_read_a_few_lines_at_a_time_stores_the_same(tmp_path, monkeypatch):
    """The reader streams the file in chunks of lines (a file larger than memory is fine): a
    chunk of one line, which splits the metric_version 1 series of one GPU and time across
    chunks, stores what one chunk does."""
    import gpuwarden.ingest as ing

    def load(chunk: int) -> pd.DataFrame:
        monkeypatch.setattr(ing, "LINE_CHUNK", chunk)
        store = SqliteStore()
        for p in sorted(TELEGRAF.glob("*.lp")):
            ing.ingest_line_protocol(store, p, host="h")
        frame = store.read_samples(start=0, end=2e9)
        return frame.sort_values(["uuid", "ts"]).reset_index(drop=True)

    pd.testing.assert_frame_equal(load(1), load(50_000))


def test_windows_line_ends_and_an_empty_file(tmp_path):
    path = tmp_path / "crlf.lp"
    path.write_bytes(b"nvidia_smi,index=0,uuid=GPU-1 temperature_gpu=40i 60000000000\r\n")
    assert ingest_line_protocol(SqliteStore(), path, host="h").rows_stored == 1
    empty = tmp_path / "empty.lp"
    empty.write_text("\n")
    with pytest.raises(InputError, match="empty.lp: the file is empty"):
        ingest_line_protocol(SqliteStore(), empty)
