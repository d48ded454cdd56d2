"""``nvidia-smi -q -x`` on real captures (tests/data/smi/xml/, from Telegraf's tests; sources in
SOURCES.md there): each reads as Telegraf's own test expects its parser to read it, through
gpuwarden's line protocol reader; MIG devices' memory, ``N/A`` and ECC sums as the text reader
takes them; logs of several documents, broken ones named by their line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.collectors.lineproto import parse_line
from gpuwarden.collectors.smi_xml import QueryXmlError, read_query_xml
from gpuwarden.collectors.telegraf import points_to_batches
from gpuwarden.errors import InputError
from gpuwarden.ingest import ingest_smi_query_text
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import NodeInfo

DATA = Path(__file__).parent.parent / "data"
XML = DATA / "smi" / "xml"
#: capture -> (Telegraf's expectation file, its host tag)
TELEGRAF = {
    "tesla-t4.xml": ("tests_t4_a10g.lp", "t4-node"),
    "a10g.xml": ("tests_t4_a10g.lp", "a10g-node"),
    "a100-sxm4-v12.xml": ("tests_a100_ada.lp", "a100-node"),
    "rtx-4000-sff-ada-v13.xml": ("tests_a100_ada.lp", "ada-node"),
}


def _read(name: str, host: str = "node7"):
    return read_query_xml((XML / name).read_text(), hostname=host)


def _telegraf(name: str):
    """The sample Telegraf's test expects for capture ``name``, read as line protocol."""
    file, host = TELEGRAF[name]
    points = [
        (n, parse_line(line))
        for n, line in enumerate((DATA / "telegraf" / file).read_text().splitlines(), 1)
        if line and not line.startswith("#") and f"host={host}," in line
    ]
    (batch,) = points_to_batches(points, host="unused").batches
    (sample,) = batch.samples
    return sample


@pytest.mark.parametrize("name", sorted(TELEGRAF))
def test_each_capture_reads_as_telegrafs_own_test_expects(name):
    (ours,) = _read(name).samples
    theirs = _telegraf(name)
    assert (ours.gpu.uuid, ours.gpu.model) == (theirs.gpu.uuid, theirs.gpu.model)
    # every field Telegraf's parser took from the capture, gpuwarden took with the same value
    assert set(theirs.values) <= set(ours.values), set(theirs.values) - set(ours.values)
    assert {k: ours.values[k] for k in theirs.values} == theirs.values


def test_what_the_xml_has_beyond_telegrafs_fields():
    (a100,) = _read("a100-sxm4-v12.xml").samples
    # MIG devices' own memory (19,968 MiB each) is not the GPU's
    assert a100.values["fb_total_mib"] == 81920 and a100.values["fb_used_mib"] == 50
    assert "gpu_util_pct" not in a100.values  # N/A under MIG: missing, never 0
    assert "remapped_rows_correctable" not in a100.values  # <remapped_rows>N/A</remapped_rows>
    # DRAM + SRAM parts, all four reading 0, are a read 0 (Telegraf's v12 parser skips them)
    assert (
        a100.values["ecc_dbe_volatile_total"] == 0 and a100.values["ecc_sbe_aggregate_total"] == 0
    )
    assert a100.values["pcie_replay_total"] == 0 and a100.values["pcie_link_width_max"] == 16
    (ada,) = _read("rtx-4000-sff-ada-v13.xml").samples
    assert ada.values["power_violation_us"] == 4_251_825_415  # past 32 bits, kept whole
    assert ada.values["power_w"] == 8.81  # the average, as -q text's, not the 8.44 W instant
    assert "ecc_sbe_volatile_total" not in ada.values  # ECC off: every part N/A
    assert ada.values["clock_event_reasons"] == 1  # idle, the only reason active
    (t4,) = _read("tesla-t4.xml").samples
    assert (t4.values["retired_pages_sbe"], t4.values["retired_pages_pending"]) == (0, 0)
    (p400,) = _read("quadro-p400.xml").samples
    assert not any(k.startswith("ecc_") for k in p400.values)  # Single/Double Bit totals N/A
    assert p400.gpu.pci_bus_id == "00000000:43:00.0"


