"""GPU telemetry as Telegraf writes it to InfluxDB: where many fleets already keep their history.

Two of Telegraf's inputs carry it (measurements, tags and fields as their READMEs and parsers
in github.com/influxdata/telegraf name them):

- ``inputs.nvidia_smi``: measurement ``nvidia_smi``, one point per GPU and poll, tagged
  ``index``, ``uuid``, ``name`` (the model), ``pstate``, ``compute_mode`` (and ``host``, from
  the agent); fields in nvidia-smi's units (``TELEGRAF_FIELDS``). Newer drivers' ECC counts
  come as DRAM and SRAM parts, summed here as ``-q`` text's are (``collectors.smi_text``):
  correctable parts into the single-bit totals, uncorrectable ones into the double-bit totals,
  only when every part reads. ``Yes``/``No`` fields read 1/0; ``driver_version`` and
  ``cuda_version`` are the node's.
- ``inputs.prometheus`` scraping dcgm-exporter: each ``DCGM_FI_*`` series either as its own
  measurement with a ``gauge``/``counter``/``value`` field (metric_version 1) or as a field of
  the ``prometheus`` measurement (metric_version 2); dcgm-exporter's labels (``gpu``, ``UUID``,
  ``Hostname``, ``modelName``, ``pci_bus_id``) are tags. Fields map by the catalogue's
  dcgm-exporter names, as ``dcgm+http://`` reads them.

``points_to_batches`` turns parsed points into screened ``Batch``es, one per time. Other
measurements (``nvidia_smi_mig``, ``nvidia_smi_process``, cpu, ...) are counted, not read.
dcgm-exporter's Xid series, read over time by ``XidHistory``, give the Xid events, as
``dcgm+http://`` reads them live: the last-Xid gauge (``DCGM_FI_DEV_XID_ERRORS``) one each time
a GPU's gauge changes to another non-zero code (two of the same Xid in a row are one change,
there as here), 4.x's windowed count (``DCGM_EXP_XID_ERRORS_COUNT``) one per rise, which counts
a repeated Xid too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuwarden.collectors.lineproto import Point, Value
from gpuwarden.readings import gpu_index, screen
from gpuwarden.telemetry import (
    DCGM_XID_COUNT_METRIC,
    DCGM_XID_METRIC,
    FIELD_BY_DCGM,
    TIME_UNKNOWN,
    Batch,
    Event,
    GpuId,
    NodeInfo,
    Sample,
)

NVIDIA_SMI = "nvidia_smi"
#: Telegraf's nvidia_smi field -> catalogue field (units agree: C, W, %, MiB, MHz, us); of two
#: fields for one, the first that reads.
TELEGRAF_FIELDS: dict[str, str] = {
    "temperature_gpu": "gpu_temp_c",
    "temperature_memory": "mem_temp_c",
    # schema v13's average first, the power nvidia-smi -q's text shows and the -q readers
    # take; the instantaneous draw when there is no average (v12 and older)
    "power_draw_average": "power_w",
    "power_draw": "power_w",
    "power_limit": "power_limit_w",
    "utilization_gpu": "gpu_util_pct",
    "utilization_memory": "mem_copy_util_pct",
    "memory_total": "fb_total_mib",
    "memory_used": "fb_used_mib",
    "memory_free": "fb_free_mib",
    "clocks_current_sm": "sm_clock_mhz",
    "clocks_current_memory": "mem_clock_mhz",
    "pcie_link_gen_current": "pcie_link_gen",
    "pcie_link_width_current": "pcie_link_width",
    "retired_pages_multiple_single_bit": "retired_pages_sbe",
    "retired_pages_double_bit": "retired_pages_dbe",
    "retired_pages_pending": "retired_pages_pending",
    "remapped_rows_correctable": "remapped_rows_correctable",
    "remapped_rows_uncorrectable": "remapped_rows_uncorrectable",
    "remapped_rows_pending": "remapped_rows_pending",
    "remapped_rows_failure": "remapped_rows_failure",
    # the time held at the power cap: nvml.h's NVML_FI_DEV_PERF_POLICY_POWER, what
    # DCGM_FI_DEV_POWER_VIOLATION reads (see collectors.smi_text)
    "clocks_event_reasons_counters_sw_power_cap": "power_violation_us",
}


def _ecc_parts(scope: str, kind: str) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """The parts of one ECC total (DRAM, then SRAM), each as the ways Telegraf may write it,
    the first that reads winning: SRAM uncorrectable is one field, or its parity and SEC-DED
    halves."""
    p = f"ecc_errors_{scope}_"
    if kind == "correctable":
        return (((p + "dram_correctable",),), ((p + "sram_correctable",),))
    halves = (p + "sram_uncorrectable_parity", p + "sram_uncorrectable_secded")
    return (((p + "dram_uncorrectable",),), ((p + "sram_uncorrectable",), halves))


#: ECC totals from Telegraf's newer (schema v13) parts, as ``-q`` text's are summed.
_ECC_PARTS = {
    f"ecc_{short}_{scope}_total": _ecc_parts(scope, kind)
    for scope in ("volatile", "aggregate")
    for short, kind in (("sbe", "correctable"), ("dbe", "uncorrectable"))
}
#: metric_version 1's field names for a series' value
_PROM_VALUE_FIELDS = ("gauge", "counter", "value", "untyped")


#: dcgm-exporter's Xid series read for events, not as catalogue fields.
XID_SERIES = (DCGM_XID_METRIC, DCGM_XID_COUNT_METRIC, "DCGM_FI_DEV_XID_ERRORS_ACTIVE")

_GpuKey = tuple[str, int, str]


@dataclass(frozen=True)
class XidCount:
    """One reading of dcgm-exporter 4.x's windowed Xid count (``DCGM_EXP_XID_ERRORS_COUNT``,
    ``xid`` and ``window_size_in_ms`` labels): how many Xids of ``code`` within the window."""

    ts: float
    gpu: GpuId
    code: int
    count: float
    window_ms: str = ""


class XidHistory:
    """dcgm-exporter's Xid series of each GPU across the points of one source, read in time
    order, as ``dcgm+http://`` reads them scrape by scrape:

    - the last-Xid gauge (``DCGM_FI_DEV_XID_ERRORS``): an ``Event`` when it changes to a
      non-zero code. A GPU's first code is kept with its time unknown (``TIME_UNKNOWN``: it
      may be older than the history, and never makes a GPU unhealthy by itself);
    - 4.x's windowed count (``XidCount``): a rise, or a code appearing, is that many new Xids
      of the code; a fall is old ones leaving the window, and a code whose series is gone at a
      time the GPU reports has left it (its next appearance is new). A count at the GPU's first
      time is of unknown time. A gauge change the count already made an event of at that time
      is not a second one.

    ``seen`` GPUs: those of every dcgm-exporter point, so a series that appears later than its
    GPU is known to be new. Each call must hold every point of the times it holds (a scrape
    cut across two calls would read as a series gone and back): ``ingest`` cuts a file between
    times."""

    def __init__(self) -> None:
        self._last: dict[_GpuKey, int] = {}
        self._window: dict[tuple[_GpuKey, int], float] = {}
        self._seen: set[_GpuKey] = set()

    def events(
        self,
        gauges: list[tuple[float, GpuId, int]],
        counts: Iterable[XidCount] = (),
        seen: Iterable[tuple[float, GpuId]] = (),
    ) -> list[Event]:
        by_ts: dict[float, tuple[list, list, set[_GpuKey]]] = {}
        for ts, gpu, code in gauges:
            by_ts.setdefault(ts, ([], [], set()))[0].append((gpu, code))
        for c in counts:
            by_ts.setdefault(c.ts, ([], [], set()))[1].append(c)
        for ts, gpu in seen:
            by_ts.setdefault(ts, ([], [], set()))[2].add(_key(gpu))
        out: list[Event] = []
        for ts in sorted(by_ts):
            at_ts, windowed, present = by_ts[ts]
            present |= {_key(g) for g, _ in at_ts} | {_key(c.gpu) for c in windowed}
            made = self._counts(ts, windowed, present, out)
            for gpu, code in at_ts:
                self._gauge(ts, gpu, code, made, out)
            self._seen |= present
        return out

    def _counts(
        self, ts: float, counts: list[XidCount], present: set[_GpuKey], out: list[Event]
    ) -> set[tuple[_GpuKey, int]]:
        now: dict[tuple[_GpuKey, int], XidCount] = {}
        for c in counts:
            pair = (_key(c.gpu), c.code)
            if pair not in now or c.count > now[pair].count:
                now[pair] = c
        made: set[tuple[_GpuKey, int]] = set()
        for pair, c in now.items():
            before = self._window.get(pair, 0.0)
            within = f" within {float(c.window_ms) / 1000:g} s" if c.window_ms.isdigit() else ""
            if c.count <= 0:
                continue
            if pair[0] not in self._seen:
                detail = f"{TIME_UNKNOWN} ({DCGM_XID_COUNT_METRIC}{{xid={c.code}}} = "
                detail += f"{c.count:g}{within}, through Telegraf)"
            elif c.count > before:
                detail = f"{c.count - before:g} new ({DCGM_XID_COUNT_METRIC} {before:g} -> "
                detail += f"{c.count:g}{within}, through Telegraf)"
            else:
                continue
            made.add(pair)
            out.append(Event(ts=ts, gpu=c.gpu, kind="xid", code=c.code, detail=detail))
        for pair in [p for p in self._window if p[0] in present and p not in now]:
            del self._window[pair]  # left the window: its next appearance is new
        self._window.update({pair: c.count for pair, c in now.items()})
        return made

    def _gauge(
        self, ts: float, gpu: GpuId, code: int, made: set[tuple[_GpuKey, int]], out: list[Event]
    ) -> None:
        key = _key(gpu)
        previous = self._last.get(key)
        self._last[key] = code
        if code == 0 or code == previous or (key, code) in made:
            return
        if previous is None:
            detail = f"{TIME_UNKNOWN} ({DCGM_XID_METRIC} = {code}, through Telegraf)"
        else:
            detail = f"{DCGM_XID_METRIC} changed from {previous} to {code} (through Telegraf)"
        out.append(Event(ts=ts, gpu=gpu, kind="xid", code=code, detail=detail))


def _key(gpu: GpuId) -> _GpuKey:
    return (gpu.hostname, gpu.index, gpu.uuid)


@dataclass
class Read:
    """What ``points_to_batches`` made of the points: batches, and what it left out."""

    batches: list[Batch] = field(default_factory=list)
    #: points of other measurements, by measurement
    other: dict[str, int] = field(default_factory=dict)
    #: (line, why) of the GPU points not read: no time, or no GPU index
    unplaced: list[tuple[int, str]] = field(default_factory=list)


def _number(v: Value) -> float | None:
    """A field value as a number: Yes/No as 1/0, a number as itself; other text is None."""
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int | float):
        f = float(v)
        return f if math.isfinite(f) else None
    text = v.strip().lower()
    return 1.0 if text == "yes" else 0.0 if text == "no" else None


def _sum(fields: dict[str, Value], names: tuple[str, ...]) -> float | None:
    """The sum of ``names``, or None unless every one reads."""
    total = 0.0
    for name in names:
        v = _number(fields[name]) if name in fields else None
        if v is None:
            return None
        total += v
    return total


def _nvidia_smi(p: Point, host: str) -> tuple[GpuId, dict[str, float], NodeInfo | None] | None:
    index = gpu_index(p.tags.get("index", ""))
    if index is None:
        return None
    hostname = p.tags.get("host") or host
    gpu = GpuId(hostname, index, p.tags.get("uuid", ""), "", p.tags.get("name", ""))
    values: dict[str, float] = {}
    for name, ours in TELEGRAF_FIELDS.items():
        if name in p.fields and (v := _number(p.fields[name])) is not None:
            values.setdefault(ours, v)
    for ours, parts in _ECC_PARTS.items():
        got = [next((x for x in (_sum(p.fields, way) for way in ways) if x is not None), None)
               for ways in parts]  # fmt: skip
        if all(g is not None for g in got):
            values[ours] = float(sum(g for g in got if g is not None))
    driver, cuda = p.fields.get("driver_version"), p.fields.get("cuda_version")
    node = None
    if isinstance(driver, str) or isinstance(cuda, str):
        node = NodeInfo(
            float(p.ts or 0.0),
            hostname,
            driver if isinstance(driver, str) else "",
            cuda if isinstance(cuda, str) else "",
        )
    return gpu, values, node


def _is_dcgm(name: str) -> bool:
    return name.startswith("DCGM_FI_") or name == DCGM_XID_COUNT_METRIC


def _dcgm_series(p: Point) -> dict[str, Value]:
    """The point's dcgm-exporter series: metric name -> value."""
    if _is_dcgm(p.measurement):  # metric_version 1
        found = next((p.fields[k] for k in _PROM_VALUE_FIELDS if k in p.fields), None)
        return {p.measurement: found} if found is not None else {}
    # metric_version 2: the prometheus measurement, one field per series
    return {k: v for k, v in p.fields.items() if _is_dcgm(k)}


