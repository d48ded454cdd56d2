"""The risk model, run beside the dashboard instead of in a page's way.

Scoring 1,000 GPUs with ``gpuwarden.models`` reads a week of hourly history and runs the trees:
seconds of work (plus loading scikit-learn and the model once). A page that waited for it would
first paint in ten seconds. So one thread per store scores the fleet every ``every_s`` (the
model's features are hourly, so minutes are plenty) with its own store connection; pages draw
the hard-signal states at once and merge the newest scores when there are some.

The same thread keeps the GPU page's risk history (``_risk_history``): after its first live
pass it scores every hour of the last week in one go, then each new whole hour.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from gpuwarden.dashboard import data
from gpuwarden.dashboard._risk_history import HourlyScorer, RiskHistory
from gpuwarden.store import open_store
from gpuwarden.store.base import Store

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Scores:
    """The outcome of one scoring pass: ``frame`` (the scorer's rows) or ``error``."""

    at: float  # the time scored (Unix s)
    frame: pd.DataFrame | None
    error: str = ""
    took_s: float = 0.0


class BackgroundScores:
    """Score ``url``'s fleet with ``scorer`` after ``start_after_s`` and then every
    ``every_s`` seconds, in a daemon thread; ``latest()`` is the newest pass (None before the
    first ends). With ``hourly`` (the model scoring whole hours), ``history`` holds each GPU's
    hourly risk of the last week, filled after the first live pass so that pass is not
    delayed."""

    def __init__(
        self,
        url: str,
        scorer: data.Scorer,
        *,
        hourly: HourlyScorer | None = None,
        every_s: float = 300.0,
        start_after_s: float = 0.0,
        opener: Callable[[str], Store] = open_store,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.scorer = scorer
        self.every_s = every_s
        self.start_after_s = start_after_s
        self._opener = opener
        self._clock = clock
        self._latest: Scores | None = None
        self.history = RiskHistory(hourly) if hourly is not None else None
        self._lock = threading.Lock()
        self._done = threading.Event()  # set after each pass
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuwarden-scores", daemon=True)
        self._thread.start()

    def latest(self) -> Scores | None:
        with self._lock:
            return self._latest

    def wait(self, timeout_s: float) -> Scores | None:
        """Wait for a pass to finish (tests, screenshots); the newest scores or None."""
        self._done.wait(timeout_s)
        return self.latest()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def score_once(self) -> Scores | None:
        """One pass on a fresh connection; None when the store holds no GPU yet."""
        started = time.perf_counter()
        try:
            store = self._opener(self.url)
        except Exception as exc:  # any store failure: shown on the page, retried next pass
            logger.warning("scoring %s: cannot open the store: %s", self.url, exc)
            return Scores(self._clock(), None, f"{type(exc).__name__}: {exc}")
        try:
            snap = data.snapshot(store, self._clock())
            if snap is None:
                return None
            frame = self.scorer(store, snap.as_of)
            return Scores(snap.as_of, frame, "", time.perf_counter() - started)
        except Exception as exc:  # a model bug must not stop the scoring, nor the dashboard
            logger.warning("scoring %s failed: %s", self.url, exc, exc_info=True)
            return Scores(self._clock(), None, f"{type(exc).__name__}: {exc}")
        finally:
            _close(store, self.url)

    def _extend_history(self) -> None:
        """The hours completed up to the store's "as of" into ``history`` (which keeps the
        model's errors itself; a store that fails here is reported by the live pass)."""
        assert self.history is not None
        try:
            store = self._opener(self.url)
        except Exception as exc:
            logger.warning("risk history: cannot open %s: %s", self.url, exc)
            return
        try:
            snap = data.snapshot(store, self._clock())
            if snap is not None:
                self.history.update(store, snap.as_of)
        except Exception as exc:
            logger.warning("risk history: cannot read %s: %s", self.url, exc)
        finally:
            _close(store, self.url)

    def _run(self) -> None:
        self._stop.wait(self.start_after_s)
        while not self._stop.is_set():
            result: Scores | None = None
            try:
                result = self._round()
            except Exception:  # a bug here must not end the thread: the next round may work
                logger.exception("background scoring of %s: the round failed", self.url)
            finally:
                self._done.set()
            self._stop.wait(self.every_s if result is not None else min(self.every_s, 30.0))

    def _round(self) -> Scores | None:
        """One live pass and, after it, the hours the risk history lacks."""
        result = self.score_once()
        if result is not None:
            with self._lock:
                # keep the last good scores visible while a pass fails
                if result.frame is not None or self._latest is None or self._latest.frame is None:
                    self._latest = result
                else:
                    self._latest = Scores(self._latest.at, self._latest.frame, result.error)
        self._done.set()  # the live scores are ready; the history may take longer
        if self.history is not None and result is not None:
            self._extend_history()
        return result


def _close(store: Store, url: str) -> None:
    """Close a pass's connection; a failure to close is logged, never raised (it would end
    the thread and leave the dashboard without scores)."""
    try:
        store.close()
    except Exception as exc:
        logger.warning("scoring %s: closing the store failed: %s", url, exc)
