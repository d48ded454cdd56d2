"""The exporter's state (one entry per GPU slot) and its Prometheus text rendering.

Kept apart from the HTTP and threading code in ``exporter.py`` so the text can be built and
benchmarked on its own. Values are formatted when a batch arrives, label sets when a GPU first
appears, so rendering is string joins only (see bench/bench_exporter.py).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from gpuwarden.readings import screen
from gpuwarden.telemetry import FIELDS, Batch, GpuId

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_Slot = tuple[str, int]  # (hostname, index): where a GPU sits; the UUID says which board


def escape_label(value: str) -> str:
    """Escape a label value for the text format (backslash, double quote, newline)."""
    if "\\" in value or '"' in value or "\n" in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def gpu_labels(gpu: GpuId) -> str:
    """dcgm-exporter's label set, so its Grafana dashboards keep working.

    dcgm-exporter writes ``gpu, UUID, pci_bus_id, device, modelName, Hostname``; an empty
    value is left out (Prometheus treats an empty label as absent anyway).
    """
    pairs = (
        ("gpu", str(gpu.index)),
        ("UUID", gpu.uuid),
        ("pci_bus_id", gpu.pci_bus_id),
        ("device", f"nvidia{gpu.index}"),
        ("modelName", gpu.model),
        ("Hostname", gpu.hostname),
    )
    return ",".join(f'{k}="{escape_label(v)}"' for k, v in pairs if v)


def format_value(value: float) -> str:
    """Shortest exact text: ``41`` rather than ``41.0``, ``312.447`` as is."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


@dataclass
class GpuReading:
    """The exporter's view of one GPU slot: its labels, last values, whether it answered."""

    gpu: GpuId
    labels: str = ""
    #: field name -> formatted value, from the last sample; empty while the GPU is absent.
    values: dict[str, str] = field(default_factory=dict)
    up: bool = False
    xids: Counter[int] = field(default_factory=Counter)
    #: (field, reason) -> readings rejected as impossible since the exporter started.
    rejected: Counter[tuple[str, str]] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.labels = gpu_labels(self.gpu)

    def relabel(self, gpu: GpuId) -> None:
        self.gpu = gpu
        self.labels = gpu_labels(gpu)


@dataclass
class CollectorHealth:
    """How the collector behind the exporter is doing (``gpuwarden_collector_*``)."""

    collector_url: str
    has_store: bool
    attempts: int = 0
    errors_total: int = 0
    store_errors_total: int = 0
    last_ok: bool = False
    last_error: str = ""
    last_success_ts: float | None = None
    last_duration_s: float | None = None
    last_problems: int = 0


