"""The hard-signal assessor: unhealthy at once on what NVIDIA says needs a reset or an RMA.

Reads the store only (no model), so ``gpuwarden serve`` acts on hard signals even before a model
is trained. Within the last ``lookback_s`` seconds:

- a double-bit ECC error: any increase of ``ecc_dbe_volatile_total`` (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,
  resets on driver reload, so increases are taken reset-aware) or ``ecc_dbe_aggregate_total``;
- a row-remap failure: ``remapped_rows_failure`` > 0 (DCGM_FI_DEV_ROW_REMAP_FAILURE,
  ``nvidia-smi --query-remapped-rows``): NVIDIA's policy is to replace the GPU;
- the GPU lost or needing a reset (NVML's GpuIsLost / GpuRequiresReset events);
- a fatal Xid (``gpuwarden.health.FATAL_XIDS``: 48, 62, 64, 74, 79, 94, 95, 119, 120).

Which signals count, their words and NVIDIA's action for each are ``gpuwarden.health``'s
``HARD_SIGNALS``; this module only reads them from the store.

Every GPU seen in the window gets an assessment (risk NaN: this assessor has no opinion on
risk), so the service knows the whole fleet, but a board that another UUID replaced in its
slot within the window: the decision engine tracks slots, and would take the old board's
signals for the slot's new one.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from gpuwarden import health
from gpuwarden.alerts.base import RiskAssessment
from gpuwarden.counters import step_increases
from gpuwarden.errors import ConfigError
from gpuwarden.health import describe
from gpuwarden.telemetry import GpuId
from gpuwarden.wording import counted

if TYPE_CHECKING:
    from gpuwarden.store.base import Store


Signal = tuple[float, str, str]  # (ts, what, action)
#: a board quiet this long while another reports from its slot was replaced there: longer
#: than any sampling interval, so two boards reporting side by side are never taken for it
QUIET_S = 900.0


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
        samples = store.read_samples(
            start=start - self.lookback_s, end=end, fields=health.HARD_FIELDS
        )
        events = store.read_events(
            start=start, end=end, kinds=("xid", "gpu_lost", "gpu_requires_reset")
        )
        gpus: dict[str, GpuId] = {}
        signals: dict[str, list[Signal]] = {}
        first: dict[str, float] = {}  # first sample in the window
        heard: dict[str, float] = {}  # newest sample or event in the window
        for uuid, group in samples.groupby("uuid", sort=False):
            last = group.iloc[-1]
            # where it reports now, since when: a GPU renumbered at a boot reports in a new slot
            here = (group["gpu"].to_numpy() == last["gpu"]) & (
                group["hostname"].to_numpy() == last["hostname"]
            )
            first[str(uuid)] = float(group["ts"].to_numpy()[here].min())
            heard[str(uuid)] = float(group["ts"].max())
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
            heard[uuid] = max(heard.get(uuid, -math.inf), float(row.ts))
            found_event = _event_signal(row)
            if found_event:
                signals.setdefault(uuid, []).append(found_event)
        out = []
        gone = replaced_in_slot(gpus, first, heard)
        for uuid, gpu in gpus.items():
            if uuid in gone:
                continue
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


def replaced_in_slot(
    gpus: dict[str, GpuId], first: dict[str, float], heard: dict[str, float]
) -> set[str]:
    """UUIDs of boards another one replaced in their slot (host, index): after the last
    thing heard of them (``heard``: newest sample or event), another UUID there sent its first
    sample from the slot (``first``: a new board), or was heard more than ``QUIET_S`` later
    (a GPU renumbered into the slot at a boot, whose earlier samples a store may file under
    the slot it has now)."""
    slots: dict[tuple[str, int], list[str]] = {}
    for uuid, gpu in gpus.items():
        slots.setdefault((gpu.hostname, gpu.index), []).append(uuid)
    gone: set[str] = set()
    for uuids in slots.values():
        for u in uuids if len(uuids) > 1 else ():
            last = heard.get(u, math.inf)
            if any(
                v != u
                and (first.get(v, -math.inf) >= last or heard.get(v, -math.inf) > last + QUIET_S)
                for v in uuids
            ):
                gone.add(u)
    return gone


def _sample_signals(group: pd.DataFrame, start: float) -> list[Signal]:
    found: list[Signal] = []
    ts = group["ts"].to_numpy(dtype=np.float64)
    dbe, remap = health.DOUBLE_BIT_ERROR, health.ROW_REMAP_FAILURE
    for name in health.DBE_FIELDS:
        inc = step_increases(group[name].to_numpy(dtype=np.float64))
        hit = np.flatnonzero((inc > 0) & (ts >= start))
        if hit.size:
            n = float(np.nansum(inc[hit]))
            found.append((float(ts[hit[-1]]), f"{counted(n, dbe.what)} ({name})", dbe.action))
            break  # volatile and aggregate count the same errors
    failed = group["remapped_rows_failure"].to_numpy(dtype=np.float64)
    hit = np.flatnonzero((failed > 0) & (ts >= start))
    if hit.size:
        found.append((float(ts[hit[-1]]), remap.what, remap.action))
    return found


def _event_signal(row: Any) -> Signal | None:
    code = None if pd.isna(row.code) else float(row.code)
    signal = health.event_signal(str(row.kind), code, str(row.detail))
    if signal is None:
        return None
    if signal is health.FATAL_XID and code is not None:
        x = describe(int(code))
        return float(row.ts), f"Xid {x.code} ({x.name})", x.action
    return float(row.ts), signal.what, signal.action


__all__ = ["HardSignalAssessor"]
