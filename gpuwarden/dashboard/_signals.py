"""Hard signals: what makes a GPU unhealthy whatever a model says.

Computed from the store over a window: a double-bit ECC error, a failed row remap, a fatal Xid
(``health.FATAL_XIDS``), the GPU lost from the bus or needing a reset. Each becomes a reason (a
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

from gpuwarden import health
from gpuwarden.counters import step_increases
from gpuwarden.dashboard._reads import read_changes
from gpuwarden.health import describe, event_signal
from gpuwarden.store.base import Store
from gpuwarden.telemetry import time_unknown

HOUR_S = 3600

EVENT_NAMES = {
    **{kind: signal.what for kind, signal in health.HARD_EVENTS.items()},
    "gpu_recovered": "GPU recovered",
    "gpu_missing": "GPU stopped reporting while its node reports",
    "gpu_reporting": "GPU reporting again",
    "memory_error": "HBM error from a per-address log (ingest --memory-errors)",
}
FATAL_EVENTS = frozenset(health.HARD_EVENTS)
MISSING_ACTION = (
    "Check the node is up and its collector runs (gpuwarden_collector_up); "
    "run nvidia-smi on the node."
)
FAILED_ACTION = (
    "A failure is recorded for this board: drain the node if it is not, then reset or replace "
    "the GPU (RMA); its replacement reports under a new UUID."
)


def _increases(frame: pd.DataFrame, column: str) -> pd.Series:
    """Reset-aware increase at each reading since the GPU's previous one (``frame`` sorted by
    uuid, then ts); NaN without a previous one."""
    inc = step_increases(frame[column].to_numpy(dtype=np.float64), frame["uuid"].to_numpy())
    return pd.Series(inc, index=frame.index)


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
        store,
        start - HOUR_S,
        end + 1e-3,
        list(health.HARD_FIELDS),
        resolution_s=HOUR_S,
        probe_s=probe_s,
    )
    frame = frame[frame["uuid"].isin(wanted)]
    if not frame.empty:
        in_window = frame["ts"] >= np.floor(start / HOUR_S) * HOUR_S
        dbe = pd.concat([_increases(frame, c) for c in health.DBE_FIELDS], axis=1).max(axis=1)
        hit = in_window & (dbe > 0)
        hits = frame[hit].assign(n=dbe[hit])  # dbe itself would give an empty frame its rows
        for uuid, g in hits.groupby("uuid"):
            n = int(g["n"].sum()) if "ecc_dbe_volatile_total" in g else 1
            found.append(
                (
                    str(uuid),
                    float(g["ts"].min()),
                    health.DOUBLE_BIT_ERROR.priority,
                    f"{health.DOUBLE_BIT_ERROR.what}{'s' if n > 1 else ''} ({n}, "
                    f"{health.DOUBLE_BIT_ERROR.source})",
                    health.DOUBLE_BIT_ERROR.action,
                )
            )
        remap = frame[in_window & (frame["remapped_rows_failure"] > 0)]
        for uuid, g in remap.groupby("uuid"):
            found.append(
                (
                    str(uuid),
                    float(g["ts"].min()),
                    health.ROW_REMAP_FAILURE.priority,
                    f"{health.ROW_REMAP_FAILURE.what} ({health.ROW_REMAP_FAILURE.source})",
                    health.ROW_REMAP_FAILURE.action,
                )
            )

    events = store.read_events(
        start=start, end=end + 1e-3, kinds=["xid", "gpu_lost", "gpu_requires_reset"]
    )
    events = events[events["uuid"].isin(wanted)]
    # an event of unknown time (an old Xid seen at a collector's first scrape) is no signal
    events = events[~events["detail"].map(time_unknown).astype(bool)]
    for (uuid, kind, code), g in events.groupby(["uuid", "kind", "code"], dropna=False):
        times = f" x{len(g)}" if len(g) > 1 else ""
        signal = event_signal(str(kind), None if pd.isna(code) else float(code))
        if signal is None:
            continue
        if signal is health.FATAL_XID:
            entry = describe(int(code))
            reason, action = f"Xid {entry.code}{times}: {entry.name}", entry.action
        else:
            reason, action = f"{signal.what}{times}", signal.action
        found.append((str(uuid), float(g["ts"].min()), signal.priority, reason, action))

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
