"""Telegraf's line protocol (tests/data/telegraf, SOURCES.md there) read value by value, and
against what gpuwarden reads from the same real captures directly."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from gpuwarden.collectors.dcgm import DcgmCollector
from gpuwarden.collectors.lineproto import parse_line
from gpuwarden.collectors.smi_text import read_query_text
from gpuwarden.collectors.telegraf import points_to_batches
from gpuwarden.telemetry import TIME_UNKNOWN, Batch, GpuId, NodeInfo

DATA = Path(__file__).resolve().parents[1] / "data"
TELEGRAF = DATA / "telegraf"


def read(name: str, host: str = "here") -> list[Batch]:
    lines = (TELEGRAF / name).read_text().splitlines()
    points = [(n, p) for n, line in enumerate(lines, 1) if (p := parse_line(line)) is not None]
    return points_to_batches(points, host=host).batches


def test_the_plugins_published_output():
    (batch,) = read("readme_gtx10xx.lp")
    assert batch.ts == 1_523_991_122.0
    by_index = {s.gpu.index: s for s in batch.samples}
    assert by_index[0].gpu == GpuId(
        "8218cf", 0, "GPU-823bc202-6279-6f2c-d729-868a30f14d96", "", "GeForce GTX 1070"
    )
    assert dict(by_index[0].values) == {
        "gpu_temp_c": 53, "gpu_util_pct": 100, "mem_copy_util_pct": 90,
        "fb_total_mib": 8112, "fb_used_mib": 549, "fb_free_mib": 7563,
    }  # fmt: skip
    assert by_index[2].values["gpu_temp_c"] == 58 and by_index[1].gpu.model == "GeForce GTX 1080"


def test_schema_v12_fields_yes_no_strings_and_the_driver():
    t4, a10g = (b.samples[0] for b in read("tests_t4_a10g.lp"))
    assert t4.gpu.hostname == "t4-node" and t4.gpu.model == "Tesla T4"
    assert t4.values["power_w"] == 26.78 and t4.values["pcie_link_width"] == 8
    assert t4.values["retired_pages_sbe"] == 0 and t4.values["retired_pages_pending"] == 0  # "No"
    assert "remapped_rows_correctable" not in t4.values  # a T4 retires pages instead
    assert a10g.values["remapped_rows_failure"] == 0 and a10g.values["gpu_temp_c"] == 17
    (node,) = read("tests_t4_a10g.lp")[0].nodes
    assert node == NodeInfo(1_689_872_450.0, "t4-node", "515.105.01", "11.7")


def test_schema_v13_reads_as_the_same_capture_does_through_q_text():
    """Telegraf's v13 fields of the real H100 -q capture read as gpuwarden reads the capture
    itself, field for field. Power: v13 writes the instantaneous draw (``power_draw``, 588.39
    W) and the average (``power_draw_average``, 629.45 W); the average is read, as -q text's."""
    (batch,) = read("h100_v13_from_q.lp", host="node7")
    (ours,) = batch.samples
    (q,) = read_query_text((DATA / "smi/real/h100_sxm_r590_q_load.txt").read_text(),
                           hostname="node7").samples  # fmt: skip
    assert ours.gpu._replace(pci_bus_id=q.gpu.pci_bus_id) == q.gpu
    assert ours.values["power_w"] == q.values["power_w"] == 629.45
    both = set(ours.values) & set(q.values)
    assert {k: ours.values[k] for k in both} == {k: q.values[k] for k in both}
    # what -q text has and Telegraf does not write: the PCIe replay counter, max link, the mask
    assert set(q.values) - set(ours.values) == {
        "pcie_replay_total", "pcie_link_gen_max", "pcie_link_width_max", "clock_event_reasons"
    }  # fmt: skip
    assert set(ours.values) - set(q.values) == set()


