"""``gpuwarden ingest --smi-q``: real ``nvidia-smi -q`` outputs (tests/data/smi/real, sources in
SOURCES.md) stored as the collector's reader reads them, a ``-q -l`` log of several outputs, and
an output without a time named by its line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.collectors.smi_text import read_query_text
from gpuwarden.errors import InputError
from gpuwarden.ingest import ingest_smi_query_text
from gpuwarden.store.sqlite import SqliteStore

REAL = Path(__file__).resolve().parent / "data" / "smi" / "real"
H100 = REAL / "h100_sxm_r590_q_load.txt"
L40S = REAL / "l40s_r595_q_load.txt"


def test_a_real_output_is_stored_as_the_reader_reads_it():
    store = SqliteStore()
    report = ingest_smi_query_text(store, H100, host="node9")
    expected = read_query_text(H100.read_text(), hostname="node9")
    assert report.rows_stored == len(expected.samples) == 1 and report.bad_rows_total == 0
    frame = store.read_samples()
    sample = expected.samples[0]
    assert frame["uuid"].tolist() == [sample.gpu.uuid]
    assert frame["ts"].tolist() == [sample.ts]
    for field, value in sample.values.items():
        assert frame[field].iloc[0] == pytest.approx(value), field
    nodes = store.read_nodes()
    assert nodes[["hostname", "driver_version", "cuda_driver_version"]].values.tolist() == [
        ["node9", "590.48.01", "13.1"]
    ]


def test_a_log_of_several_outputs_and_one_without_a_time(tmp_path):
    untimed = "\n".join(
        line for line in L40S.read_text().splitlines() if not line.startswith("Timestamp")
    )
    log = tmp_path / "q.log"
    log.write_text(H100.read_text() + "\n" + untimed + "\n" + L40S.read_text())
    store = SqliteStore()
    report = ingest_smi_query_text(store, log, host="n")
    assert report.lines_read == 3 and report.rows_stored == 2
    headers = [n for n, line in enumerate(log.read_text().splitlines(), 1) if "NVSMI LOG" in line]
    assert report.bad_rows_total == 1 and report.bad_rows[0][0] == headers[1]  # the untimed one
    uuids = {read_query_text(f.read_text(), hostname="n").samples[0].gpu.uuid for f in (H100, L40S)}
    assert set(store.read_samples()["uuid"]) == uuids


def test_not_q_output_is_refused_and_the_cli_exits_non_zero(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("index, uuid\n0, GPU-1\n")
    with pytest.raises(InputError, match="not nvidia-smi -q output"):
        ingest_smi_query_text(SqliteStore(), bad)
    db = tmp_path / "s.db"
    result = CliRunner().invoke(
        main, ["ingest", "--store", f"sqlite:///{db}", "--smi-q", str(bad)], env={}
    )
    assert result.exit_code != 0 and "not nvidia-smi -q output" in result.output
    ok = CliRunner().invoke(
        main,
        ["ingest", "--store", f"sqlite:///{db}", "--smi-q", str(H100), "--host", "h"],
        env={},
    )
    assert ok.exit_code == 0, ok.output
    assert "stored 1 sample (nvidia-smi -q, 1 output, host h)" in ok.output
