"""SmiCollector against a fake nvidia-smi executable (a real subprocess) replaying recorded CSV."""

from __future__ import annotations

import csv
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuwarden.collectors import Collector, open_collector
from gpuwarden.collectors.smi import (
    SmiCollector,
    SmiOutput,
    normalise_bus_id,
    parse_cell,
    run_nvidia_smi,
)
from gpuwarden.errors import CollectorUnavailable, ConfigError
from gpuwarden.telemetry import FIELDS

DATA = Path(__file__).resolve().parents[1] / "data" / "smi"
SMI_FIELDS = {f.name for f in FIELDS if f.smi}
RETIRED = {"retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"}

# Prints the columns asked for from a CSV recorded with a header row, the way nvidia-smi
# --query-gpu=... --format=csv,noheader,nounits does; a field missing from the recording is one
# this "driver" does not know, and fails the whole query as nvidia-smi does.
SCRIPT = """#!{python}
import csv, os, sys, time
if {pidfile!r}:
    with open({pidfile!r}, "w") as f:
        f.write(str(os.getpid()))
    with open({pidfile!r} + ".argv", "a") as f:
        f.write(" ".join(sys.argv[1:]) + "\\n")
time.sleep({sleep})
if {stderr!r}:
    print({stderr!r}, file=sys.stderr)
if not os.path.exists({csv!r}):
    sys.exit({rc})
if "-x" in sys.argv[1:]:  # nvidia-smi -q -x: the recording beside the CSV, or no GPU at all
    xml = {xml!r}
    print(open(xml).read() if os.path.exists(xml) else "<?xml version='1.0' ?><nvidia_smi_log/>")
    sys.exit(0)
query = next(a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--query-gpu="))
assert "--format=csv,noheader,nounits" in sys.argv[1:], sys.argv
with open({csv!r}) as f:
    header, *rows = list(csv.reader(f, skipinitialspace=True))
for field in query.split(","):
    if field not in header:
        print('Field "%s" is not a valid field to query.' % field)
        print()
        sys.exit(2)
columns = [header.index(field) for field in query.split(",")]
for row in rows:
    print(row[0] if len(row) == 1 else ", ".join(row[c] for c in columns))
sys.exit({rc})
"""


def fake_smi(
    tmp_path: Path, recording: str | None, *, sleep: float = 0, rc: int = 0, stderr: str = ""
) -> Path:
    """A fake nvidia-smi in ``tmp_path``; it reads ``tmp_path/current.csv`` on every run."""
    current = tmp_path / "current.csv"
    if recording:
        shutil.copy(DATA / recording, current)
    script = tmp_path / "nvidia-smi"
    script.write_text(
        SCRIPT.format(
            python=sys.executable,
            pidfile=str(tmp_path / "pid"),
            sleep=sleep,
            rc=rc,
            stderr=stderr,
            csv=str(current),
            xml=str(tmp_path / "current.xml"),
        )
    )
    script.chmod(0o755)
    return script


def by_index(batch) -> dict[int, dict[str, float]]:
    return {s.gpu.index: dict(s.values) for s in batch.samples}


@pytest.fixture
def h100(tmp_path):
    script = fake_smi(tmp_path, "h100_hgx_8gpu.csv")
    return tmp_path, SmiCollector(
        binary=str(script), timeout_s=20, hostname="node-a", clock=lambda: 5.0
    )


