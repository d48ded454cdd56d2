"""Hard signals: what makes a GPU unhealthy whatever a model says.

Computed from the store over a window: a double-bit ECC error, a failed row remap, a fatal Xid
(``xid.FATAL_XIDS``), the GPU lost from the bus or needing a reset. Each becomes a reason (a
sentence with the DCGM field or Xid behind it) and an action from NVIDIA's Xid catalogue.

Counters are compared reading to reading (hourly rollups where ``compact`` made them, raw
samples after), so a double-bit error shows as an increase, and a driver reload that sets the
volatile count back to 0 does not. A GPU's first rolled-up hour in the store has no earlier
reading to compare with; the Xid 48 event still reports an error there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from gpuwarden.dashboard._reads import read_changes
from gpuwarden.store.base import Store
from gpuwarden.xid import FATAL_XIDS, describe

HOUR_S = 3600

EVENT_NAMES = {
    "gpu_lost": "GPU lost (fell off the bus)",
    "gpu_requires_reset": "GPU requires a reset",
    "gpu_recovered": "GPU recovered",
}
FATAL_EVENTS = frozenset({"gpu_lost", "gpu_requires_reset"})
MISSING_ACTION = (
    "Check the node is up and its collector runs (gpuwarden_collector_up); "
    "run nvidia-smi on the node."
)

_DBE_FIELDS = ("ecc_dbe_volatile_total", "ecc_dbe_aggregate_total")
_FIELDS = [*_DBE_FIELDS, "remapped_rows_failure"]

# Which action wins when a GPU has several hard signals: the most drastic one.
_PRIORITY = {"remap": 0, "gpu_lost": 1, "dbe": 2, "xid": 3, "gpu_requires_reset": 4}


def event_action(kind: str) -> str:
    """What to do about a non-Xid event."""
    if kind == "gpu_lost":
        return describe(79).action
    if kind == "gpu_requires_reset":
        return "Drain the GPU and reset it (nvidia-smi -r); replace it if it recurs."
    return ""


def _increases(frame: pd.DataFrame, column: str) -> pd.Series:
    """Reset-aware increase at each reading since the GPU's previous reading (a drop is a
    driver reload: the new value is what was counted since); NaN without a previous one."""
    present = frame[["uuid", column]].dropna()
    v = present[column].to_numpy()
    u = present["uuid"].to_numpy()
    inc = np.full(v.shape, np.nan)
    if v.size > 1:
        same = u[1:] == u[:-1]
        diff = np.diff(v)
        inc[1:] = np.where(same, np.where(diff < 0, v[1:], diff), np.nan)
    return pd.Series(inc, index=present.index).reindex(frame.index)


def hard_signals(
    store: Store, start: float, end: float, uuids: Sequence[str], *, probe_s: float = 300.0
) -> pd.DataFrame:
    """Per GPU with a hard signal in ``[start, end]``: uuid, hard_reasons, hard_action,
    hard_ts (the first signal). Hourly rollups plus the raw samples not rolled up yet, read in
    full only for GPUs whose counters moved in them (``read_changes``; ``probe_s``: a span
    holding every live GPU's newest reading)."""
    wanted = set(uuids)
    found: list[tuple[str, float, int, str, str]] = []  # uuid, ts, priority, reason, action

    # one hour before start is the baseline for the window's first increase
    frame = read_changes(
        store, start - HOUR_S, end + 1e-3, _FIELDS, resolution_s=HOUR_S, probe_s=probe_s
    )
    frame = frame[frame["uuid"].isin(wanted)]
    if not frame.empty:
        in_window = frame["ts"] >= np.floor(start / HOUR_S) * HOUR_S
        dbe = pd.concat([_increases(frame, c) for c in _DBE_FIELDS], axis=1).max(axis=1)
        hits = frame[in_window & (dbe > 0)].assign(n=dbe)
        for uuid, g in hits.groupby("uuid"):
            n = int(g["n"].sum()) if "ecc_dbe_volatile_total" in g else 1
            found.append(
                (
                    str(uuid),
                    float(g["ts"].min()),
                    _PRIORITY["dbe"],
                    f"double-bit ECC error{'s' if n > 1 else ''} ({n}, DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)",
                    describe(48).action,
                )
            )
        remap = frame[in_window & (frame["remapped_rows_failure"] > 0)]
        for uuid, g in remap.groupby("uuid"):
            found.append(
                (
                    str(uuid),
                    float(g["ts"].min()),
                    _PRIORITY["remap"],
                    "row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE)",
                    describe(64).action,
                )
            )

    events = store.read_events(
        start=start, end=end + 1e-3, kinds=["xid", "gpu_lost", "gpu_requires_reset"]
    )
    events = events[events["uuid"].isin(wanted)]
    for (uuid, kind, code), g in events.groupby(["uuid", "kind", "code"], dropna=False):
        times = f" x{len(g)}" if len(g) > 1 else ""
        if kind == "xid":
            if pd.isna(code) or int(code) not in FATAL_XIDS:
                continue
            entry = describe(int(code))
            reason, action, prio = f"Xid {entry.code}{times}: {entry.name}", entry.action, "xid"
        else:
            reason, action, prio = (
                f"{EVENT_NAMES[str(kind)]}{times}",
                event_action(str(kind)),
                str(kind),
            )
        found.append((str(uuid), float(g["ts"].min()), _PRIORITY[prio], reason, action))

    return _per_gpu(found)


def _per_gpu(found: list[tuple[str, float, int, str, str]]) -> pd.DataFrame:
    columns = ["uuid", "hard_reasons", "hard_action", "hard_ts"]
    if not found:
        return pd.DataFrame(
            {c: pd.Series(dtype=float if c == "hard_ts" else object) for c in columns}
        )
    table = pd.DataFrame(found, columns=["uuid", "ts", "prio", "reason", "action"])
    table = table.sort_values(["uuid", "prio", "ts"], kind="stable")
    grouped = table.groupby("uuid", sort=False)
    return pd.DataFrame(
        {
            "hard_reasons": grouped["reason"].agg("; ".join),
            "hard_action": grouped["action"].first(),
            "hard_ts": grouped["ts"].min(),
        }
    ).reset_index()
