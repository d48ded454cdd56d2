"""The store conformance suite, both tiers, on a real VictoriaMetrics 1.79."""

from __future__ import annotations

import pandas as pd
import pytest
from conformance import HOURS, T0, frame_of, load_writable
from conformance.read import *  # noqa: F403
from conformance.write import *  # noqa: F403
from tsdb_servers import start_victoriametrics

from gpuwarden.store.victoriametrics import VictoriaMetricsStore

pytestmark = pytest.mark.integration


@pytest.fixture
def rollup_rtol() -> float:
    return 1e-12  # the server's avg_over_time adds in its own order


def _clock() -> float:  # "now" for the stores: just after DATA
    return T0 + HOURS * 3600 + 60


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    vm = start_victoriametrics(tmp_path_factory.mktemp("vm-read"))
    store = load_writable(VictoriaMetricsStore(vm.url, clock=_clock, concurrency=2))
    yield store
    store.close()
    vm.stop()


@pytest.fixture
def empty(tmp_path):
    vm = start_victoriametrics(tmp_path / "vm")
    store = VictoriaMetricsStore(vm.url, clock=_clock, refresh_s=0.0)
    yield store
    store.close()
    vm.stop()


def test_compact_keeps_hourly_rollups_that_reads_use(empty) -> None:
    """After compact the rolled-up hours come from the rollup series: with the raw samples
    of a field deleted on the server, an hourly read of those hours still has them."""
    import httpx

    load_writable(empty)  # compacts up to DATA.rolled_until, mid-hour: two whole hours
    assert empty.rolled_until() == T0 + 2 * 3600
    span = {"start": T0, "end": T0 + 2 * 3600, "fields": ["gpu_temp_c", "mem_temp_c_max"]}
    before = empty.read_window(**span, resolution_s=3600)
    assert len(before) == 2 * 3 and before["gpu_temp_c"].notna().all()
    deleted = httpx.post(
        f"{empty.http.base}/api/v1/admin/tsdb/delete_series",
        data={"match[]": ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP"]},
    )
    assert deleted.status_code == 204
    assert empty.read_samples(fields=["gpu_temp_c"]).empty  # the raw samples are gone
    after = empty.read_window(**span, resolution_s=3600)
    pd.testing.assert_frame_equal(after, before)
    tail = empty.read_window(start=T0 + 2 * 3600, end=T0 + 3 * 3600, fields=["gpu_temp_c"],
                             resolution_s=3600)  # fmt: skip
    assert tail.empty  # not rolled up: read live, and the raw samples are gone


def test_collect_and_ingest_write_into_victoriametrics(empty, tmp_path) -> None:
    from click.testing import CliRunner

    from gpuwarden.cli import main

    url = empty.http.base.replace("http://", "victoriametrics://")
    sim = f"sim://?nodes=2&gpus=2&seed=3&step=60&start={int(T0)}"
    r = CliRunner().invoke(
        main,
        ["collect", "--collector", sim, "--store", url, "--iterations", "3", "--interval", "0.01"],
    )
    assert r.exit_code == 0, r.output
    assert r.output.strip().endswith("0 collector errors, 0 store errors")
    got = empty.read_samples(start=T0, end=T0 + 3600, fields=["gpu_temp_c"])
    assert len(got) == 3 * 4 and got["gpu_temp_c"].notna().all()
    csv = tmp_path / "export.csv"
    csv.write_text(
        "timestamp,Hostname,gpu,UUID,DCGM_FI_DEV_GPU_TEMP,DCGM_FI_DEV_ECC_SBE_VOL_TOTAL\n"
        f"{T0 + 7200:.0f},old-node,0,GPU-old,51,7\n"
        f"{T0 + 7260:.0f},old-node,0,GPU-old,52,\n"
    )
    r = CliRunner().invoke(main, ["ingest", "--store", url, "--telemetry", str(csv)])
    assert r.exit_code == 0, r.output
    # another process wrote hours before what this store last looked at: a new one reads them
    # (a long-running one looks over the whole lookback again every hour)
    with VictoriaMetricsStore(empty.http.base, clock=_clock) as fresh:
        old = fresh.read_samples(uuids=["GPU-old"], fields=["gpu_temp_c", "ecc_sbe_volatile_total"])
    assert old["gpu_temp_c"].tolist() == [51.0, 52.0]
    assert old["ecc_sbe_volatile_total"].tolist()[0] == 7.0 and pd.isna(
        old["ecc_sbe_volatile_total"].iloc[1]
    )


def test_a_gpu_written_hours_back_is_found_by_the_store_that_wrote_it(empty) -> None:
    from conformance import DATA, C

    late = [s for s in DATA.samples if s.gpu == C and s.ts < T0 + 3600]
    empty.write_frame(frame_of([s for s in DATA.samples if s.gpu != C]))
    assert C.uuid not in set(empty.gpus()["uuid"])
    empty.write_frame(frame_of(late))  # ingest of old history: hours before the newest sample
    assert C.uuid in set(empty.gpus()["uuid"])


def test_verdicts_are_also_written_as_the_series_grafana_reads(empty) -> None:
    from conformance import DATA

    empty.write_verdicts(DATA.verdicts)
    at = T0 + 7200 + 1
    risk = empty.api.query('last_over_time(gpuwarden_risk_score{UUID="GPU-aaaa"}[1h])', at)
    state = empty.api.query('gpuwarden_gpu_state{UUID="GPU-aaaa"} == 1', at)
    turned = empty.api.query("gpuwarden_gpu_transition[3h]", at)
    assert [r.values[-1] for r in risk] == [0.8]
    assert [r.labels["state"] for r in state] == ["at-risk"]
    assert [(r.labels["from"], r.labels["to"]) for r in turned] == [("ok", "at-risk")]


def test_usage_has_its_own_rollup_series_and_the_earlier_layout_stays_readable(
    empty, monkeypatch
) -> None:
    """The report's 4 fields are one rollup series per GPU (its read decodes 4 fields an hour,
    not 55); hours rolled up under the earlier two-series layout read the same after it."""
    import httpx

    from gpuwarden.reports._usage import USAGE_FIELDS
    from gpuwarden.store import _prom_rollups

    assert set(_prom_rollups.USAGE) == set(USAGE_FIELDS)
    assert [sorted(g) for g in _prom_rollups.groups(list(USAGE_FIELDS))] == [sorted(USAGE_FIELDS)]
    # health (as it was: with the 8 fields scoring does not read) and use, then the rest
    moved = ("power_violation_us", "pcie_link_gen", "gpu_temp_c_max", "power_w_max",
             "remapped_rows_pending", "remapped_rows_failure", "retired_pages_pending",
             "dcgm_health")  # fmt: skip
    earlier = (_prom_rollups.HEALTH + moved + _prom_rollups.USAGE,)
    monkeypatch.setattr(_prom_rollups, "GROUPS", earlier)
    load_writable(empty)  # compacted in the earlier layout
    span = {"start": T0, "end": T0 + 2 * 3600, "resolution_s": 3600,
            "fields": ["power_w", "gpu_temp_c", "ecc_sbe_volatile_total"]}  # fmt: skip
    before = empty.read_window(**span)
    monkeypatch.undo()
    assert before["power_w"].notna().any() and before["gpu_temp_c"].notna().any()
    pd.testing.assert_frame_equal(empty.read_window(**span), before)
    got = httpx.get(f"{empty.http.base}/api/v1/series",
                    params={"match[]": _prom_rollups.ROLLUP, "start": T0, "end": T0 + 3 * 3600}).json()["data"]  # fmt: skip
    (label,) = {s["fields"] for s in got}  # as written: use among the health fields
    assert {"power_w", "gpu_util_pct", "gpu_temp_c"} <= set(label.split(","))
    empty.write_rollups(before, T0 + 2 * 3600)  # the same hours again, now apart
    got = httpx.get(f"{empty.http.base}/api/v1/series",
                    params={"match[]": _prom_rollups.ROLLUP, "start": T0, "end": T0 + 3 * 3600}).json()["data"]  # fmt: skip
    assert {"power_w", "gpu_temp_c,ecc_sbe_volatile_total"} <= {s["fields"] for s in got}


def test_rollups_in_the_first_layout_are_moved_on_compact(empty) -> None:
    """Stores compacted before the packed series kept one ``gpuwarden_rollup`` series per GPU
    and field, at the hour: compact rewrites them in today's layout and deletes them, and the
    hours they held read as they were kept."""
    import httpx
    import numpy as np

    from gpuwarden.store import _prom_rollups
    from gpuwarden.store._series import Series, gpu_labels
    from gpuwarden.telemetry import GpuId

    load_writable(empty)  # two whole hours compacted, in today's layout
    fields = ["gpu_temp_c", "power_w", "ecc_sbe_volatile_total", "mem_temp_c_max"]
    span = {"start": T0, "end": T0 + 2 * 3600, "resolution_s": 3600, "fields": fields}
    kept = empty.read_window(**span)
    assert len(kept) == 2 * 3 and kept["gpu_temp_c"].notna().all()

    def series_of(name: str) -> list[dict]:
        params = {"match[]": name, "start": T0 - 86400, "end": T0 + 3 * 86400}
        return httpx.get(f"{empty.http.base}/api/v1/series", params=params).json()["data"]

    deleted = httpx.post(f"{empty.http.base}/api/v1/admin/tsdb/delete_series",
                         data={"match[]": _prom_rollups.ROLLUP})  # fmt: skip
    assert deleted.status_code == 204 and not series_of(_prom_rollups.ROLLUP)
    # the same hours as the first layout wrote them, a degree warmer, so that what is read
    # after the move is known to come from these series and not from the raw samples
    first = kept.assign(gpu_temp_c=kept["gpu_temp_c"] + 1.0)
    inv = empty.gpus().set_index("uuid")
    old = []
    for uuid, rows in first.groupby("uuid"):
        r = inv.loc[uuid]
        gpu = GpuId(r["hostname"], int(r["gpu"]), uuid, r["pci_bus_id"], r["model"], r["rack"])
        labels = {"__name__": "gpuwarden_rollup", **gpu_labels(gpu), "resolution": "3600"}
        ts_ms = np.rint(rows["ts"].to_numpy() * 1000).astype(np.int64)
        for f in fields:
            old.append(Series({**labels, "field": f}, ts_ms, rows[f].to_numpy(np.float64)))
    empty._send(old)
    written = sum(bool(np.isfinite(s.values).any()) for s in old)  # a NaN is not written
    assert len(series_of("gpuwarden_rollup")) == written >= 3 * len(fields) - 1
    assert empty.read_window(**span)["gpu_temp_c"].notna().sum() == 0  # not moved yet

    empty.compact(_clock())
    assert not series_of("gpuwarden_rollup")  # moved, then deleted
    after = empty.read_window(**span)
    pd.testing.assert_frame_equal(after[kept.columns], first, check_dtype=False)
    assert empty.migrate_first_layout() == 0  # nothing left to move


def test_many_small_native_reads_at_once_equal_one_json_read(loaded) -> None:
    """A tiny ``max_points`` cuts the reads into dozens of native exports, four asked at once
    and decoded while the next are asked (``PromApi.imap``, at most ``IN_FLIGHT`` per
    thread): raw samples and hourly windows (kept rollups and the hour under way) equal, to
    the bit, the same reads through the JSON query API in one thread."""
    base = loaded.http.base
    many = VictoriaMetricsStore(base, clock=_clock, concurrency=4, max_points=400)
    json_ = VictoriaMetricsStore(base, clock=_clock, concurrency=1)
    json_.api.native = False
    try:
        for read, requests in (
            (lambda s: s.read_samples(start=T0, end=T0 + HOURS * 3600), 40),
            (lambda s: s.read_window(start=T0, end=T0 + HOURS * 3600, resolution_s=3600), 5),
            (lambda s: s.read_window(start=T0, end=T0 + 2.5 * 3600, resolution_s=3600), 5),
        ):
            before = many.api.queries
            got, want = read(many), read(json_)
            assert many.api.queries - before >= requests  # more than are asked at once
            assert len(got) and many.api.native
            pd.testing.assert_frame_equal(got, want, check_exact=True)
    finally:
        many.close()
        json_.close()
