"""The store conformance suite, both tiers, on a real VictoriaMetrics 1.79."""

from __future__ import annotations

import pandas as pd
import pytest
from conformance import HOURS, T0, load_writable
from conformance.read import *  # noqa: F403
from conformance.write import *  # noqa: F403
from tsdb_servers import start_victoriametrics

from gpuwarden.store.victoriametrics import VictoriaMetricsStore

pytestmark = pytest.mark.integration


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
