"""The store protocol.

Frames are pandas DataFrames in the *wide* layout: one row per GPU per timestamp, the identity
columns of ``telemetry.FRAME_ID_COLUMNS`` (``ts`` in Unix seconds), then one float64 column per
catalogue field with NaN for missing. Every backend (SQLite here; InfluxDB and
Prometheus-compatible ones later) reads and writes that layout, so models and dashboards never
see a backend's own shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gpuwarden.telemetry import Batch, Event, Failure

if TYPE_CHECKING:
    import pandas as pd


@runtime_checkable
class Store(Protocol):
    url: str

    def write_batch(self, batch: Batch) -> None:
        """Store one collector batch (samples and events) in one transaction."""
        ...

    def write_frame(self, frame: pd.DataFrame, *, progress: bool = False) -> int:
        """Bulk-write a wide frame (simulator output, ingest). Returns rows written."""
        ...

    def write_events(self, events: Iterable[Event]) -> int: ...

    def write_failures(self, failures: Iterable[Failure]) -> int: ...

    def read_samples(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
        hostnames: Sequence[str] | None = None,
        fields: Sequence[str] | None = None,
        resolution_s: int | None = None,
    ) -> pd.DataFrame:
        """Samples in ``[start, end)``; ``resolution_s`` reads the downsampled rollup instead
        of raw samples (counters: last value in the bucket; gauges: mean)."""
        ...

    def read_events(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
    ) -> pd.DataFrame: ...

    def read_failures(
        self, *, start: float | None = None, end: float | None = None
    ) -> pd.DataFrame: ...

    def gpus(self) -> pd.DataFrame:
        """Every GPU seen: hostname, gpu, uuid, pci_bus_id, model, rack, first_ts, last_ts."""
        ...

    def compact(self, now: float) -> None:
        """Roll raw samples up into downsampled buckets and drop raw samples past retention."""
        ...

    def close(self) -> None: ...