def test_h100_node(h100):
    tmp_path, collector = h100
    batch = collector.collect()
    assert isinstance(collector, Collector)
    assert batch.problems == () and batch.events == () and batch.ts == 5.0
    assert [s.gpu.index for s in batch.samples] == list(range(8))
    first = batch.samples[0].gpu
    assert (first.hostname, first.pci_bus_id, first.model) == (
        "node-a",
        "00000000:18:00.0",
        "NVIDIA H100 80GB HBM3",
    )
    assert first.uuid.startswith("GPU-") and len(first.uuid) == 40
    gpu = by_index(batch)
    for values in gpu.values():
        # Hopper has no page retirement: [N/A], absent; no column at all for energy, NVLink, ...
        assert set(values) == SMI_FIELDS - RETIRED
    assert gpu[0]["power_w"] == 688.41 and gpu[0]["power_limit_w"] == 700.0
    assert gpu[0]["fb_used_mib"] == 74213 and gpu[0]["mem_temp_c"] == 70
    assert gpu[0]["remapped_rows_pending"] == 0  # "No"
    assert gpu[6]["clock_event_reasons"] == 4  # 0x0000000000000004
    assert gpu[5]["ecc_sbe_aggregate_total"] == 12 and gpu[5]["remapped_rows_correctable"] == 1
    argv = (tmp_path / "pid.argv").read_text().split()
    assert argv[1] == "--format=csv,noheader,nounits"
    assert argv[0].startswith("--query-gpu=index,uuid,pci.bus_id,name,temperature.gpu,")


def test_not_available_markers_are_absent_not_zero(tmp_path):
    script = fake_smi(tmp_path, "a100_vm_2gpu_na.csv")
    batch = SmiCollector(binary=str(script), hostname="vm").collect()
    assert batch.problems == ()
    assert batch.rejected == ()  # a marker is no reading: missing, not rejected
    gpu = by_index(batch)
    assert set(SMI_FIELDS) - set(gpu[0]) == RETIRED | {"mem_temp_c", "ecc_sbe_volatile_total"}
    assert set(SMI_FIELDS) - set(gpu[1]) == RETIRED | {
        "power_w",
        "pcie_link_gen_max",
        "ecc_sbe_aggregate_total",
    }
    assert gpu[1]["mem_temp_c"] == 33 and gpu[0]["clock_event_reasons"] == 1


def test_unknown_field_is_dropped_remembered_and_said_once(tmp_path):
    script = fake_smi(tmp_path, "v100_r470_2gpu.csv")
    runs: list[list[str]] = []

    def counting(argv: Sequence[str], timeout_s: float) -> SmiOutput:
        runs.append(list(argv))
        return run_nvidia_smi(argv, timeout_s)

    collector = SmiCollector(binary=str(script), run=counting, hostname="dgx1")
    first = collector.collect()
    # r470 knows neither clocks_event_reasons.active nor remapped_rows.*: one retry per field,
    # and one for driver_version, which this recording lacks (dropped without a word)
    assert len(runs) == 8  # and nvidia-smi -q -x, as every 4th collection
    assert first.problems == (
        "nvidia-smi does not know the field 'remapped_rows.correctable'; remapped_rows_correctable is absent",
        "nvidia-smi does not know the field 'remapped_rows.uncorrectable'; remapped_rows_uncorrectable is absent",
        "nvidia-smi does not know the field 'remapped_rows.pending'; remapped_rows_pending is absent",
        "nvidia-smi does not know the field 'remapped_rows.failure'; remapped_rows_failure is absent",
        "nvidia-smi does not know the field 'clocks_event_reasons.active'; "
        "asking for 'clocks_throttle_reasons.active' instead",
    )
    gpu = by_index(first)
    assert gpu[0]["clock_event_reasons"] == 0
    assert (
        gpu[1]["retired_pages_sbe"],
        gpu[1]["retired_pages_dbe"],
        gpu[1]["retired_pages_pending"],
    ) == (2, 1, 1)
    assert not any(f.startswith("remapped_rows") for f in gpu[1])

    second = collector.collect()
    assert len(runs) == 9 and second.problems == ()
    assert by_index(second) == gpu


def test_hung_nvidia_smi_is_killed_and_named(tmp_path):
    script = fake_smi(tmp_path, "h100_hgx_8gpu.csv", sleep=60)
    batch = SmiCollector(binary=str(script), timeout_s=0.5).collect()
    assert batch.samples == ()
    assert batch.problems == (
        "nvidia-smi did not answer within 0.5 s and was killed (a GPU or the driver may be hung)",
    )
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(pid, 0)


