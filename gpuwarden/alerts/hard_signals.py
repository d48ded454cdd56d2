"""The hard-signal assessor: unhealthy at once on what NVIDIA says needs a reset or an RMA.

Reads the store only (no model), so ``gpuwarden serve`` acts on hard signals even before a model
is trained. Within the last ``lookback_s`` seconds:

- a double-bit ECC error: any increase of ``ecc_dbe_volatile_total`` (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,
  resets on driver reload, so increases are taken reset-aware) or ``ecc_dbe_aggregate_total``;
- a row-remap failure: ``remapped_rows_failure`` > 0 (DCGM_FI_DEV_ROW_REMAP_FAILURE,
  ``nvidia-smi --query-remapped-rows``): NVIDIA's policy is to replace the GPU;
- the GPU lost or needing a reset (NVML's GpuIsLost / GpuRequiresReset events);
- a fatal Xid (``gpuwarden.xid.FATAL_XIDS``: 48, 62, 64, 74, 79, 94, 95, 119, 120).

Every GPU seen in the window gets an assessment (risk NaN: this assessor has no opinion on
risk), so the service knows the whole fleet.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from gpuwarden.alerts.base import RiskAssessment
from gpuwarden.counters import step_increases
from gpuwarden.errors import ConfigError
from gpuwarden.telemetry import GpuId
from gpuwarden.xid import FATAL_XIDS, describe

if TYPE_CHECKING:
    from gpuwarden.store.base import Store

_FIELDS = ("ecc_dbe_volatile_total", "ecc_dbe_aggregate_total", "remapped_rows_failure")
_DBE_ACTION = "Drain the GPU and reset it; if DBEs recur or row remapping fails, replace it (RMA)."
_REMAP_ACTION = "Row remapping failed: drain the GPU and replace it (RMA)."
_LOST_ACTION = "Drain the node; reseat or replace the GPU, check the PCIe riser/slot and power."
_RESET_ACTION = "Drain the GPU and reset it (nvidia-smi -r); replace it if it recurs."

Signal = tuple[float, str, str]  # (ts, what, action)


class HardSignalAssessor:
    """``assess(store, at)`` from hard signals only; ``lookback_s`` (default 15 min) is how
    far back a signal still counts (the decision engine keeps unhealthy GPUs unhealthy)."""

    def __init__(self, lookback_s: float = 900.0) -> None:
        if not lookback_s > 0:
            raise ConfigError(f"lookback_s must be positive, not {lookback_s!r}")
        self.lookback_s = float(lookback_s)

    def __call__(self, store: Store, at: float) -> list[RiskAssessment]:
        start, end = at - self.lookback_s, at + 1e-3
        # read one more window back, so an increase whose earlier reading predates the window
        # is still seen
        samples = store.read_samples(start=start - self.lookback_s, end=end, fields=_FIELDS)
        events = store.read_events(
            start=start, end=end, kinds=("xid", "gpu_lost", "gpu_requires_reset")
        )
        gpus: dict[str, GpuId] = {}
        signals: dict[str, list[Signal]] = {}
        for uuid, group in samples.groupby("uuid", sort=False):
            last = group.iloc[-1]
            gpus[str(uuid)] = GpuId(
                str(last["hostname"]),
                int(last["gpu"]),
                str(uuid),
                str(last.get("pci_bus_id", "") or ""),
                str(last.get("model", "") or ""),
            )
            found = _sample_signals(group, start)
            if found:
                signals[str(uuid)] = found
        for row in events.itertuples(index=False):
            uuid = str(row.uuid)
            gpus.setdefault(uuid, GpuId(str(row.hostname), int(row.gpu), uuid))
            found_event = _event_signal(row)
            if found_event:
                signals.setdefault(uuid, []).append(found_event)
        out = []
        for uuid, gpu in gpus.items():
            found = sorted(signals.get(uuid, []), key=lambda s: s[0], reverse=True)
            if not found:
                out.append(RiskAssessment(gpu, at))
                continue
            ts, what, action = found[0]  # the newest signal names the state
            out.append(
                RiskAssessment(
                    gpu,
                    at,
                    math.nan,
                    hard_signal=what,
                    reasons=tuple(dict.fromkeys(s[1] for s in found)),
                    action=action,
                    hard_signal_ts=ts,
                )
            )
        return out


def _sample_signals(group: pd.DataFrame, start: float) -> list[Signal]:
    found: list[Signal] = []
    ts = group["ts"].to_numpy(dtype=np.float64)
    for name in ("ecc_dbe_volatile_total", "ecc_dbe_aggregate_total"):
        inc = step_increases(group[name].to_numpy(dtype=np.float64))
        hit = np.flatnonzero((inc > 0) & (ts >= start))
        if hit.size:
            n = float(np.nansum(inc[hit]))
            found.append(
                (float(ts[hit[-1]]), f"{n:g} double-bit ECC error(s) ({name})", _DBE_ACTION)
            )
            break  # volatile and aggregate count the same errors
    remap = group["remapped_rows_failure"].to_numpy(dtype=np.float64)
    hit = np.flatnonzero((remap > 0) & (ts >= start))
    if hit.size:
        found.append((float(ts[hit[-1]]), "row remap failure", _REMAP_ACTION))
    return found


def _event_signal(row: Any) -> Signal | None:
    kind, ts = row.kind, float(row.ts)
    if kind == "gpu_lost":
        return ts, "GPU lost (fell off the bus)", _LOST_ACTION
    if kind == "gpu_requires_reset":
        return ts, "GPU requires a reset", _RESET_ACTION
    code = row.code
    if kind == "xid" and not pd.isna(code) and int(code) in FATAL_XIDS:
        x = describe(int(code))
        return ts, f"Xid {x.code} ({x.name})", x.action
    return None


__all__ = ["HardSignalAssessor"]