def _dcgm_fields(p: Point) -> dict[str, Value]:
    """The point's dcgm-exporter series the catalogue reads: metric name -> value."""
    return {k: v for k, v in _dcgm_series(p).items() if k in FIELD_BY_DCGM}


def _dcgm_gpu(p: Point, host: str) -> GpuId | None:
    t = p.tags
    index = gpu_index(t.get("gpu") or t.get("device", "").removeprefix("nvidia"))
    if index is None:
        return None
    hostname = t.get("Hostname") or t.get("hostname") or t.get("host") or host
    return GpuId(
        hostname, index, t.get("UUID", ""), t.get("pci_bus_id", ""), t.get("modelName", "")
    )


def _xid_count(p: Point, series: dict[str, Value]) -> tuple[int, float, str] | None:
    """(code, count, window in ms) of a windowed Xid count point; None for any other."""
    value = next((series[k] for k in XID_SERIES[1:] if k in series), None)
    count = None if value is None else _number(value)
    code = p.tags.get("xid", "")
    if count is None or not code.isdigit():
        return None
    return int(code), count, p.tags.get("window_size_in_ms", "")


def _dcgm(p: Point, host: str) -> tuple[GpuId, dict[str, float], NodeInfo | None] | None:
    values = {}
    for name, v in _dcgm_fields(p).items():
        if (x := _number(v)) is not None:
            values[FIELD_BY_DCGM[name]] = x
    gpu = _dcgm_gpu(p, host)
    return None if gpu is None else (gpu, values, None)  # the driver label is not read here


