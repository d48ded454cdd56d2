"""``gpuwarden ingest --influxql``: a simulated fleet written to a real InfluxDB 1.x as
Telegraf writes it (one node through the nvidia_smi input's fields, the other as dcgm-exporter
series through the prometheus input, metric_version 2), read back over InfluxQL into SQLite:
every value Telegraf's schema carries arrives where it came from, and the rest stays missing."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.errors import StoreError
from gpuwarden.ingest import ingest_influxql
from gpuwarden.models.simdata import fleet_spec
from gpuwarden.sim import Fleet
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import FIELD_BY_DCGM, FIELDS

if TYPE_CHECKING:
    from conftest import Daemon

pytestmark = pytest.mark.integration

T0 = 1_767_225_600.0  # 2026-01-01
DB = "telegraf"
#: catalogue field -> Telegraf nvidia_smi field, written out from Telegraf's schema_v13 parser
#: (not from gpuwarden's map, which this checks); the ECC totals go in as DRAM and SRAM parts
TO_TELEGRAF = {
    "gpu_temp_c": "temperature_gpu", "mem_temp_c": "temperature_memory",
    "power_w": "power_draw", "power_limit_w": "power_limit",
    "gpu_util_pct": "utilization_gpu", "mem_copy_util_pct": "utilization_memory",
    "fb_total_mib": "memory_total", "fb_used_mib": "memory_used", "fb_free_mib": "memory_free",
    "sm_clock_mhz": "clocks_current_sm", "mem_clock_mhz": "clocks_current_memory",
    "pcie_link_gen": "pcie_link_gen_current", "pcie_link_width": "pcie_link_width_current",
    "retired_pages_sbe": "retired_pages_multiple_single_bit",
    "retired_pages_dbe": "retired_pages_double_bit",
    "retired_pages_pending": "retired_pages_pending",
    "remapped_rows_correctable": "remapped_rows_correctable",
    "remapped_rows_uncorrectable": "remapped_rows_uncorrectable",
    "remapped_rows_pending": "remapped_rows_pending",
    "remapped_rows_failure": "remapped_rows_failure",
    "power_violation_us": "clocks_event_reasons_counters_sw_power_cap",
}  # fmt: skip
ECC = {
    "ecc_sbe_volatile_total": "ecc_errors_volatile_{}_correctable",
    "ecc_dbe_volatile_total": "ecc_errors_volatile_{}_uncorrectable",
    "ecc_sbe_aggregate_total": "ecc_errors_aggregate_{}_correctable",
    "ecc_dbe_aggregate_total": "ecc_errors_aggregate_{}_uncorrectable",
}
TO_DCGM = {f.name: f.dcgm for f in FIELDS if FIELD_BY_DCGM.get(f.dcgm) == f.name}


def _tag(text: str) -> str:
    return text.replace(",", r"\,").replace("=", r"\=").replace(" ", r"\ ")


def _lines(frame: pd.DataFrame, gauge: dict[tuple[str, float], int] | None = None) -> list[str]:
    """The fleet's samples as Telegraf writes them; ``gauge``: dcgm-exporter's last-Xid gauge
    of node001's GPUs, (uuid, ts) -> code, written beside their series."""
    out = []
    for row in frame.itertuples(index=False):
        r = row._asdict()
        ns = round(r["ts"] * 1e9)
        if r["hostname"] == "node000":  # inputs.nvidia_smi
            fields = {TO_TELEGRAF[k]: v for k, v in r.items() if k in TO_TELEGRAF}
            for ours, pattern in ECC.items():
                fields[pattern.format("dram")] = r[ours]
                fields[pattern.format("sram")] = 0.0 if not math.isnan(r[ours]) else math.nan
            tags = f"host={r['hostname']},index={r['gpu']},name={_tag(r['model'])},uuid={r['uuid']}"
            measurement = "nvidia_smi"
        else:  # inputs.prometheus over dcgm-exporter, metric_version 2
            fields = {TO_DCGM[k]: v for k, v in r.items() if k in TO_DCGM}
            if gauge is not None:
                fields["DCGM_FI_DEV_XID_ERRORS"] = float(gauge[(r["uuid"], r["ts"])])
            tags = (
                f"Hostname={r['hostname']},UUID={r['uuid']},gpu={r['gpu']},host=telegraf-1,"
                f"modelName={_tag(r['model'])},pci_bus_id={r['pci_bus_id']}"
            )
            measurement = "prometheus"
        said = ",".join(f"{k}={float(v)!r}" for k, v in fields.items() if not math.isnan(v))
        out.append(f"{measurement},{tags} {said} {ns}")
    return out


