"""GPU health transitions shared by the nvml:// and smi:// collectors.

A lost GPU stays lost for every read until someone reboots the node, so reporting it on every
read would bury the one moment that matters. ``GpuStates`` turns the state seen on each read
("ok", "gpu_lost", "gpu_requires_reset") into one ``Event`` per change, and a
``gpu_recovered`` event when a GPU that was down reads again.
"""

from __future__ import annotations

from gpuwarden.telemetry import Event, GpuId

OK = "ok"
LOST = "gpu_lost"
REQUIRES_RESET = "gpu_requires_reset"


class GpuStates:
    """Last health state per GPU slot; ``observe`` returns an event only on a change."""

    def __init__(self) -> None:
        self._state: dict[str, str] = {}

    def observe(
        self, key: str, gpu: GpuId, state: str, ts: float, detail: str = ""
    ) -> Event | None:
        """Record ``state`` for the slot ``key`` (any stable string: index, PCI bus id).

        Returns ``Event(kind=state)`` when a GPU goes down or changes how it is down,
        ``Event(kind="gpu_recovered")`` when it reads again, and None otherwise. A slot never
        seen before counts as "ok", so a healthy first read says nothing.
        """
        previous = self._state.get(key, OK)
        self._state[key] = state
        if state == previous:
            return None
        kind = "gpu_recovered" if state == OK else state
        if kind == "gpu_recovered" and not detail:
            detail = f"reads again after {previous}"
        return Event(ts=ts, gpu=gpu, kind=kind, detail=detail)

    def is_down(self, key: str) -> bool:
        return self._state.get(key, OK) != OK
