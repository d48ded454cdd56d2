"""Measured GPU utilisation per node, over a short window, from what agents send with each sync.

Kept in memory only: the window is minutes long, so a restarted service has an empty one and
judges nodes by allocation (as for a node without NVML) until its agents have synced for a
window again. A node counts as measured only when every GPU it registered reported a
utilisation inside the window: a GPU that stopped answering is missing, never idle.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

#: how far back the utilisation a node is judged by reaches (seconds)
WINDOW_S = 600.0


class UsageWindow:
    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: dict[str, deque[tuple[float, int, float]]] = {}  # node -> (t, gpu, pct)

    def add(self, node: str, now: float, gpus: Iterable[Mapping[str, Any]]) -> None:
        q = self._samples.setdefault(node, deque())
        for g in gpus:
            pct = g.get("util_pct")
            if pct is not None:
                q.append((now, int(g["index"]), float(pct)))
        self._trim(q, now)

    def _trim(self, q: deque[tuple[float, int, float]], now: float) -> None:
        while q and q[0][0] < now - self.window_s:
            q.popleft()

    def gpu_means(self, node: str, now: float) -> dict[int, float]:
        """GPU index -> mean utilisation (0..100) inside the window, for GPUs that reported."""
        q = self._samples.get(node)
        if not q:
            return {}
        self._trim(q, now)
        sums: dict[int, list[float]] = {}
        for _, gpu, pct in q:
            acc = sums.setdefault(gpu, [0.0, 0.0])
            acc[0] += pct
            acc[1] += 1
        return {g: s / n for g, (s, n) in sums.items()}

    def node_share(self, node: str, gpus: Iterable[int], now: float) -> float | None:
        """Mean utilisation (0..1) of ``gpus`` (the node's registered GPUs) inside the window;
        None unless each of them reported."""
        means = self.gpu_means(node, now)
        want = list(gpus)
        if not want or any(g not in means for g in want):
            return None
        return sum(means[g] for g in want) / len(want) / 100.0

    def forget(self, node: str) -> None:
        self._samples.pop(node, None)


__all__ = ["WINDOW_S", "UsageWindow"]
