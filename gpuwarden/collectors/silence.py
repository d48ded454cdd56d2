"""Silence is a signal: a GPU that stops reporting while its node still reports.

Field studies of GPU detachment report little numeric warning before the GPU falls off the bus,
but its telemetry goes quiet first: a board that stops answering NVML or drops out of
dcgm-exporter's scrape while the rest of its node keeps reporting. ``SilenceWatch`` sees every
batch a collector returns (``gpuwarden collect``, the exporter, ``serve``) and turns that into
events the store keeps:

    gpu_missing    the first batch in which a GPU seen before is absent while another GPU of its
                   node reports (detail: when it last reported)
    gpu_reporting  the first batch in which it reports again (detail: how long it was silent;
                   ``code`` holds the gap in whole seconds, for features and charts)

A node whose GPUs are all absent is a node or collector problem (an endpoint down, the host
rebooting), said by the collector's ``problems`` and ``gpuwarden_collector_up``, not a GPU
event. GPUs are tracked by slot (hostname, index), so a swapped board is not a silence.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpuwarden.telemetry import Batch, Event, GpuId


@dataclass
class _Slot:
    gpu: GpuId
    last_ts: float
    silent_since: float | None = None


class SilenceWatch:
    """Adds ``gpu_missing`` / ``gpu_reporting`` events to batches (see the module docstring)."""

    def __init__(self) -> None:
        self._slots: dict[tuple[str, int], _Slot] = {}

    def observe(self, batch: Batch) -> Batch:
        """``batch`` with the silence events it reveals appended; the same batch when none."""
        present = {(s.gpu.hostname, s.gpu.index): s.gpu for s in batch.samples}
        if not present:
            return batch
        nodes = {host for host, _ in present}
        found: list[Event] = []
        for key, slot in self._slots.items():
            gpu = present.get(key)
            if gpu is not None:
                if slot.silent_since is not None:
                    gap = batch.ts - slot.silent_since
                    found.append(
                        Event(batch.ts, gpu, "gpu_reporting", int(gap), f"silent for {gap:.0f} s")
                    )
                    slot.silent_since = None
            elif key[0] in nodes and slot.silent_since is None:
                slot.silent_since = slot.last_ts
                found.append(
                    Event(
                        batch.ts,
                        slot.gpu,
                        "gpu_missing",
                        None,
                        f"no reading since {slot.last_ts:.0f} while its node reports",
                    )
                )
        for key, gpu in present.items():
            known = self._slots.get(key)
            if known is None:
                self._slots[key] = _Slot(gpu, batch.ts)
            else:
                known.gpu, known.last_ts = gpu, batch.ts
        if not found:
            return batch
        return dataclasses.replace(batch, events=(*batch.events, *found))


__all__ = ["SilenceWatch"]