class ExporterState:
    """Everything /metrics shows; changed only by ``apply`` and ``record_failure``."""

    def __init__(self, collector_url: str, has_store: bool) -> None:
        self.gpus: dict[_Slot, GpuReading] = {}
        self.health = CollectorHealth(collector_url, has_store)

    def _state_for(self, gpu: GpuId) -> GpuReading:
        slot = (gpu.hostname, gpu.index)
        state = self.gpus.get(slot)
        if state is None or (gpu.uuid and state.gpu.uuid and gpu.uuid != state.gpu.uuid):
            # a new board in the slot: its Xid history is not the old board's
            state = self.gpus[slot] = GpuReading(gpu)
        elif gpu != state.gpu and (gpu.uuid or not state.gpu.uuid):
            state.relabel(gpu)
        return state

    def apply(self, batch: Batch, duration_s: float, now: float) -> None:
        """Take one successful batch. A GPU seen before and absent now is down (up 0) and its
        fields are not exported: a stale value would look current, and missing is never 0.
        NaN and infinite values are missing too, and so is every impossible reading (a DCGM
        sentinel, a sensor the board lacks, out of range: ``readings.screen``), counted."""
        batch = screen(batch)
        seen: set[int] = set()
        for sample in batch.samples:
            state = self._state_for(sample.gpu)
            state.values = {
                k: format_value(float(v)) for k, v in sample.values.items() if math.isfinite(v)
            }
            state.up = True
            seen.add(id(state))
        for state in self.gpus.values():
            if id(state) not in seen:
                state.up = False
                state.values = {}
        for event in batch.events:
            state = self._state_for(event.gpu)
            if event.kind == "xid" and event.code is not None:
                state.xids[event.code] += 1
            elif event.kind == "gpu_lost":
                state.up = False
        for r in batch.rejected:
            self._state_for(r.gpu).rejected[r.field, r.reason] += 1
        h = self.health
        h.attempts += 1
        h.last_duration_s, h.last_problems = duration_s, len(batch.problems)
        if batch.problems and not (batch.samples or batch.events or batch.nodes):
            # nothing but problems: every part of the source failed (its only endpoint is
            # unreachable), so the source is down although collect() returned
            h.errors_total += 1
            h.last_ok = False
            h.last_error = "nothing could be read: " + "; ".join(batch.problems[:3])
        else:
            h.last_ok, h.last_error = True, ""
            h.last_success_ts = now

    def record_failure(self, error: str, duration_s: float) -> None:
        """collect() raised: count it and keep the last good values."""
        h = self.health
        h.attempts += 1
        h.errors_total += 1
        h.last_ok, h.last_error, h.last_duration_s = False, error, duration_s

    def render(self) -> bytes:
        out: list[str] = []
        gpus = sorted(self.gpus.values(), key=lambda s: (s.gpu.hostname, s.gpu.index))
        for f in FIELDS:
            lines = [f"{f.dcgm}{{{s.labels}}} {v}\n" for s in gpus if (v := s.values.get(f.name))]
            if lines:
                help_ = f"{f.help.rstrip('.')} (in {f.unit})."  # dcgm-exporter's style
                out.append(f"# HELP {f.dcgm} {help_}\n# TYPE {f.dcgm} {f.kind}\n")
                out.extend(lines)
        if gpus:
            out.append(
                "# HELP gpuwarden_gpu_up 1 if the GPU answered in the last collection, 0 if it "
                "was seen before and is gone now or fell off the bus (gpu_lost).\n"
                "# TYPE gpuwarden_gpu_up gauge\n"
            )
            out.extend(f"gpuwarden_gpu_up{{{s.labels}}} {int(s.up)}\n" for s in gpus)
        xid_lines = [
            f'gpuwarden_xid_errors_total{{{s.labels},xid="{code}"}} {n}\n'
            for s in gpus
            for code, n in sorted(s.xids.items())
        ]
        if xid_lines:
            out.append(
                "# HELP gpuwarden_xid_errors_total Xid errors per GPU and Xid code since this "
                "exporter started (dcgm-exporter keeps only the last one).\n"
                "# TYPE gpuwarden_xid_errors_total counter\n"
            )
            out.extend(xid_lines)
        rejected_lines = [
            f'gpuwarden_rejected_readings_total{{{s.labels},field="{name}",reason="{why}"}} {n}\n'
            for s in gpus
            for (name, why), n in sorted(s.rejected.items())
        ]
        if rejected_lines:
            out.append(
                "# HELP gpuwarden_rejected_readings_total Readings left out as impossible, per "
                "field and reason (sentinel: a DCGM blank value; no_sensor: the board lacks the "
                "sensor; out_of_range: outside the field's plausible range), since this "
                "exporter started.\n# TYPE gpuwarden_rejected_readings_total counter\n"
            )
            out.extend(rejected_lines)
        out.extend(self._render_health())
        return "".join(out).encode()

    def _render_health(self) -> list[str]:
        h = self.health
        c = f'collector="{escape_label(h.collector_url)}"'
        out = [
            "# HELP gpuwarden_collector_errors_total Collections that failed: raised, or read "
            "nothing (every part of the source unreachable).\n"
            "# TYPE gpuwarden_collector_errors_total counter\n"
            f"gpuwarden_collector_errors_total{{{c}}} {h.errors_total}\n"
        ]
        if h.attempts:
            out.append(
                "# HELP gpuwarden_collector_up 1 if the last collection read its source, 0 if "
                "it raised or read nothing (every part of the source unreachable).\n"
                "# TYPE gpuwarden_collector_up gauge\n"
                f"gpuwarden_collector_up{{{c}}} {int(h.last_ok)}\n"
                "# HELP gpuwarden_collector_problems Parts of the source that could not be read "
                "in the last collection (an endpoint down, a GPU that timed out).\n"
                "# TYPE gpuwarden_collector_problems gauge\n"
                f"gpuwarden_collector_problems{{{c}}} {h.last_problems}\n"
            )
        if h.last_duration_s is not None:
            out.append(
                "# HELP gpuwarden_collect_duration_seconds How long the last collection took.\n"
                "# TYPE gpuwarden_collect_duration_seconds gauge\n"
                f"gpuwarden_collect_duration_seconds{{{c}}} {h.last_duration_s!r}\n"
            )
        if h.last_success_ts is not None:
            out.append(
                "# HELP gpuwarden_collector_last_success_timestamp_seconds Unix time of the last "
                "collection that read its source.\n"
                "# TYPE gpuwarden_collector_last_success_timestamp_seconds gauge\n"
                f"gpuwarden_collector_last_success_timestamp_seconds{{{c}}} "
                f"{h.last_success_ts!r}\n"
            )
        if h.has_store:
            out.append(
                "# HELP gpuwarden_store_write_errors_total Batches the store failed to write.\n"
                "# TYPE gpuwarden_store_write_errors_total counter\n"
                f"gpuwarden_store_write_errors_total{{{c}}} {h.store_errors_total}\n"
            )
        return out
