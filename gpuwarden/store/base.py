"""The store protocol, in two tiers.

    ReadableStore   what models, the dashboard, the exporter and reports read: samples, a window
                    at a resolution (``read_window``: rollups stitched to the raw tail), events,
                    failures, the GPUs seen, and gpuwarden's stored verdicts. A Prometheus
                    server is only this.
    WritableStore   what collectors, ingest and ``serve`` write (samples, events, failures, the
                    readings rejected as impossible, verdicts); also compacts.
    Store           both (SQLite; VictoriaMetrics and InfluxDB, which accept writes).

Frames are pandas DataFrames in the *wide* layout: one row per GPU per timestamp, the identity
columns of ``telemetry.FRAME_ID_COLUMNS`` (``ts`` in Unix seconds), then one float64 column per
catalogue field with NaN for missing. Every backend (SQLite here; InfluxDB and
Prometheus-compatible ones later) reads and writes that layout, so models and dashboards never
see a backend's own shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gpuwarden.health import Verdict
from gpuwarden.telemetry import Batch, Event, Failure, Rejection

if TYPE_CHECKING:
    import pandas as pd


@runtime_checkable
class ReadableStore(Protocol):
    """Reads. Every frame is the wide layout above; missing values are NaN, never 0."""

    url: str

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

    def read_window(
        self,
        *,
        start: float,
        end: float,
        fields: Sequence[str] | None = None,
        resolution_s: int | None = None,
        uuids: Sequence[str] | None = None,
        hostnames: Sequence[str] | None = None,
        progress: bool = False,
    ) -> pd.DataFrame:
        """The one read of a window at a resolution; models, the dashboard and the alerts use it.

        ``resolution_s`` None: raw samples in ``[start, end)``. A rollup resolution: one row
        per GPU and bucket (``ts`` its start) from ``start``'s bucket to the one holding
        ``end``, nothing at or after ``end`` read: the buckets ``compact`` rolled up, then the
        raw samples after them aggregated exactly as ``compact`` does (``window.aggregate``:
        counters the last value, bitmasks OR, gauges the mean, ``<field>_max`` the peak).
        ``progress`` shows a bar over the raw samples read. Backends with only
        ``read_samples`` implement it with ``gpuwarden.store.window.read_window``."""
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

    def read_rejections(
        self, *, start: float | None = None, end: float | None = None
    ) -> pd.DataFrame:
        """Readings rejected as impossible in ``[start, end)`` (``gpuwarden.readings``), counted:
        hostname, gpu, uuid, field, reason, count, first_ts, last_ts; most first."""
        ...

    def read_verdicts(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
        latest: bool = False,
        changes: bool = False,
    ) -> pd.DataFrame:
        """Stored verdicts in ``[start, end)``, ``health.VERDICT_COLUMNS``, by ts; ``latest``:
        only each GPU's newest one before ``end``; ``changes``: only where a GPU's state
        changes in the window (``health.state_changes``: its first verdict there and each one
        whose state differs from the one before), not the heartbeats that repeat a state."""
        ...

    def gpus(self) -> pd.DataFrame:
        """Every GPU seen: hostname, gpu, uuid, pci_bus_id, model, rack, first_ts, last_ts.
        MIG instances are not listed (reads without ``uuids`` leave them out too), nor are
        devices that are not GPUs (index -1: an NVSwitch, a PCI address no GPU has, whose
        kernel-log events are kept per node; ``read_events`` returns their events)."""
        ...

    def mig_instances(self) -> pd.DataFrame:
        """MIG instances (``telemetry.mig_uuid`` keys): hostname, gpu, uuid, parent_uuid,
        model (with the MIG profile), first_ts, last_ts."""
        ...

    def read_assignments(
        self,
        *,
        start: float | None = None,
        end: float | None = None,
        uuids: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Who held each GPU or MIG instance (Kubernetes namespace, pod, container) over time,
        overlapping ``[start, end)``: uuid, hostname, gpu, namespace, pod, container, ts_from,
        ts_to (NaN while held), last_seen."""
        ...

    def read_nodes(self, *, hostnames: Sequence[str] | None = None) -> pd.DataFrame:
        """Per node: hostname, driver_version, cuda_driver_version ("" unknown), first_ts,
        last_ts."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class WritableStore(Protocol):
    """Writes, each call one transaction: a failed write leaves what was stored as it was."""

    url: str

    def write_batch(self, batch: Batch) -> None:
        """Store one collector batch (samples, events, assignments, node versions) in one
        transaction."""
        ...

    def write_frame(self, frame: pd.DataFrame, *, progress: bool = False) -> int:
        """Bulk-write a wide frame (simulator output, ingest). Returns rows written."""
        ...

    def write_events(self, events: Iterable[Event]) -> int: ...

    def write_failures(self, failures: Iterable[Failure]) -> int: ...

    def write_rejections(self, rejections: Iterable[Rejection]) -> int:
        """Store rejected readings (``Batch.rejected``, ingest's); a repeat changes nothing."""
        ...

    def write_verdicts(self, verdicts: Iterable[Verdict]) -> int:
        """Store verdicts; one per GPU and time (a repeat replaces it). Returns rows written."""
        ...

    def compact(self, now: float) -> None:
        """Roll raw samples up into downsampled buckets and drop raw samples past retention."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Store(ReadableStore, WritableStore, Protocol):
    """A store that reads and writes (SQLite, the default)."""