def _write(influxdb: Daemon, lines: list[str]) -> None:
    httpx.post(f"{influxdb.url}/query", params={"q": f"CREATE DATABASE {DB}"}).raise_for_status()
    for i in range(0, len(lines), 5000):
        r = httpx.post(f"{influxdb.url}/write", params={"db": DB},
                       content="\n".join(lines[i : i + 5000]).encode(), timeout=60)  # fmt: skip
        assert r.status_code == 204, r.text


def test_the_map_is_telegrafs():
    from gpuwarden.collectors.telegraf import TELEGRAF_FIELDS

    assert {ours: theirs for theirs, ours in TELEGRAF_FIELDS.items()} == TO_TELEGRAF


def _last_xid_gauge(frame: pd.DataFrame, xids: list) -> dict[tuple[str, float], int]:
    """dcgm-exporter's DCGM_FI_DEV_XID_ERRORS at each sample: the last Xid code logged at or
    before it, 0 before any."""
    gauge = {}
    for uuid, rows in frame.groupby("uuid"):
        mine = sorted((e.ts, e.code) for e in xids if e.gpu.uuid == uuid)
        for ts in rows["ts"]:
            codes = [c for t, c in mine if t <= ts]
            gauge[(uuid, ts)] = int(codes[-1]) if codes else 0
    return gauge


def test_a_fleet_in_influxdb_arrives_value_for_value(influxdb: Daemon, tmp_path) -> None:
    fleet = Fleet(fleet_spec(nodes=2, days=1.5, accel=50.0, seed=9, start_ts=T0))
    chunks = list(fleet.chunks(progress=False))
    frame = pd.concat([c.samples for c in chunks], ignore_index=True)
    xids = [e for c in chunks for e in c.events if e.kind == "xid" and e.gpu.hostname == "node001"]
    assert [e.code for e in xids] == [43, 63]  # the seed's two Xids, both on node001
    gauge = _last_xid_gauge(frame, xids)
    _write(influxdb, _lines(frame, gauge))
    url = f"influxql://127.0.0.1:{influxdb.port}?db={DB}"
    store = SqliteStore(tmp_path / "s.db")
    report = ingest_influxql(store, url, start=T0 - 86_400, end=T0 + 5 * 86_400)
    assert report.rows_stored == len(frame) and report.bad_rows_total == 0
    assert report.lines_read == len(frame)
    got = store.read_samples(start=T0 - 1, end=T0 + 5 * 86_400).set_index(["uuid", "ts"])
    want = frame.set_index(["uuid", "ts"]).loc[got.index]
    assert len(got) == len(frame)
    for node, carried in (("node000", set(TO_TELEGRAF) | set(ECC)), ("node001", set(TO_DCGM))):
        mine = (want["hostname"] == node).to_numpy()
        for field in sorted(set(want.columns) & set(got.columns) - {"hostname", "gpu", "model",
                                                                    "pci_bus_id", "rack"}):  # fmt: skip
            a, b = got.loc[mine, field].to_numpy(float), want.loc[mine, field].to_numpy(float)
            if field in carried:
                assert np.allclose(a, b, equal_nan=True, rtol=1e-12), (node, field)
            else:  # not in Telegraf's schema: missing, never 0
                assert np.isnan(a).all(), (node, field)
    assert set(got.loc[want["hostname"] == "node001", "pci_bus_id"]) == set(
        want.loc[want["hostname"] == "node001", "pci_bus_id"]
    )
    # the last-Xid gauge's changes: each Xid at the first sample after it was logged
    stored = store.read_events(start=T0 - 1, end=T0 + 5 * 86_400, kinds=["xid"])
    first_after = [
        (e.gpu.uuid, min(ts for (u, ts), c in gauge.items() if u == e.gpu.uuid and ts >= e.ts),
         e.code)
        for e in xids
    ]  # fmt: skip
    assert sorted(zip(stored["uuid"], stored["ts"], stored["code"], strict=True)) == sorted(
        first_after
    )
    assert report.events == 2


