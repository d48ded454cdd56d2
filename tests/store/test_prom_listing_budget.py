"""The list of GPUs and the records on a real Prometheus 2.42 keep to the point budget: the
list's day pass reads the newest day alone, then as many days a query as the budget holds for
the GPUs seen; records are counted per hour first and read in spans of whole hours the budget
holds. Both give what one unbudgeted read gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tsdb_servers import history_series, start_prometheus_with

from gpuwarden.store.prometheus import PrometheusStore
from gpuwarden.telemetry import Event, GpuId

pytestmark = pytest.mark.integration

H = 3600.0
END = 1_790_000_000 // 3600 * 3600.0
DAYS = 6
GPUS = 6
BUDGET = 2 * GPUS


def fleet() -> pd.DataFrame:
    """Hourly samples of six GPUs over six days; one goes silent on day 2, one starts on day 4."""
    parts = []
    for g in range(GPUS):
        ts = np.arange(END - DAYS * 86400 + 1800, END, H)
        if g == 1:
            ts = ts[ts < END - 4 * 86400 + 5 * H]
        if g == 2:
            ts = ts[ts > END - 3 * 86400 + 7 * H]
        parts.append(pd.DataFrame({
            "ts": ts, "hostname": f"node{g // 3}", "gpu": g % 3, "model": "H100",
            "uuid": f"GPU-0000000{g}-0000-0000-0000-000000000000", "rack": "r1",
            "pci_bus_id": f"00000000:{17 + g % 3:02X}:00.0", "gpu_temp_c": 50.0, "power_w": 300.0,
        }))  # fmt: skip
    return pd.concat(parts, ignore_index=True)


def test_the_gpu_list_keeps_to_the_point_budget(tmp_path) -> None:
    prom = start_prometheus_with(tmp_path / "prom", history_series([fleet()]))
    clock = lambda: END + 60.0  # noqa: E731
    try:
        with (PrometheusStore(prom.url, clock=clock, max_points=10**9) as whole,
              PrometheusStore(prom.url, clock=clock, max_points=BUDGET) as small):  # fmt: skip
            want, got = whole.gpus(), small.gpus()
            largest, whole_largest = small.api.largest, whole.api.largest
    finally:
        prom.stop()
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert len(got) == GPUS
    assert (
        got.loc[got["gpu"].eq(1) & got["hostname"].eq("node0"), "last_ts"].item() < END - 3 * 86400
    )
    assert 0 < largest <= BUDGET < whole_largest  # one unbudgeted day pass holds 6 x 6 points


def events() -> list[Event]:
    """40 Xids an hour on one GPU for 30 hours (1,200 events), codes cycling."""
    gpu = GpuId("node0", 0, "GPU-00000000-0000-0000-0000-000000000000", "00000000:11:00.0",
                "H100", "r1")  # fmt: skip
    start = END - 30 * H
    return [Event(start + k * 90.0, gpu, "xid", (13, 31, 43, 48)[k % 4]) for k in range(1200)]


def test_records_keep_to_the_point_budget(tmp_path) -> None:
    prom = start_prometheus_with(tmp_path / "prom", history_series([fleet()], events()))
    clock = lambda: END + 60.0  # noqa: E731
    try:
        with (PrometheusStore(prom.url, clock=clock, max_points=10**9) as whole,
              PrometheusStore(prom.url, clock=clock, max_points=100) as small):  # fmt: skip
            span = {"start": END - 2 * 86400, "end": END}
            want = whole.read_events(**span)
            small.api.largest = 0
            before = small.api.queries
            got = small.read_events(**span)
            largest, queries = small.api.largest, small.api.queries - before
    finally:
        prom.stop()
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert len(got) == 1200
    assert largest == 80  # 40 an hour: two hours a query
    assert queries >= 12  # 30 hours of records in spans of two, and the count