def points_to_batches(
    points: Iterable[tuple[int, Point]], *, host: str, xids: XidHistory | None = None
) -> Read:
    """Screened batches, one per time, of the GPU points among (line, point)s (``host``: the
    hostname of points without a ``host`` tag); the rest counted in ``Read``. ``xids``: the
    source's last-Xid gauges so far (a new one when None), whose changes become events."""
    xids = xids if xids is not None else XidHistory()
    gauges: list[tuple[float, GpuId, int]] = []
    counts: list[XidCount] = []
    scraped: set[tuple[float, GpuId]] = set()
    by_time: dict[float, dict[tuple[str, int, str], tuple[GpuId, dict[str, float]]]] = {}
    nodes: dict[float, dict[str, NodeInfo]] = {}
    out = Read()
    for line, p in points:
        dcgm = _is_dcgm(p.measurement) or (
            p.measurement == "prometheus" and any(_is_dcgm(k) for k in p.fields)
        )
        if p.measurement != NVIDIA_SMI and not dcgm:
            out.other[p.measurement] = out.other.get(p.measurement, 0) + 1
            continue
        if dcgm:
            series = _dcgm_series(p)
            gpu = _dcgm_gpu(p, host)
            code = _number(series.get(DCGM_XID_METRIC, ""))
            if p.ts is not None and gpu is not None:
                scraped.add((p.ts, gpu))
                if code is not None:
                    gauges.append((p.ts, gpu, int(code)))
                count = _xid_count(p, series)
                if count is not None:
                    counts.append(XidCount(p.ts, gpu, *count))
            if not any(k in FIELD_BY_DCGM for k in series):  # no catalogue field in it
                if not any(k in XID_SERIES for k in series):
                    out.other[p.measurement] = out.other.get(p.measurement, 0) + 1
                continue
        read = _nvidia_smi(p, host) if not dcgm else _dcgm(p, host)
        if p.ts is None:
            out.unplaced.append((line, f"a {p.measurement} point without a time"))
            continue
        if read is None:
            index = "index" if not dcgm else "gpu"
            out.unplaced.append((line, f"a {p.measurement} point without a GPU {index} tag"))
            continue
        gpu, values, node = read
        if node is not None:
            nodes.setdefault(p.ts, {})[node.hostname] = node
        key = (gpu.hostname, gpu.index, gpu.uuid)
        slot = by_time.setdefault(p.ts, {})
        if key in slot:  # metric_version 1: one line per series of the same GPU and time
            known, merged = slot[key]
            merged.update({k: v for k, v in values.items() if k not in merged})
            gpu = known if len(known.model) >= len(gpu.model) else gpu
            slot[key] = (gpu, merged)
        else:
            slot[key] = (gpu, dict(values))
    events: dict[float, list[Event]] = {}
    for e in xids.events(gauges, counts, scraped):
        events.setdefault(e.ts, []).append(e)
    for ts in sorted(set(by_time) | set(events)):
        samples = tuple(Sample(ts, g, v) for g, v in by_time.get(ts, {}).values() if v)
        found = tuple(nodes.get(ts, {}).values())
        said = tuple(events.get(ts, ()))
        out.batches.append(screen(Batch(ts=ts, samples=samples, events=said, nodes=found)))
    return out


__all__ = [
    "NVIDIA_SMI",
    "TELEGRAF_FIELDS",
    "XID_SERIES",
    "Read",
    "XidCount",
    "XidHistory",
    "points_to_batches",
]
