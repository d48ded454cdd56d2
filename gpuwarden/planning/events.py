"""The event queue of the discrete-event simulations (sleep replay, spot): (time, kind, payload) in time order, kinds
at one instant in their number's order, ties in the order they were pushed."""

from __future__ import annotations

import heapq


class Events:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, object]] = []
        self._seq = 0

    def push(self, ts: float, kind: int, payload: object) -> None:
        heapq.heappush(self._heap, (ts, kind, self._seq, payload))
        self._seq += 1

    def pop(self) -> tuple[float, int, object]:
        ts, kind, _, payload = heapq.heappop(self._heap)
        return ts, kind, payload

    def __bool__(self) -> bool:
        return bool(self._heap)
