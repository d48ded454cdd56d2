"""A week of each GPU's hourly risk score, for the GPU page's chart.

The dashboard stores nothing, so a GPU's past risk is the model scoring the fleet at past
hours: its features read a week of history and the GPU's node and rack peers, so one GPU cannot
be scored alone. ``RiskHistory`` backfills the last 7 days with one ``hourly`` call (the model's
``backtest`` on whole hours reads one panel and scores every hour in one go), then adds each new
whole hour once it is complete, and forgets hours older than 7 days. It keeps only (uuid, ts,
risk): 1,000 GPUs x 168 hours is about 2 MiB.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuwarden.store.base import Store

logger = logging.getLogger(__name__)

HOUR_S = 3600.0
KEEP_S = 7 * 86400.0
#: ``hourly(store, start, end)``: the model's scores at every whole hour in ``[start, end]``
#: (Unix s), each from the history before that hour: rows with uuid, at (the hour) and risk.
HourlyScorer = Callable[[Store, float, float], pd.DataFrame]

PENDING, RUNNING, READY, FAILED = "pending", "running", "ready", "failed"


def _empty() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "uuid": pd.Series(dtype="category"),
            "ts": pd.Series(dtype="float64"),
            "risk": pd.Series(dtype="float32"),
        }
    )


@dataclass(frozen=True)
class HistoryState:
    """What the history holds now. ``status``: pending (not started), running (the week's
    backfill), ready, failed (the backfill failed: nothing held); ``error`` is the last failed
    attempt's, also when an hour added later failed and the older hours are still held."""

    status: str = PENDING
    frame: pd.DataFrame = field(default_factory=_empty)  # uuid, ts (the hour, Unix s), risk
    through_ts: float | None = None  # the newest hour scored
    error: str = ""
    backfill_s: float = math.nan  # how long the week's backfill took


class RiskHistory:
    """Hourly risk scores of the last ``keep_s``, brought up to date by ``update``.

    ``update`` runs in the scoring thread; pages read ``state()`` (its frame is never changed
    after it is published, so readers need no lock)."""

    def __init__(self, hourly: HourlyScorer, *, keep_s: float = KEEP_S) -> None:
        self._hourly = hourly
        self.keep_s = keep_s
        self._state = HistoryState()
        self._attempted_ts: float | None = None  # the hour of the last attempt, failed or not
        self._lock = threading.Lock()
        self._changed = threading.Event()  # set after each attempt

    def state(self) -> HistoryState:
        with self._lock:
            return self._state

    def wait(self, timeout_s: float) -> HistoryState:
        """Wait until an attempt has ended and none runs (tests, screenshots, the benchmark);
        the state then."""
        self._changed.wait(timeout_s)
        return self.state()

    def update(self, store: Store, as_of: float) -> None:
        """Score the whole hours up to ``as_of`` not held yet: the week on the first call, then
        the hours completed since. An hour is tried once: after a failure, the next try is
        when the next hour completes (the error is logged and kept in ``state().error``)."""
        hour = math.floor(as_of / HOUR_S) * HOUR_S
        if self._attempted_ts is not None and hour <= self._attempted_ts:
            return
        self._attempted_ts = hour
        old = self.state()
        first = hour - self.keep_s + HOUR_S
        if old.through_ts is not None:
            first = max(first, old.through_ts + HOUR_S)
        if old.status != READY:
            self._publish(HistoryState(RUNNING, old.frame, old.through_ts, old.error))
        started = time.perf_counter()
        try:
            rows = self._hourly(store, first, hour)
            new = pd.DataFrame(
                {
                    "uuid": rows["uuid"].astype(str).to_numpy(),
                    "ts": rows["at"].to_numpy(dtype=float),
                    "risk": rows["risk"].to_numpy(dtype=np.float32),
                }
            )
        except Exception as exc:  # a model bug must not stop the live scores
            logger.warning("risk history %s-%s failed: %s", first, hour, exc, exc_info=True)
            error = f"{type(exc).__name__}: {exc}"
            status = READY if old.through_ts is not None else FAILED
            self._publish(HistoryState(status, old.frame, old.through_ts, error, old.backfill_s))
            return
        took = time.perf_counter() - started
        kept = old.frame[old.frame["ts"] > hour - self.keep_s]
        frame = pd.concat([kept.astype({"uuid": str}), new], ignore_index=True)
        frame = frame.astype({"uuid": "category"})
        backfill_s = took if old.through_ts is None else old.backfill_s
        self._publish(HistoryState(READY, frame, hour, "", backfill_s))

    def _publish(self, state: HistoryState) -> None:
        with self._lock:
            self._state = state
        if state.status == RUNNING:
            self._changed.clear()
        else:
            self._changed.set()


def series(frame: pd.DataFrame, uuid: str, start: float, end: float) -> pd.DataFrame:
    """One GPU's held scores in ``[start, end]``: ts, risk (float), oldest first."""
    if frame.empty:
        return pd.DataFrame({"ts": pd.Series(dtype=float), "risk": pd.Series(dtype=float)})
    mine = frame[(frame["uuid"] == uuid) & (frame["ts"] >= start) & (frame["ts"] <= end)]
    out = pd.DataFrame(
        {
            "ts": mine["ts"].to_numpy(dtype=float),
            # float32 keeps the frame small; the model gives 4 decimals, so give those back
            "risk": np.round(mine["risk"].to_numpy(dtype=float), 4),
        }
    )
    return out.sort_values("ts", kind="stable").reset_index(drop=True)
