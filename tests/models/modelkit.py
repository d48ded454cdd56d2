"""Helpers for the model tests: hand-made wide frames, empty event and failure tables, and the
simulated fleets the session fixtures use."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from gpuwarden.models.simdata import fleet_spec
from gpuwarden.telemetry import FIELD_NAMES

T0 = 1767225600.0  # 2026-01-01T00:00:00Z, on the hour
TRAIN_SPEC = fleet_spec(nodes=16, days=45.0, accel=40.0, seed=11)
EVAL_SPEC = fleet_spec(nodes=16, days=30.0, accel=40.0, seed=12, start_ts=T0 + 120 * 86400)


def make_frame(
    hours: float,
    gpus: list[tuple[str, int, str]],
    *,
    step_s: int = 300,
    start: float = T0,
    model: str = "H100-80GB",
    rack: str = "rack00",
    values: dict[str, Callable[[np.ndarray, int], np.ndarray]] | None = None,
) -> pd.DataFrame:
    """A wide frame: ``gpus`` are (hostname, index, uuid); ``values[field](ts, g)`` gives a
    field's series for GPU number g. Fields not named are typical healthy H100 readings."""
    ts = start + np.arange(int(hours * 3600 / step_s)) * float(step_s)
    rows = []
    for g, (host, idx, uuid) in enumerate(gpus):
        cols: dict[str, object] = {
            "ts": ts,
            "hostname": host,
            "gpu": idx,
            "uuid": uuid,
            "model": model,
            "pci_bus_id": f"00000000:{0x18 + idx:02X}:00.0",
            "rack": rack,
        }
        base = {
            "gpu_temp_c": np.full(ts.size, 60.0),
            "mem_temp_c": np.full(ts.size, 62.0),
            "power_w": np.full(ts.size, 500.0),
            "gpu_util_pct": np.full(ts.size, 90.0),
            "pcie_link_width": np.full(ts.size, 16.0),
            "pcie_link_width_max": np.full(ts.size, 16.0),
            "pcie_link_gen_max": np.full(ts.size, 5.0),
            "pcie_link_gen": np.full(ts.size, 5.0),
            "ecc_sbe_volatile_total": np.zeros(ts.size),
            "ecc_dbe_volatile_total": np.zeros(ts.size),
            "ecc_sbe_aggregate_total": np.zeros(ts.size),
            "ecc_dbe_aggregate_total": np.zeros(ts.size),
            "remapped_rows_correctable": np.zeros(ts.size),
            "remapped_rows_uncorrectable": np.zeros(ts.size),
            "remapped_rows_pending": np.zeros(ts.size),
            "remapped_rows_failure": np.zeros(ts.size),
            "pcie_replay_total": np.zeros(ts.size),
            "thermal_violation_us": np.zeros(ts.size),
            "nvlink_crc_flit_errors_total": np.zeros(ts.size),
            "nvlink_crc_data_errors_total": np.zeros(ts.size),
            "nvlink_replay_errors_total": np.zeros(ts.size),
            "nvlink_recovery_errors_total": np.zeros(ts.size),
            "clock_event_reasons": np.zeros(ts.size),
        }
        for name, fn in (values or {}).items():
            base[name] = np.asarray(fn(ts, g), dtype=np.float64)
        for name in FIELD_NAMES:
            cols[name] = base.get(name, np.full(ts.size, np.nan))
        rows.append(pd.DataFrame(cols))
    return pd.concat(rows, ignore_index=True).sort_values(
        ["ts", "hostname", "gpu"], ignore_index=True
    )


def no_events() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ts": pd.Series([], dtype=float),
            "uuid": pd.Series([], dtype=object),
            "kind": pd.Series([], dtype=object),
            "code": pd.Series([], dtype=float),
        }
    )


def no_failures() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "ts": pd.Series([], dtype=float),
            "hostname": pd.Series([], dtype=object),
            "gpu": pd.Series([], dtype=np.int64),
            "uuid": pd.Series([], dtype=object),
            "kind": pd.Series([], dtype=object),
            "precursor_start_ts": pd.Series([], dtype=float),
        }
    )