def test_the_header_gives_time_and_the_nodes_driver():
    batch = _read("a10g.xml", host="a10g-node")
    assert batch.ts == 1_682_352_711.0  # Mon Apr 24 16:11:51 2023, read as UTC
    assert batch.nodes == (NodeInfo(batch.ts, "a10g-node", "515.105.01", "11.7"),)
    assert not batch.problems
    untimed = _read("gtx-1070-ti.xml")
    assert untimed.problems == ("no Timestamp line; time 0",)


def test_not_an_smi_document_is_said_so():
    with pytest.raises(QueryXmlError, match="not well-formed"):
        read_query_xml("<nvidia_smi_log><gpu id='x'>", hostname="h")
    with pytest.raises(QueryXmlError, match="<foo> is not nvidia-smi's"):
        read_query_xml("<foo/>", hostname="h")


def test_a_log_of_documents_stores_each_and_names_the_broken_one(tmp_path):
    docs = [(XML / n).read_text() for n in ("a10g.xml", "tesla-t4.xml", "gtx-1070-ti.xml")]
    broken = docs[1][: len(docs[1]) // 2]  # cut off mid-document, as a killed -l loop leaves
    log = tmp_path / "node7-qx.log"
    log.write_text(docs[0] + broken + docs[1] + docs[2])
    # each document starts at its declaration; the cut one's successor mid-line
    starts = [n for n, line in enumerate(log.read_text().splitlines(), 1) if "<?xml" in line]
    assert (
        len(starts) == 4
        and starts[0] == 1
        and not log.read_text().splitlines()[starts[2] - 1].startswith("<?xml")
    )
    store = SqliteStore()
    report = ingest_smi_query_text(store, log, host="node7")
    assert report.rows_stored == 2 and report.read_unit == "document" and report.lines_read == 4
    (cut, untimed) = report.bad_rows
    assert cut[0] == starts[1] and "not well-formed XML" in cut[1]
    assert untimed == (starts[3], "nvidia-smi -q -x document without a readable time: "
                       "no Timestamp line; time 0")  # fmt: skip
    assert len(store.read_samples(start=0, end=2e9)) == 2
    store.close()


def test_neither_text_nor_xml_stores_nothing(tmp_path):
    path = tmp_path / "other.xml"
    path.write_text("<?xml version='1.0'?><config><gpu/></config>\n")
    with pytest.raises(InputError, match="not nvidia-smi -q output, as text or as XML"):
        ingest_smi_query_text(SqliteStore(), path, host="n")


def test_cli_names_the_form(tmp_path):
    store = f"sqlite:///{tmp_path / 's.db'}"
    result = CliRunner().invoke(
        main,
        ["ingest", "--store", store, "--smi-q", str(XML / "a100-sxm4-v12.xml"), "--host", "n1"],
        env={},
    )
    assert result.exit_code == 0, result.output
    assert "stored 1 sample (nvidia-smi -q -x, 1 document, host n1)" in result.output


def test_a_log_is_stored_as_it_is_read(tmp_path, monkeypatch):
    """Outputs are read as they come and stored a chunk at a time: a chunk of one stores
    what one chunk of all does, rejections and node versions included."""
    import gpuwarden.ingest as ing

    names = ("a10g.xml", "tesla-t4.xml", "rtx-4000-sff-ada-v13.xml")
    log = tmp_path / "qx.log"
    log.write_text("".join((XML / n).read_text() for n in names))

    def load(chunk: int):
        monkeypatch.setattr(ing, "Q_CHUNK", chunk)
        store = SqliteStore()
        report = ing.ingest_smi_query_text(store, log, host="n")
        frame = store.read_samples(start=0, end=2e9).sort_values(["ts", "uuid"])
        nodes = store.read_nodes()
        store.close()
        return report, frame.reset_index(drop=True), nodes

    (one, frame_one, nodes_one), (all_, frame_all, nodes_all) = load(1), load(500)
    assert (one.rows_stored, one.lines_read) == (all_.rows_stored, all_.lines_read) == (3, 3)
    assert one.rejected == all_.rejected
    pd.testing.assert_frame_equal(frame_one, frame_all)
    pd.testing.assert_frame_equal(nodes_one, nodes_all)
