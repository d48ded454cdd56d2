"""The list of GPUs on a real Prometheus 2.42 keeps to the point budget: its day pass reads the
newest day alone, then as many days a query as the budget holds for the GPUs seen, and lists
the same GPUs, first and last times as one unbudgeted pass."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tsdb_servers import history_series, start_prometheus_with

from gpuwarden.store.prometheus import PrometheusStore

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
