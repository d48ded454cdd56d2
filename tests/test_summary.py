"""`gpuwarden summary`: the fleet in words, with gpuwarden's stored verdicts."""

from __future__ import annotations

import math

from gpuwarden.health import GpuState, Reason, Verdict
from gpuwarden.readings import screen
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.summary import fleet_summary
from gpuwarden.telemetry import Batch, GpuId, Sample

T = 1_767_225_600.0
A, B, OLD = GpuId("n1", 0, "GPU-a"), GpuId("n1", 1, "GPU-b"), GpuId("n1", 1, "GPU-old")


def _store(tmp_path) -> SqliteStore:
    store = SqliteStore(tmp_path / "s.db")
    for k in range(3):
        ts = T + 60 * k
        store.write_batch(Batch(ts, tuple(Sample(ts, g, {"gpu_temp_c": 50.0}) for g in (A, B))))
    return store


def test_without_verdicts_it_says_how_to_get_them(tmp_path):
    text = fleet_summary(_store(tmp_path)).render()
    assert "Verdicts: none stored in the last day" in text and "score --into" in text
    # one node reads as one ("1 nodes" before)
    assert text.startswith("Fleet: 1 node, 2 GPU slots, 2 GPU boards seen\n")
    assert "Reporting now: 2 GPUs; missing: 0" in text


def test_the_newest_verdict_of_each_slots_board_is_counted_and_named(tmp_path):
    store = _store(tmp_path)
    why = (Reason("single-bit errors 40/day", {"sbe_per_day_24h": 40.0}),)
    store.write_verdicts(
        [
            Verdict(T - 7200, OLD, GpuState.UNHEALTHY, math.nan, "hard-signal"),  # replaced
            Verdict(T - 3600, A, GpuState.OK, 0.2),
            Verdict(T + 60, A, GpuState.AT_RISK, 0.83, reasons=why),
            Verdict(T + 60, B, GpuState.OK, 0.1),
            Verdict(T - 3 * 86400, B, GpuState.UNHEALTHY, math.nan, "hard-signal"),  # too old
        ]
    )
    summary = fleet_summary(store)
    assert sorted(summary.verdicts["uuid"]) == ["GPU-a", "GPU-b"]
    text = summary.render()
    assert "Verdicts (newest per GPU, last day): 0 unhealthy, 1 at-risk, 1 ok" in text
    assert "n1 gpu0  at-risk   risk 0.83  model: single-bit errors 40/day" in text


def test_a_fleet_whose_verdicts_are_all_ok_is_summed_up(tmp_path):
    """No GPU flagged: the counts, and no flagged line (it failed on every healthy fleet)."""
    store = _store(tmp_path)
    store.write_verdicts(
        [Verdict(T + 60, A, GpuState.OK, 0.2), Verdict(T + 60, B, GpuState.OK, 0.1)]
    )
    text = fleet_summary(store).render()
    assert "Verdicts (newest per GPU, last day): 0 unhealthy, 0 at-risk, 2 ok" in text
    assert "n1 gpu" not in text.split("Verdicts")[1].split("Failures")[0]


def test_rejected_readings_are_counted_per_gpu_and_field(tmp_path):
    store = _store(tmp_path)
    t4 = GpuId("n2", 0, "GPU-t4", model="Tesla T4")
    for k in range(3):
        ts = T + 60 * k
        power = 500.0 if k == 2 else 68.2  # a T4 (70 W) cannot draw 500 W
        sample = Sample(ts, t4, {"gpu_temp_c": 74.0, "mem_temp_c": 0.0, "power_w": power})
        store.write_batch(screen(Batch(ts, (sample,))))
    summary = fleet_summary(store)
    assert summary.rejections[["hostname", "gpu", "field", "reason", "count"]].values.tolist() == [
        ["n2", 0, "mem_temp_c", "no_sensor", 3],
        ["n2", 0, "power_w", "out_of_range", 1],
    ]
    text = summary.render()
    assert "Rejected readings (stored as missing), last 168 h: 3 no_sensor, 1 out_of_range" in text
    assert "     3  n2 gpu0  mem_temp_c               no_sensor" in text
    assert "     1  n2 gpu0  power_w                  out_of_range" in text
    kept = store.read_samples(hostnames=["n2"])
    assert kept["gpu_temp_c"].tolist() == [74.0] * 3 and kept["mem_temp_c"].isna().all()
    assert kept["power_w"].tolist()[:2] == [68.2, 68.2] and math.isnan(kept["power_w"].iloc[2])