def test_lost_gpus_become_events_once_and_recover(tmp_path):
    script = fake_smi(tmp_path, "h100_hgx_8gpu.csv", rc=0)
    collector = SmiCollector(binary=str(script), hostname="node-a")
    healthy = collector.collect()
    uuids = {s.gpu.index: s.gpu.uuid for s in healthy.samples}

    lost_script = fake_smi(tmp_path, "h100_hgx_8gpu_lost.csv", rc=15)
    assert lost_script == script
    lost = collector.collect()
    assert sorted(by_index(lost)) == [0, 1, 2, 3, 5, 6]
    kinds = [(e.kind, e.gpu.index, e.gpu.uuid, e.gpu.pci_bus_id) for e in lost.events]
    # identities come from the earlier healthy read: nvidia-smi could not name these GPUs
    assert kinds == [
        ("gpu_lost", 4, uuids[4], "00000000:9A:00.0"),
        ("gpu_lost", 7, uuids[7], "00000000:DB:00.0"),
    ]
    assert "Unable to determine the device handle" in lost.events[0].detail
    assert len(lost.problems) == 2 and "GPU is lost" in lost.problems[0]

    again = collector.collect()
    assert again.events == () and len(again.problems) == 2

    fake_smi(tmp_path, "h100_hgx_8gpu.csv", rc=0)
    back = collector.collect()
    assert [(e.kind, e.gpu.index) for e in back.events] == [
        ("gpu_recovered", 4),
        ("gpu_recovered", 7),
    ]
    assert back.problems == () and len(back.samples) == 8


def test_lost_gpu_never_seen_before_is_still_an_event(tmp_path):
    script = fake_smi(tmp_path, "h100_hgx_8gpu_lost.csv", rc=15)
    batch = SmiCollector(binary=str(script), hostname="node-a").collect()
    first, second = batch.events
    assert (first.kind, first.gpu.index, first.gpu.pci_bus_id, first.gpu.uuid) == (
        "gpu_lost",
        -1,
        "00000000:9A:00.0",
        "",
    )
    assert (second.kind, second.gpu.index, second.gpu.uuid) == ("gpu_lost", 7, "")


def test_gpu_missing_from_the_list_is_named(tmp_path):
    fake_smi(tmp_path, "h100_hgx_8gpu.csv")
    collector = SmiCollector(binary=str(tmp_path / "nvidia-smi"), hostname="node-a")
    uuid_3 = collector.collect().samples[3].gpu.uuid
    rows = (tmp_path / "current.csv").read_text().splitlines()
    (tmp_path / "current.csv").write_text("\n".join(rows[:4] + rows[5:]) + "\n")  # GPU 3 gone
    batch = collector.collect()
    assert len(batch.samples) == 7 and batch.events == ()
    assert batch.problems == (
        f"gpu 3 ({uuid_3}) at 00000000:5D:00.0 is missing from nvidia-smi's list",
    )


def test_driver_not_loaded_is_a_problem_not_a_crash(tmp_path):
    message = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running."
    )
    script = fake_smi(tmp_path, None, rc=9, stderr=message)
    batch = SmiCollector(binary=str(script)).collect()
    assert batch.samples == () and batch.problems == (
        f"nvidia-smi exited with status 9: {message}",
    )


@pytest.mark.parametrize("binary", ["nvidia-smi-not-installed-here", "/nonexistent/bin/nvidia-smi"])
def test_missing_binary_is_one_clear_line(binary):
    with pytest.raises(CollectorUnavailable, match="^nvidia-smi not found: .*use nvml://") as info:
        open_collector(f"smi://?binary={binary}")
    assert "\n" not in str(info.value) and binary in str(info.value)


def test_url_options(tmp_path):
    script = fake_smi(tmp_path, "h100_hgx_8gpu.csv")
    collector = open_collector(f"smi://?timeout=3&binary={script}&hostname=n9")
    assert isinstance(collector, SmiCollector)
    assert (collector.timeout_s, collector.hostname) == (3.0, "n9")
    assert len(collector.collect().samples) == 8
    collector.close()


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("smi://?timeout=soon", "timeout must be a number"),
        ("smi://?timeout=0", "more than 0 seconds"),
        ("smi://?retries=2", "unknown option retries"),
        ("smi://node7", "takes no host"),
    ],
)
def test_bad_smi_urls(url, words):
    with pytest.raises(ConfigError, match=words):
        SmiCollector.from_url(url)


