"""Per-address HBM error logs (the Calchas format) through ``gpuwarden ingest --memory-errors``:
every value of the vendored slice read back from the store, bad lines by line number, nothing
stored lost, and a file that is not such a log refused whole."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.collectors.memory_errors import (
    ADDRESS_COLUMNS,
    KIND,
    HbmError,
    accelerator_gpu,
    decode_detail,
    encode_detail,
    ingest_memory_errors,
    memory_error_frame,
    read_calchas_csv,
)
from gpuwarden.errors import InputError
from gpuwarden.store import open_store
from gpuwarden.store.sqlite import SqliteStore

SLICE = Path(__file__).parents[1] / "data" / "calchas" / "hbm_errors_slice.csv"
HEADER = "Datacenter,Server,Name,Stack,SID,PcId,BankGroup,BankArray,Col,Row,Time,EccType\n"


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _expected(path: Path) -> list[tuple]:
    """The file's lines parsed here independently: (ts, server, index, type, datacenter, address)."""
    out = []
    for r in csv.DictReader(path.open()):
        address = tuple(int(r[c], 16) for c in ADDRESS_COLUMNS.values())
        index = int(r["Name"].removeprefix("DSA"))
        out.append((float(r["Time"]), r["Server"], index, r["EccType"], r["Datacenter"], *address))
    return sorted(out)


def _stored(store) -> list[tuple]:
    f = memory_error_frame(store.read_events(kinds=[KIND]))
    cols = ["ts", "hostname", "gpu", "ecc", "datacenter", *ADDRESS_COLUMNS]
    return sorted(tuple(r) for r in f[cols].itertuples(index=False))


def test_the_vendored_slice_is_stored_value_by_value(tmp_path):
    db = tmp_path / "s.db"
    result = run("ingest", "--store", str(db), "--memory-errors", str(SLICE))
    assert result.exit_code == 0, result.output
    assert "stored 287 memory errors (117 CE, 119 UER, 51 UEO) of 51 accelerators" in result.output
    store = open_store(str(db))
    try:
        assert _stored(store) == _expected(SLICE)
        frame = memory_error_frame(store.read_events())
        first = frame.iloc[
            0
        ]  # line 2: Datacenter8,0.108.38.22,DSA3,0x3,0x0,0x1,0x2,0x1,0x54,0x3e2b
        assert (first["hostname"], first["gpu"], first["ecc"], first["ts"]) == (
            "0.108.38.22",
            3,
            "UER",
            1650690000.0,
        )
        assert [first[k] for k in ADDRESS_COLUMNS] == [3, 0, 1, 2, 1, 0x3E2B, 0x54]
        assert bool(first["uncorrectable"]) and first["datacenter"] == "Datacenter8"
        gpus = store.gpus()
        assert len(gpus) == 51 and set(gpus["uuid"]) == set(frame["uuid"])
        one = gpus[gpus["hostname"] == "0.108.36.81"]  # the server with two accelerators
        assert sorted(one["gpu"]) == [3, 4]
        assert set(one["uuid"]) == {accelerator_gpu("0.108.36.81", f"DSA{i}").uuid for i in (3, 4)}
        ev = store.read_events(kinds=[KIND])
        assert sorted(ev["code"].unique()) == [0, 1, 2]  # CE, UER, UEO
    finally:
        store.close()


def test_loading_the_same_file_again_changes_nothing():
    store = SqliteStore()
    ingest_memory_errors(store, SLICE)
    ingest_memory_errors(store, SLICE)
    assert len(store.read_events()) == 287
    store.close()


def test_uuids_are_stable_and_distinct_per_accelerator():
    a = accelerator_gpu("0.0.0.45", "DSA2")
    assert a == accelerator_gpu("0.0.0.45", "DSA2") and a.uuid.startswith("ACC-")
    assert a.uuid != accelerator_gpu("0.0.0.45", "DSA3").uuid
    assert a.uuid != accelerator_gpu("0.0.0.49", "DSA2").uuid
    assert (a.hostname, a.index) == ("0.0.0.45", 2)