@pytest.mark.parametrize("name", ["dcgm_l40s_prometheus_v1.lp", "dcgm_l40s_prometheus_v2.lp"])
def test_dcgm_through_telegraf_reads_as_the_scrape_itself(name):
    body = (DATA / "dcgm/real/l40s_driver595_full.txt").read_text()
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text=body)))
    collector = DcgmCollector(["http://gpu1-wl8sg:9400/metrics"], client=client, clock=lambda: 0.0)
    try:
        (direct,) = collector.collect().samples
    finally:
        collector.close()
        client.close()
    (batch,) = read(name)
    (ours,) = batch.samples
    assert ours.gpu == direct.gpu
    assert dict(ours.values) == dict(direct.values)
    assert [r.field for r in batch.rejected] == ["mem_temp_c"]  # 0 C on GDDR: no sensor


def test_ecc_parts_are_summed_only_when_all_read():
    line = (
        "nvidia_smi,index=0,uuid=GPU-1 ecc_errors_volatile_dram_correctable=3i,"
        "ecc_errors_volatile_sram_correctable=2i,ecc_errors_volatile_dram_uncorrectable=1i,"
        "ecc_errors_volatile_sram_uncorrectable_parity=1i,"
        "ecc_errors_volatile_sram_uncorrectable_secded=0i,"
        "ecc_errors_aggregate_dram_correctable=9i,ecc_errors_aggregate_sram_uncorrectable=4i,"
        "ecc_errors_aggregate_dram_uncorrectable=0i 60000000000"
    )
    point = parse_line(line)
    assert point is not None
    (batch,) = points_to_batches([(1, point)], host="h").batches
    values = batch.samples[0].values
    assert values["ecc_sbe_volatile_total"] == 5 and values["ecc_dbe_volatile_total"] == 2
    assert values["ecc_dbe_aggregate_total"] == 4  # one SRAM field, or its two halves
    assert "ecc_sbe_aggregate_total" not in values  # SRAM correctable missing: unknown, not 9


def test_other_measurements_are_counted_and_unplaced_points_named():
    lines = [
        "cpu,host=h usage_idle=99.5 60000000000",
        "nvidia_smi_process,name=python pid=42i,used_memory=100i 60000000000",
        "nvidia_smi,uuid=GPU-1 temperature_gpu=40i 60000000000",  # no index
        "nvidia_smi,index=1,uuid=GPU-2 temperature_gpu=41i",  # no time
        "nvidia_smi,index=0,uuid=GPU-1 temperature_gpu=40i 60000000000",
    ]
    points = [(n, p) for n, line in enumerate(lines, 1) if (p := parse_line(line)) is not None]
    read_ = points_to_batches(points, host="h")
    assert read_.other == {"cpu": 1, "nvidia_smi_process": 1}
    assert read_.unplaced == [
        (3, "a nvidia_smi point without a GPU index tag"),
        (4, "a nvidia_smi point without a time"),
    ]
    (batch,) = read_.batches
    assert [s.gpu for s in batch.samples] == [GpuId("h", 0, "GPU-1")]