@pytest.mark.parametrize(
    ("cell", "value"),
    [
        ("61", 61.0),
        (" 688.41", 688.41),
        ("0x0000000000000044", 68.0),
        ("Yes", 1.0),
        ("No", 0.0),
        ("[N/A]", None),
        ("N/A", None),
        ("[Not Supported]", None),
        ("[Unknown Error]", None),
        ("[GPU is lost]", None),
        ("", None),
    ],
)
def test_parse_cell(cell, value):
    assert parse_cell(cell) == value


def test_parse_cell_rejects_text():
    with pytest.raises(ValueError):
        parse_cell("Enabled-ish")


def test_bus_ids_are_normalised_to_the_query_form():
    assert normalise_bus_id("0000:9a:00.0") == "00000000:9A:00.0"
    assert normalise_bus_id("00000000:DB:00.0") == "00000000:DB:00.0"


def _versioned_runner(driver_cells: list[str], q_text: str, calls: list[list[str]]):
    """nvidia-smi replaying h100_hgx_8gpu.csv with a driver_version column whose value is the
    next of ``driver_cells`` on each run, and ``q_text`` for ``-q``."""
    header, *rows = list(csv.reader((DATA / "h100_hgx_8gpu.csv").open(), skipinitialspace=True))
    header = [*header, "driver_version"]

    def run(argv: Sequence[str], timeout_s: float) -> SmiOutput:
        calls.append(list(argv))
        if "-x" in argv:  # nvidia-smi -q -x: no GPU in it, nothing to add
            return SmiOutput(0, "<?xml version='1.0' ?>\n<nvidia_smi_log></nvidia_smi_log>\n", "")
        if "-q" in argv:
            return SmiOutput(0, q_text, "")
        query = argv[1].split("=", 1)[1].split(",")
        driver = driver_cells.pop(0)
        lines = [", ".join([*row, driver][header.index(f)] for f in query) for row in rows]
        return SmiOutput(0, "\n".join(lines) + "\n", "")

    return run


def test_driver_and_cuda_versions_become_node_info():
    # the -q header is a real one (tests/data/smi/real/SOURCES.md): driver 590.48.01, CUDA 13.1
    q_text = (DATA / "real" / "h100_sxm_r590_q_load.txt").read_text()
    calls: list[list[str]] = []
    run = _versioned_runner(["590.48.01", "590.48.01", "595.80"], q_text, calls)
    smi = SmiCollector(run=run, hostname="node-a", clock=lambda: 7.0)
    first = smi.collect()
    assert first.problems == ()
    assert [(n.hostname, n.driver_version, n.cuda_driver_version) for n in first.nodes] == [
        ("node-a", "590.48.01", "13.1")
    ]
    assert "driver_version" in calls[0][1].split("=", 1)[1].split(",")
    assert calls[1] == ["nvidia-smi", "-q", "-d", "COMPUTE"]
    smi.collect()
    assert sum("COMPUTE" in c for c in calls) == 1  # the CUDA version is read once per driver
    third = smi.collect()  # a driver update: asked again (the recorded header still says 13.1)
    assert sum("COMPUTE" in c for c in calls) == 2
    assert third.nodes[0].driver_version == "595.80"


def test_no_cuda_version_when_q_fails_or_prints_none():
    calls: list[list[str]] = []
    run = _versioned_runner(["[N/A]"], "", calls)
    batch = SmiCollector(run=run, hostname="n").collect()
    assert batch.nodes == () and not any("COMPUTE" in c for c in calls)  # no driver: not asked
    run = _versioned_runner(["550.54.15"], "==NVSMI LOG==\nDriver Version : 550.54.15\n", calls)
    batch = SmiCollector(run=run, hostname="n").collect()
    assert [(n.driver_version, n.cuda_driver_version) for n in batch.nodes] == [("550.54.15", "")]


