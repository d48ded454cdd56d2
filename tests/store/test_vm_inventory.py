"""The list of GPUs on a real VictoriaMetrics 1.79 whose hours are kept as rollup series: the
raw samples are scanned only outside the rolled hours and around each GPU's first and last
rolled hour, and every first and last time is still the exact sample's, as a scan of every
raw sample gives it (GPUs that start or stop mid-span, on the hour and off it, a MIG instance
that is not rolled up, a GPU seen only after the rolled hours)."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from tsdb_servers import start_victoriametrics

from gpuwarden.store import _prom_inventory
from gpuwarden.store.prometheus import PRESENCE
from gpuwarden.store.victoriametrics import VictoriaMetricsStore
from gpuwarden.telemetry import mig_uuid

pytestmark = pytest.mark.integration

H = 3600.0
T0 = 1_790_000_000 // 3600 * 3600.0
NOW = T0 + 48 * H
STEP = 60.0  # at most ROLLED_MAX_INTERVAL_S: the rollups are used


def _uuid(host: str, gpu: int) -> str:
    return f"GPU-{host}-{gpu:04d}-0000-0000-000000000000"


#: (host, gpu, uuid) -> (first, last) sample time, every STEP in between
SPANS = {
    ("h1", 0, _uuid("h1", 0)): (T0 + 137.0, NOW - 200.0),  # the whole span
    ("h1", 1, _uuid("h1", 1)): (T0 + 10 * H + 1234.0, T0 + 30 * H + 77.0),  # starts, stops
    ("h1", 2, _uuid("h1", 2)): (T0 + 5 * H, T0 + 20 * H),  # both on the hour
    ("h1", 0, mig_uuid(_uuid("h1", 0), "3")): (T0 + 3 * H + 45.0, T0 + 9 * H + 5.0),
    ("h2", 0, _uuid("h2", 0)): (NOW - 20 * 60.0, NOW - 200.0),  # after the rolled hours
}


def history() -> pd.DataFrame:
    rows = []
    for (host, gpu, uuid), (first, last) in SPANS.items():
        mig = uuid.startswith("MIG-")
        n = int((last - first) // STEP)
        for ts in [first + k * STEP for k in range(n + 1)] + [last]:
            row = {"ts": ts, "hostname": host, "gpu": gpu, "uuid": uuid, "rack": "r1",
                   "model": "H100 MIG 1g.10gb" if mig else "H100",
                   "pci_bus_id": f"00000000:{17 + gpu:02X}:00.0"}  # fmt: skip
            row.update({"gr_engine_active": 0.5} if mig else {
                "gpu_temp_c": 50.0, "power_w": 300.0, "fb_used_mib": 1024.0,
                "gpu_util_pct": 40.0, "fb_total_mib": 81920.0,
            })  # fmt: skip
            rows.append(row)
    return pd.DataFrame(rows)


def test_gpus_from_rollups_have_the_exact_first_and_last_samples(tmp_path) -> None:
    vm = start_victoriametrics(tmp_path / "vm")
    try:
        with VictoriaMetricsStore(vm.url, clock=lambda: NOW) as writer:
            writer.write_frame(history())
            writer.compact(NOW)
        store = VictoriaMetricsStore(vm.url, clock=lambda: NOW)  # lists from nothing
        try:
            rolled, interval = store._rollup_marks()
            assert (
                rolled is not None
                and rolled >= NOW - 2 * H
                and interval == pytest.approx(STEP, rel=0.05)
            )
            asked: list[tuple[str, float]] = []
            query = store.api.query

            def recorded(expr: str, at: float) -> list:
                asked.append((expr, at))
                return query(expr, at)

            store.api.query = recorded  # type: ignore[method-assign]
            gpus, mig = store.gpus(), store.mig_instances()
            since = NOW - store.lookback_s
            store.api.query = query  # type: ignore[method-assign]
            raw = _prom_inventory.seen(store.api, PRESENCE, since, NOW)  # every raw sample
        finally:
            store.close()
    finally:
        vm.stop()
    want = {uuid: span for (_, _, uuid), span in SPANS.items()}
    got = {r.uuid: (r.first_ts, r.last_ts) for r in pd.concat([gpus, mig]).itertuples()}
    assert got == want
    assert sorted(raw["uuid"]) == sorted(want)
    by_uuid = raw.set_index("uuid")
    assert {u: (by_uuid.at[u, "first_ts"], by_uuid.at[u, "last_ts"]) for u in want} == got
    assert mig["parent_uuid"].tolist() == [_uuid("h1", 0)]
    # the rolled path ran: the rollup series were read, and the only raw scan of the whole
    # span was the MIG instances'
    assert any("gpuwarden_rollups{" in expr for expr, _ in asked)
    ranges = [(e, int(ms)) for e, _ in asked for ms in re.findall(r"\[(\d+)ms\]", e)]
    long_raw = [e for e, ms in ranges if ms > 24 * H * 1000 and "gpuwarden_rollup" not in e]
    assert long_raw and all('GPU_I_ID!=""' in e for e in long_raw)