def test_a_database_that_is_not_there_and_one_without_gpus_are_named(influxdb: Daemon, tmp_path):
    _write(influxdb, ["cpu,host=h usage_idle=99.5 1767225600000000000"])
    store = SqliteStore(tmp_path / "s.db")
    base = f"influxql://127.0.0.1:{influxdb.port}"
    with pytest.raises(StoreError, match="has no database 'nope' \\(it has: telegraf\\)"):
        ingest_influxql(store, f"{base}?db=nope", start=T0 - 86_400, end=T0)
    result = CliRunner().invoke(
        main, ["ingest", "--store", f"sqlite:///{tmp_path / 's.db'}", "--influxql",
               f"{base}?db={DB}", "--since", "2025-12-31"], env={}
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "no GPU telemetry" in result.output and "measurements: cpu" in result.output


def test_a_point_without_a_gpu_index_is_named_and_the_rest_stored(influxdb: Daemon, tmp_path):
    ns = round(T0 * 1e9)
    _write(influxdb, [
        f"nvidia_smi,host=n1,index=0,uuid=GPU-a temperature_gpu=40i {ns}",
        f"nvidia_smi,host=n1,uuid=GPU-b temperature_gpu=41i {ns}",
    ])  # fmt: skip
    listed = tmp_path / "bad.txt"
    result = CliRunner().invoke(
        main, ["ingest", "--store", f"sqlite:///{tmp_path / 's.db'}", "--influxql",
               f"influxql://127.0.0.1:{influxdb.port}?db={DB}", "--since", "2025-12-31",
               "--until", "2026-01-02", "--bad-lines", str(listed)], env={}
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "stored 1 sample (2 points read, 2025-12-31 00:00 UTC to 2026-01-02 00:00 UTC)" in (
        result.output
    )
    assert ": a nvidia_smi point without a GPU index tag" in result.output, result.output
    assert f"1 point not stored; all listed in {listed}" in result.output
    assert "a nvidia_smi point without a GPU index tag" in listed.read_text()


def test_points_years_apart_are_read_without_walking_every_hour(influxdb: Daemon, tmp_path):
    """Telegraf's fixtures hold points in 2018, 2023 and 2026: the reader jumps over the empty
    hours between them (one query to find the next point) instead of asking for each of the
    72,000 hours of the range."""
    from pathlib import Path

    lines = []
    for path in sorted((Path(__file__).resolve().parents[1] / "data" / "telegraf").glob("*.lp")):
        lines += [x for x in path.read_text().splitlines() if x and not x.startswith("#")]
    _write(influxdb, lines)
    asked: list[httpx.Request] = []
    client = httpx.Client(event_hooks={"request": [asked.append]}, timeout=30)
    store = SqliteStore(tmp_path / "s.db")
    report = ingest_influxql(store, f"influxql://127.0.0.1:{influxdb.port}?db={DB}",
                             start=1_522_540_800.0, end=1_784_505_600.0, host="h",
                             client=client)  # fmt: skip
    client.close()
    assert report.rows_stored == 8 and report.lines_read == 31
    assert len(asked) < 100, len(asked)


@pytest.mark.parametrize("shape", [1, 2])
def test_the_windowed_xid_count_reads_as_from_the_file(influxdb: Daemon, tmp_path, shape):
    """dcgm-exporter 4.x's windowed Xid count through Telegraf, stored in InfluxDB 1.x in either
    of the prometheus input's shapes, gives over InfluxQL the events the file gives (which
    tests/collectors/test_telegraf.py checks against ``dcgm+http://`` reading it live)."""
    from pathlib import Path

    from gpuwarden.ingest import ingest_line_protocol

    fixture = Path(__file__).resolve().parents[1] / "data" / "telegraf"
    path = fixture / f"xid_count_t400_v{shape}.lp"
    _write(influxdb, [x for x in path.read_text().splitlines() if x and not x.startswith("#")])
    from_file = SqliteStore()
    ingest_line_protocol(from_file, path, host="h")
    store = SqliteStore(tmp_path / "s.db")
    url = f"influxql://127.0.0.1:{influxdb.port}?db={DB}"
    report = ingest_influxql(store, url, start=0.0, end=3_600.0, host="h")
    assert report.events == 4 and report.rows_stored == 6
    columns = ["ts", "uuid", "code", "detail"]
    events = store.read_events(kinds=["xid"])[columns]
    pd.testing.assert_frame_equal(events, from_file.read_events(kinds=["xid"])[columns])
    store.close()
    from_file.close()