def test_bad_lines_are_named_by_line_and_nothing_stored_is_lost(tmp_path):
    db = tmp_path / "s.db"
    assert run("ingest", "--store", str(db), "--memory-errors", str(SLICE)).exit_code == 0
    bad = tmp_path / "bad.csv"
    bad.write_text(
        HEADER
        + "DC1,host1,DSA0,0x0,0x1,0x2,0x3,0x0,0x10,0x20,1700000000,CE\n"  # 2: good
        + "DC1,host1,DSA0,0x0,0x1,0x2,0x3,0x0,0x10,zz,1700000000,CE\n"  # 3: row
        + "DC1,host1,DSA0,0x0,0x1,0x2,0x3,0x0,0x10,0x20,1700000000,SBE\n"  # 4: type
        + "DC1,host1,DSA0,0x0,0x1,0x2,0x3,0x0,0x10,0x20,1700000000\n"  # 5: a field short
        + "\n"  # 6: blank: no record, no complaint
        + "DC1,,DSA0,0x0,0x1,0x2,0x3,0x0,0x10,0x20,1700000000,UEO\n"  # 7: no server
        + "DC1,host1,DSA0,0x0,0x1,0x2,0x3,0x0,0x10,0x20,1700000000000,UEO\n"  # 8: ms
        + "DC1,host1,DSA1,0x0,0x1,0x2,0x3,0x0,0x10,0x21,2023-11-14T22:13:20Z,uer\n"  # 9: good
    )
    result = run("ingest", "--store", str(db), "--memory-errors", str(bad))
    assert result.exit_code == 1
    out = result.output
    assert "stored 2 memory errors (1 CE, 1 UER, 0 UEO) of 2 accelerators" in out
    assert f"{bad}:3: Row 'zz' is not a hexadecimal number" in out
    assert f"{bad}:4: EccType 'SBE' is not CE, UER or UEO" in out
    assert f"{bad}:5: expected 12 fields, got 11" in out
    assert f"{bad}:7: missing Server" in out
    assert f"{bad}:8: Time '1700000000000' looks like milliseconds" in out
    assert f"{bad}:6:" not in out and f"{bad}:2:" not in out and f"{bad}:9:" not in out
    assert "5 bad rows skipped" in out
    store = open_store(str(db))
    try:
        frame = memory_error_frame(store.read_events())
        assert len(frame) == 289  # the slice's 287 kept, and the two good lines
        new = frame[frame["hostname"] == "host1"].sort_values("gpu")
        assert new["ts"].tolist() == [1700000000.0, 1700000000.0]
        assert new["ecc"].tolist() == ["CE", "UER"] and new["row"].tolist() == [0x20, 0x21]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("timestamp,hostname,gpu,UUID,xid\n1,h,0,G,48\n", "missing columns Datacenter, Server"),
        ("", "the file is empty"),
    ],
)
def test_a_file_that_is_not_a_log_stores_nothing(tmp_path, text, message):
    path = tmp_path / "x.csv"
    path.write_text(text)
    store = SqliteStore()
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ingest_memory_errors(store, path)
    assert store.read_events().empty
    store.close()
    result = run("ingest", "--store", str(tmp_path / "s.db"), "--memory-errors", str(path))
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output


def test_columns_in_any_order_and_case_gzip_and_unknown_columns(tmp_path):
    path = tmp_path / "x.csv.gz"
    text = (
        "ecctype,time,Row,Col,bankarray,bankgroup,pcid,sid,stack,name,server,datacenter,rack\n"
        "UEO,1700003600,0x1ff,0x7c,0x1,0x2,0xf,0x1,0x3,NPU7,srv9,,r1\n"
    )
    path.write_bytes(gzip.compress(text.encode()))
    log = read_calchas_csv(path)
    assert log.notes == ["ignored unknown column rack"]
    (e,) = log.errors
    assert e == HbmError(
        1700003600.0,
        accelerator_gpu("srv9", "NPU7"),
        "UEO",
        stack=3,
        sid=1,
        pc=0xF,
        bg=2,
        ba=1,
        row=0x1FF,
        col=0x7C,
        datacenter="",
    )


def test_a_name_without_a_number_is_filed_at_index_minus_one_and_said(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text(HEADER + "DC,srv,NPU,0x0,0x0,0x0,0x0,0x0,0x0,0x1,1700000000,CE\n")
    store = SqliteStore()
    log = ingest_memory_errors(store, path)
    assert log.errors[0].gpu.index == -1
    assert any("'NPU' of server 'srv' has no number" in n for n in log.notes)
    assert len(store.read_events(kinds=[KIND])) == 1 and store.gpus().empty
    store.close()


def test_repeated_lines_are_stored_once_and_counted(tmp_path):
    path = tmp_path / "r.csv"
    line = "DC,srv,DSA1,0x0,0x0,0x0,0x0,0x0,0x0,0x1,1700000000,CE\n"
    path.write_text(HEADER + line + line + line.replace(",CE", ",UER"))
    log = read_calchas_csv(path)
    assert (len(log.errors), log.repeats, log.lines_read) == (2, 1, 3)


def test_detail_round_trips_a_datacenter_with_spaces_and_equals_signs():
    e = HbmError(0.0, accelerator_gpu("s", "DSA1"), "CE", 1, 0, 14, 3, 2, 0x3FFF, 0x7C, "DC 1=a")
    assert decode_detail(encode_detail(e)) == {
        "ecc": "CE",
        "datacenter": "DC 1=a",
        "stack": 1,
        "sid": 0,
        "pc": 14,
        "bg": 3,
        "ba": 2,
        "row": 0x3FFF,
        "col": 0x7C,
    }


def test_the_dashboard_names_them_among_a_gpus_events():
    from gpuwarden.dashboard.data import recent_events

    store = SqliteStore()
    ingest_memory_errors(store, SLICE)
    ev = recent_events(store, 0, 2e9, uuid=accelerator_gpu("0.108.38.22", "DSA3").uuid)
    assert len(ev) == 2 and set(ev["kind"]) == {KIND}
    assert set(ev["name"]) == {"HBM error from a per-address log (ingest --memory-errors)"}
    store.close()
