"""What a store's inventory (``Store.gpus``) alone does not say: which devices ever sent telemetry.

An event names a device as a sample does: a memory-error log (``ingest --memory-errors``) or a
kernel log's Xids put accelerators in the inventory with the times of their events, and no
sample. Such a device has neither stopped reporting nor been down: nothing was ever read of it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuwarden.store.base import ReadableStore


def never_reported(store: ReadableStore, devices: pd.DataFrame) -> np.ndarray:
    """Per row of ``devices`` (``Store.gpus`` rows), whether the store holds no telemetry of its
    board at all over its life: hourly rollups, stitched to the raw samples after them, so one
    row an hour at most. Ask it of the few a window's own samples leave in doubt."""
    if devices.empty:
        return np.zeros(0, dtype=bool)
    seen = store.read_window(
        start=float(devices["first_ts"].min()),
        end=float(devices["last_ts"].max()) + 1,
        uuids=list(devices["uuid"]),
        resolution_s=3600,
    )
    return ~devices["uuid"].isin(seen["uuid"].unique() if len(seen) else []).to_numpy()