def test_without_rejections_it_says_none(tmp_path):
    assert "Rejected readings: none" in fleet_summary(_store(tmp_path)).render()


def test_signals_the_store_lacks_are_named_with_their_metrics(tmp_path):
    # dcgm-exporter's default counters: temperatures, no ECC counts, no NVLink, no remaps
    store = _store(tmp_path)
    text = fleet_summary(store).render()
    assert "Signals the model reads that the store lacks (left out of the risk, not zero):" in text
    assert (
        "      2 of 2 GPUs  single-bit ECC errors "
        "(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL or DCGM_FI_DEV_ECC_SBE_AGG_TOTAL)" in text
    )
    assert "core temperature" not in text.split("lacks")[1]  # gpu_temp_c is there
    assert "deploy/dcgm-exporter/gpuwarden-counters.csv" in text
    # a fleet logged by nvidia-smi: the query fields that add them, and what no query field has
    smi = next(line for line in text.splitlines() if "--query-gpu=" in line)
    assert "ecc.errors.corrected.volatile.total" in smi and "remapped_rows.pending" in smi
    assert "temperature.gpu" not in smi  # there already
    assert "not in nvidia-smi's --query-gpu: thermal violation time, PCIe replays, NVLink" in text
    assert "nvidia-smi -q logs show PCIe replays: gpuwarden ingest --smi-q" in text


def test_a_replaced_boards_errors_are_not_on_the_watch_list(tmp_path):
    """The old board of slot n1/1 logged double-bit errors and was replaced by GPU-b: the
    watch list names the boards in the fleet, not the one taken out (its failure is counted
    under the failures recorded)."""
    store = SqliteStore(tmp_path / "s.db")
    for k, dbe in enumerate((0.0, 2.0)):
        ts = T - 3600 + 60 * k
        store.write_batch(Batch(ts, (Sample(ts, OLD, {"ecc_dbe_volatile_total": dbe}),)))
    for k, sbe in enumerate((0.0, 50.0, 90.0)):
        ts = T + 60 * k
        samples = tuple(
            Sample(ts, g, {"ecc_sbe_volatile_total": sbe if g is A else 0.0}) for g in (A, B)
        )
        store.write_batch(Batch(ts, samples))
    watch = fleet_summary(store).watch
    assert list(watch["uuid"]) == ["GPU-a"]
    assert watch["sbe"].iloc[0] == 90.0


def test_an_empty_store_and_a_store_of_kernel_log_xids_alone(tmp_path):
    """An empty store read "Telemetry: 1969-12-25 .. 1970-01-01" and "all in the store"; a
    kernel log ingested before any telemetry read "Xid events: none" (its Xids stored as of no
    known GPU, and the window ended at 1970)."""
    from gpuwarden.ingest import ingest_kernel_log

    store = SqliteStore(tmp_path / "s.db")
    text = fleet_summary(store).render()
    assert "1970" not in text and "Telemetry: none stored" in text, text
    assert "Signals the model reads: none, no telemetry stored" in text
    log = tmp_path / "kern.log"
    log.write_text(
        "2026-01-01T00:00:05+00:00 gpu17 kernel: NVRM: Xid (PCI:0000:9b:00): 79, "
        "pid=1, GPU has fallen off the bus.\n"
    )
    assert ingest_kernel_log(store, log).unmatched_total == 1
    text = fleet_summary(store).render()
    assert "Xid events, last" not in text, text
    assert "Xid events of no known GPU" in text and "Xid 79" in text, text
    assert "events 2025-12-25 00:00 .. 2026-01-01 00:00 UTC" in text, text