def test_the_last_xid_gauge_over_time_gives_the_xid_events():
    """dcgm-exporter's DCGM_FI_DEV_XID_ERRORS through Telegraf (both shapes), read in time
    order: an event each time it changes to another non-zero code; the first code of a GPU is
    of unknown time; 0 is no Xid. A second read of the same source (the next chunk) goes on
    from where the first stopped."""
    from gpuwarden.collectors.telegraf import XidHistory
    from gpuwarden.telemetry import time_unknown

    def v1(code: int, minute: int) -> str:
        return (f"DCGM_FI_DEV_XID_ERRORS,Hostname=n1,UUID=GPU-1,gpu=0 gauge={code} "
                f"{minute * 60_000_000_000}")  # fmt: skip

    def v2(code: int, minute: int) -> str:
        return (f"prometheus,Hostname=n1,UUID=GPU-2,gpu=1 DCGM_FI_DEV_XID_ERRORS={code},"
                f"DCGM_FI_DEV_GPU_TEMP=50 {minute * 60_000_000_000}")  # fmt: skip

    lines = [v1(43, 1), v1(43, 2), v1(0, 3), v1(48, 4), v1(48, 5), v1(79, 6),
             v2(0, 1), v2(13, 2), v2(13, 3)]  # fmt: skip
    history = XidHistory()
    events = []
    for part in (lines[:4], lines[4:]):  # two chunks of one source
        points = [(n, p) for n, line in enumerate(part, 1) if (p := parse_line(line)) is not None]
        for batch in points_to_batches(points, host="h", xids=history).batches:
            events += batch.events
    said = [(e.gpu.uuid, e.ts / 60, e.code, time_unknown(e.detail)) for e in events]
    assert sorted(said) == [
        ("GPU-1", 1, 43, True), ("GPU-1", 4, 48, False), ("GPU-1", 6, 79, False),
        ("GPU-2", 2, 13, False),
    ]  # fmt: skip
    assert all(e.kind == "xid" and "through Telegraf" in e.detail for e in events)


#: The events the windowed Xid count fixtures (tests/data/telegraf/xid_count_t400_v*.lp) hold
XID_EVENTS = [(600.0, 42, TIME_UNKNOWN), (720.0, 42, "2 new"), (840.0, 42, "1 new"),
              (900.0, 79, "1 new")]  # fmt: skip


def _scrapes(name: str) -> dict[float, str]:
    """A metric_version 1 fixture (a measurement per series, its labels as tags) back into
    the dcgm-exporter scrapes it was read from, by time."""
    out: dict[float, str] = {}
    for line in (TELEGRAF / name).read_text().splitlines():
        if (p := parse_line(line)) is not None and p.ts is not None:
            labels = ",".join(f'{k}="{v}"' for k, v in p.tags.items())
            out[p.ts] = out.get(p.ts, "") + f"{p.measurement}{{{labels}}} {p.fields['gauge']:g}\n"
    return out


def _said(events) -> list[tuple[float, int, str]]:
    return [(e.ts, e.code, e.detail.split(" (")[0]) for e in events]


def test_the_windowed_xid_count_fixture_is_what_dcgm_http_reads_live():
    scrapes = _scrapes("xid_count_t400_v1.lp")
    bodies = iter(scrapes.values())
    client = httpx.Client(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, text=next(bodies)))
    )
    clock = {"now": 0.0}
    live = DcgmCollector(["http://workstation:9400/metrics"], client=client,
                         clock=lambda: clock["now"])  # fmt: skip
    events = []
    for ts in scrapes:
        clock["now"] = ts
        events += live.collect().events
    live.close()
    client.close()
    assert _said(events) == XID_EVENTS


@pytest.mark.parametrize("name", ["xid_count_t400_v1.lp", "xid_count_t400_v2.lp"])
@pytest.mark.parametrize("chunk", [1, 50_000])
def test_the_windowed_xid_count_reads_as_dcgm_http_reads_it_live(name, chunk, monkeypatch):
    """A history of dcgm-exporter 4.x's DCGM_EXP_XID_ERRORS_COUNT kept through Telegraf gives
    the events ``dcgm+http://`` gives scraping the same series live (the test above), in both
    of Telegraf's shapes, and when the file is read a line at a time (a chunk ends between
    times, so no scrape is cut in two: the count read in one chunk, its gauge in the next,
    was two events)."""
    import gpuwarden.ingest as ing
    from gpuwarden.store.sqlite import SqliteStore

    monkeypatch.setattr(ing, "LINE_CHUNK", chunk)
    store = SqliteStore()
    report = ing.ingest_line_protocol(store, TELEGRAF / name, host="h")
    assert report.events == len(XID_EVENTS) and not report.ignored
    assert _said(store.read_events(kinds=["xid"]).itertuples()) == XID_EVENTS
    store.close()
