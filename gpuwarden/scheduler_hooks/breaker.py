"""A circuit breaker around any tagger: never take more than a share of the fleet out at once.

One bad model, a collector reporting garbage or a rack-wide sensor fault could otherwise drain a
whole cluster within one scoring interval. As NVIDIA's NVSentinel caps the share of nodes it
cordons, the breaker lets at most ``max_share`` of the nodes (default 10%, at least
``min_nodes``) be newly tagged at-risk or unhealthy within ``window_s`` (default 1 h); further
nodes are refused (``TagResult.blocked``) and the caller alerts people instead. Restoring a node
to ok is never refused, and a node already counted in the window may be re-tagged freely.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from gpuwarden.errors import ConfigError
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks.base import NodeHealth, Tagger, TagResult
from gpuwarden.wording import counted


class CircuitBreaker:
    """``Tagger`` wrapper. ``fleet_nodes()``: how many nodes the fleet has now (the service
    counts the nodes it has seen). ``clock``: Unix seconds."""

    def __init__(
        self,
        tagger: Tagger,
        *,
        fleet_nodes: Callable[[], int],
        max_share: float = 0.1,
        window_s: float = 3600.0,
        min_nodes: int = 1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 < max_share <= 1:
            raise ConfigError(f"circuit breaker share must be in (0, 1], not {max_share!r}")
        if not window_s > 0:
            raise ConfigError(f"circuit breaker window must be positive, not {window_s!r}")
        if min_nodes < 0:
            raise ConfigError(f"circuit breaker min_nodes must be >= 0, not {min_nodes!r}")
        self.tagger = tagger
        self.name = tagger.name
        self.fleet_nodes = fleet_nodes
        self.max_share = float(max_share)
        self.window_s = float(window_s)
        self.min_nodes = int(min_nodes)
        self._clock = clock
        self._recent: dict[str, float] = {}  # hostname -> when it was tagged, within the window
        self._lock = threading.Lock()
        self.trips = 0  # refusals so far (gpuwarden_circuit_breaker_refusals_total)

    @property
    def dry_run(self) -> bool:
        return self.tagger.dry_run

    def limit(self) -> int:
        """Nodes that may be newly tagged within one window."""
        return max(self.min_nodes, math.floor(self.max_share * max(0, self.fleet_nodes())))

    def is_open(self) -> bool:
        """True while the window's budget is spent (further nodes would be refused)."""
        with self._lock:
            self._prune(self._clock())
            return len(self._recent) >= self.limit()

    def apply(self, node: NodeHealth) -> TagResult:
        if node.state is GpuState.OK:
            return self.tagger.apply(node)
        with self._lock:
            now = self._clock()
            self._prune(now)
            if node.hostname not in self._recent and len(self._recent) >= self.limit():
                self.trips += 1
                return TagResult(
                    False,
                    f"circuit breaker open: {counted(len(self._recent), 'node')} already re-tagged by "
                    f"{self.name} within {self.window_s / 60:g} min, the limit is "
                    f"{self.limit()} ({self.max_share:.0%} of {counted(self.fleet_nodes(), 'node')}); "
                    f"{node.hostname} left as it is",
                    dry_run=self.dry_run,
                    blocked=True,
                )
            # reserve the slot before calling out, so two threads cannot both take the last one
            reserved = node.hostname not in self._recent
            if reserved:
                self._recent[node.hostname] = now
        try:
            result = self.tagger.apply(node)
        except BaseException:
            self._release(node.hostname, reserved)
            raise
        if not result.changed:
            self._release(node.hostname, reserved)  # nothing was re-tagged: costs nothing
        return result

    def _release(self, hostname: str, reserved: bool) -> None:
        if reserved:
            with self._lock:
                self._recent.pop(hostname, None)

    def _prune(self, now: float) -> None:
        for host, ts in list(self._recent.items()):
            if now - ts >= self.window_s:
                del self._recent[host]


__all__ = ["CircuitBreaker"]