def test_an_xid_matched_by_a_second_load_is_not_also_counted_unmatched(tmp_path):
    """The ingest hint says: load telemetry with pci_bus_id, then the log again. The store
    keeps the first load's unmatched event beside the matched one; the summary counts it once."""
    from gpuwarden.ingest import ingest_kernel_log
    from gpuwarden.telemetry import Event

    store = SqliteStore(tmp_path / "s.db")
    log = tmp_path / "kern.log"
    log.write_text(
        "2026-01-01T00:00:05+00:00 node7 kernel: NVRM: Xid (PCI:0000:9b:00): 79, pid=1, "
        "GPU has fallen off the bus.\n"
        "2026-01-01T00:00:09+00:00 node7 kernel: NVRM: Xid (PCI:0000:cb:00): 13, pid=9, "
        "Graphics Exception\n"
    )
    ingest_kernel_log(store, log)
    h100 = GpuId("node7", 4, "GPU-509665ad", pci_bus_id="00000000:9B:00.0", model="H100")
    store.write_events([Event(T - 86400, h100, "gpu_recovered")])  # its telemetry, later
    ingest_kernel_log(store, log)
    assert len(store.read_events(kinds=["xid", "xid_unmatched"])) == 3  # both loads kept
    text = fleet_summary(store, now=T + 60).render()
    xids = text[text.index("Xid events, last 168 h:") : text.index("Rejected readings")]
    assert "1  Xid 79" in xids and xids.count("Xid 79") == 1, xids
    unmatched = xids[xids.index("of no known GPU") :]
    assert "Xid 13" in unmatched and "Xid 79" not in unmatched, xids


def test_memory_errors_are_counted_by_type(tmp_path):
    """A store of `ingest --memory-errors` events showed none of them."""
    from gpuwarden.collectors.memory_errors import ingest_memory_errors

    log = tmp_path / "hbm.csv"
    log.write_text(
        "Datacenter,Server,Name,Stack,SID,PcId,BankGroup,BankArray,Col,Row,Time,EccType\n"
        "dc1,n1,DSA3,0x3,0x0,0x1,0x2,0x1,0x54,0x3e2b,1767225600,CE\n"
        "dc1,n1,DSA3,0x3,0x0,0x1,0x2,0x1,0x54,0x3e2c,1767225660,CE\n"
        "dc1,n2,DSA1,0x0,0x0,0x1,0x2,0x1,0x54,0x3e2b,1767225720,UER\n"
    )
    store = SqliteStore(tmp_path / "s.db")
    ingest_memory_errors(store, log)
    text = fleet_summary(store).render()
    assert "Memory errors, last 168 h:" in text, text
    assert "    2  CE   on 1 device" in text and "    1  UER  on 1 device" in text, text
    assert "UEO" not in text
    # devices known only from the log have not stopped reporting: they never did
    assert (
        "Reporting now: 0 GPUs; missing: 0" in text
        and "Known from events alone (no telemetry stored): 2 devices" in text
    )


def test_a_slot_that_stopped_reporting_is_missing_not_events_only(tmp_path):
    store = _store(tmp_path)
    later = T + 3600  # GPU-a reports on for an hour; GPU-b fell silent after three minutes
    for k in range(60):
        ts = later + 60 * k
        store.write_batch(Batch(ts, (Sample(ts, A, {"gpu_temp_c": 50.0}),)))
    text = fleet_summary(store).render()
    assert "missing: 1" in text and "n1 gpu1  last seen" in text
    assert "Known from events alone" not in text


def test_the_telemetry_span_is_what_the_store_holds_not_the_window(tmp_path):
    """Three minutes of samples read "Telemetry: 2025-12-25 .. 2026-01-01 (168 h)" (the
    week's window); one -q capture is a moment in time."""
    text = fleet_summary(_store(tmp_path)).render()
    assert "Telemetry: 2026-01-01 00:00 .. 2026-01-01 00:02 UTC (2 min)" in text, text
    assert "Rejected readings: none" in text
    one = SqliteStore(tmp_path / "one.db")
    one.write_batch(Batch(T, (Sample(T, A, {"gpu_temp_c": 50.0}),)))
    assert (
        "Telemetry: 2026-01-01 00:00 UTC only (one reading in time)" in fleet_summary(one).render()
    )