def test_the_clock_event_lines_of_older_drivers_and_unknown_ones():
    """Older drivers name the section Clocks Throttle Reasons, with the same lines (a power
    brake shows as HW Slowdown and HW Power Brake Slowdown, nested); an N/A line leaves the
    mask unknown, not 0 (lines written here, in the layout of the recorded captures)."""
    from gpuwarden.collectors.smi_text import read_query_text

    def mask(section: str, brake: str) -> float | None:
        text = (
            "==============NVSMI LOG==============\n\n"
            "Timestamp                                 : Tue Jul 14 08:12:53 2026\n"
            "Driver Version                            : 470.82.01\n\n"
            "GPU 00000000:00:09.0\n"
            "    Product Name                          : Tesla V100-SXM2-32GB\n"
            f"    {section}\n"
            "        Idle                              : Not Active\n"
            "        HW Slowdown                       : Active\n"
            f"            HW Power Brake Slowdown       : {brake}\n"
            "        SW Thermal Slowdown               : Not Active\n"
            "    Temperature\n"
            "        GPU Current Temp                  : 41 C\n"
        )
        (sample,) = read_query_text(text, hostname="n").samples
        return sample.values.get("clock_event_reasons")

    assert mask("Clocks Throttle Reasons", "Active") == 0x8 | 0x80
    assert mask("Clocks Event Reasons", "Not Active") == 0x8
    assert mask("Clocks Event Reasons", "N/A") is None


def _ada_node(tmp_path: Path, xml: str | None) -> Path:
    """A fake nvidia-smi whose one GPU is the real RTX 4000 Ada capture's (tests/data/smi/xml/):
    the query answers with h100_hgx_8gpu.csv's first row under that GPU's UUID and bus id, and
    ``-q -x`` with ``xml`` (the capture itself by default)."""
    script = fake_smi(tmp_path, "h100_hgx_8gpu.csv")
    header, first, *_ = list(csv.reader((tmp_path / "current.csv").open(), skipinitialspace=True))
    first[1:3] = ["GPU-37037c3f-65c8-ec4d-24a9-420204ad8026", "00000000:06:00.0"]
    with (tmp_path / "current.csv").open("w", newline="") as f:
        csv.writer(f).writerows([header, first])
    text = xml if xml is not None else (DATA / "xml" / "rtx-4000-sff-ada-v13.xml").read_text()
    (tmp_path / "current.xml").write_text(text)
    return script


def test_every_fourth_collection_adds_what_only_q_x_has(tmp_path):
    """The PCIe replay counter and the time at the power cap have no --query-gpu column:
    smi:// runs nvidia-smi -q -x every 4th collection and adds them; the query's own values
    stand where both have one, and the other collections leave them absent, not 0."""
    script = _ada_node(tmp_path, None)
    collector = SmiCollector(binary=str(script), hostname="ws", clock=lambda: 1.0)
    batches = [collector.collect() for _ in range(5)]
    assert all(b.problems == () for b in batches), [b.problems for b in batches]
    got = [dict(b.samples[0].values) for b in batches]
    assert got[0]["pcie_replay_total"] == 0 and got[0]["power_violation_us"] == 4_251_825_415
    assert got[0]["gpu_temp_c"] == 61  # the query's, not the capture's 38 C
    assert all("pcie_replay_total" not in g for g in got[1:4]) and "pcie_replay_total" in got[4]
    runs = (tmp_path / "pid.argv").read_text().splitlines()
    assert [r for r in runs if "-x" in r.split()] == ["-q -x", "-q -x"]


def test_a_q_x_that_fails_is_a_problem_and_the_query_stands(tmp_path):
    script = _ada_node(tmp_path, "<nvidia_smi_log><gpu id='00000000:06:00.0'>")
    batch = SmiCollector(binary=str(script), hostname="ws").collect()
    assert len(batch.samples) == 1 and "pcie_replay_total" not in batch.samples[0].values
    (problem,) = batch.problems
    assert problem.startswith("nvidia-smi -q -x: not well-formed XML")
    never = open_collector(f"smi://?binary={script}&xml_every=0")
    never.collect()
    assert sum("-x" in r.split() for r in (tmp_path / "pid.argv").read_text().splitlines()) == 1
    with pytest.raises(ConfigError, match="xml_every must be a whole number"):
        open_collector(f"smi://?binary={script}&xml_every=often")
