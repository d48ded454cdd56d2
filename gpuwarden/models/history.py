"""Read a window of fleet history from a store into an ``HourlyPanel``.

One ``store.read_window(resolution_s=3600)``: whole hours from the store's hourly rollups (168
rows per GPU for a week, whatever the sampling interval); hours not rolled up yet, and the
partial hour before ``end``, from raw samples aggregated the same way by the store. Nothing at
or after ``end`` is read, so a backtest at a past time sees only what was known then.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.models import _hourly as H
from gpuwarden.models.panel import HOUR_S, HourlyPanel, build_panel
from gpuwarden.store.base import Store


@dataclass
class History:
    """What ``read_history`` read: the canonical hourly frame, identities, events, failures."""

    hourly: pd.DataFrame
    ident: pd.DataFrame
    events: pd.DataFrame
    failures: pd.DataFrame
    first_hour: float
    last_hour: float
    last_fraction: float


def read_history(
    store: Store,
    *,
    start: float,
    end: float,
    failures: pd.DataFrame | None = None,
    progress: bool = False,
    recent_from: float | None = None,
    long_fields: tuple[str, ...] = (),
    fields: tuple[str, ...] | None = None,
) -> History:
    """Read ``[start, end)`` from the store: rollups for whole hours, raw samples after them.
    With ``recent_from``, the hours before it (from its hour down) hold ``long_fields`` only:
    what features reaching that far back read, at a fraction of the cost of every field.
    ``fields``: these alone over the whole window, and no events (a shard's read of the rest
    of the fleet, ``features.FLEET_FIELDS``)."""
    if not end > start:
        raise InputError(f"history window is empty: start {start!r} is not before end {end!r}")

    first_hour = float(np.floor(start / HOUR_S) * HOUR_S)
    split = first_hour
    if fields is not None:
        split, long_fields = end, fields
    elif recent_from is not None:
        split = min(max(float(np.floor(recent_from / HOUR_S) * HOUR_S), first_hour), end)
    parts = [
        H.from_rollups(
            store.read_window(
                start=lo, end=hi, fields=list(names), resolution_s=HOUR_S, progress=progress
            )
        )
        for lo, hi, names in ((first_hour, split, long_fields), (split, end, H.ROLLUP_FIELDS))
        if hi > lo and names
    ]
    last_hour = float(np.floor((np.nextafter(end, -np.inf)) / HOUR_S) * HOUR_S)
    return History(
        hourly=H.combine(parts),
        ident=store.gpus(),
        events=store.read_events(start=first_hour, end=end) if fields is None else _NO_EVENTS,
        failures=store.read_failures() if failures is None else failures,
        first_hour=first_hour,
        last_hour=last_hour,
        last_fraction=float(min(1.0, (end - last_hour) / HOUR_S)),
    )


_NO_EVENTS = pd.DataFrame({"ts": [], "uuid": [], "kind": [], "code": []})


def panel_of(history: History) -> HourlyPanel:
    """Build the hourly panel of what ``read_history`` read."""
    panel = build_panel(
        history.hourly,
        history.ident,
        history.events,
        history.failures,
        start_hour=history.first_hour,
        end_hour=history.last_hour,
    )
    panel.last_fraction = history.last_fraction
    return panel


def load_panel(
    store: Store,
    *,
    start: float,
    end: float,
    failures: pd.DataFrame | None = None,
    progress: bool = False,
    recent_from: float | None = None,
    long_fields: tuple[str, ...] = (),
    fields: tuple[str, ...] | None = None,
) -> HourlyPanel:
    """History in ``[start, end)`` (Unix s) as an hourly panel; buckets start at ``start``'s
    hour and end with the hour that holds ``end`` (partial when ``end`` is not on the hour).

    ``failures`` (the store's ``read_failures`` layout) replaces the store's failure records,
    e.g. a user's failures file; they split a UUID's history and give the labels.
    ``recent_from`` / ``long_fields`` / ``fields``: as ``read_history``."""
    history = read_history(
        store,
        start=start,
        end=end,
        failures=failures,
        progress=progress,
        recent_from=recent_from,
        long_fields=long_fields,
        fields=fields,
    )
    return panel_of(history)


def newest_sample_ts(store: Store) -> float | None:
    """Time of the newest sample any GPU sent (from the store's inventory), None if empty."""
    gpus = store.gpus()
    if gpus.empty:
        return None
    return float(gpus["last_ts"].max())
