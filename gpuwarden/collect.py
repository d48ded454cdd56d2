"""The collection loop: read a collector into a store on an interval, and keep going.

A collector that raises (nvidia-smi hung, an endpoint down, NVML hiccup) costs one interval, not
the process: the error is logged and counted and the next tick tries again. A store that cannot
take a batch (disk full, database locked past its timeout) keeps the batch in a bounded backlog
that is written first on the next tick, so a short outage loses nothing.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuwarden.collectors.base import Collector
from gpuwarden.collectors.silence import SilenceWatch
from gpuwarden.errors import GpuwardenError
from gpuwarden.store.base import Store
from gpuwarden.telemetry import Batch

log = logging.getLogger(__name__)


@dataclass
class CollectStats:
    ticks: int = 0
    samples: int = 0
    events: int = 0
    collect_errors: int = 0
    store_errors: int = 0
    problems: list[str] = field(default_factory=list)
    #: problems the collector reported beside a batch (an endpoint of several down, a field
    #: one GPU could not read), over every tick; ``problems`` holds the last tick's
    problem_count: int = 0


class CollectLoop:
    """``collector -> store`` every ``interval_s`` seconds.

    ``clock`` and ``sleep`` are seams for tests; ``backlog`` bounds how many unwritten batches
    are held while the store is failing (the oldest are dropped first, and counted).
    """

    def __init__(
        self,
        collector: Collector,
        store: Store,
        *,
        interval_s: float = 15.0,
        compact_every_s: float = 3600.0,
        backlog: int = 240,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.collector = collector
        self.store = store
        self.interval_s = interval_s
        self.compact_every_s = compact_every_s
        self.clock = clock
        self.sleep = sleep
        self.stats = CollectStats()
        self._pending: deque[Batch] = deque(maxlen=backlog)
        self._silence = SilenceWatch()
        self._last_compact = clock()

    def tick(self) -> Batch | None:
        """One collection and write. Returns the batch read, or None if the collector failed."""
        self.stats.ticks += 1
        batch: Batch | None = None
        try:
            batch = self.collector.collect()
        except GpuwardenError as exc:
            self.stats.collect_errors += 1
            log.warning("collector %s failed: %s", self.collector.url, exc)
        except Exception as exc:  # a collector bug must not stop collection of the fleet
            self.stats.collect_errors += 1
            log.exception("collector %s crashed: %s", self.collector.url, exc)
        if batch is not None:
            batch = self._silence.observe(batch)
            self.stats.samples += len(batch.samples)
            self.stats.events += len(batch.events)
            for problem in batch.problems:
                log.warning("collector %s: %s", self.collector.url, problem)
            self.stats.problems = list(batch.problems)
            self.stats.problem_count += len(batch.problems)
            self._pending.append(batch)
        self._flush()
        now = self.clock()
        if now - self._last_compact >= self.compact_every_s:
            try:
                self.store.compact(now)
                self._last_compact = now
            except GpuwardenError as exc:
                log.warning("store compaction failed: %s", exc)
        return batch

    def _flush(self) -> None:
        while self._pending:
            try:
                self.store.write_batch(self._pending[0])
            except Exception as exc:
                self.stats.store_errors += 1
                log.warning(
                    "store %s refused a batch (%d waiting): %s",
                    self.store.url,
                    len(self._pending),
                    exc,
                )
                return
            self._pending.popleft()

    def run(self, iterations: int | None = None) -> CollectStats:
        """Tick every ``interval_s`` until ``iterations`` ticks (forever when None)."""
        done = 0
        while iterations is None or done < iterations:
            started = self.clock()
            self.tick()
            done += 1
            if iterations is not None and done >= iterations:
                break
            self.sleep(max(0.0, self.interval_s - (self.clock() - started)))
        return self.stats
