"""Hourly rollups kept as series, so that a week of a fleet is read as 168 points per GPU and
field instead of every scrape, from one series per GPU.

``VictoriaMetricsStore.compact(now)`` has the server roll up every whole hour not rolled up yet
(the same PromQL a live read runs, ``_prom_reads.rollups``) and writes the result back:

    gpuwarden_rollups{<GPU labels>, resolution="3600", fields="gpu_temp_c,power_w,..."}
        field k of the hour at the hour + k ms
    gpuwarden_rollup_until{resolution="3600"}            the end of the hours rolled up, at it

A GPU's fields share three series, one per ``GROUPS`` and one for the rest (``fields`` names a
series' fields in the order of their millisecond offsets): the server's cost of a read is per
series more than per point (a block found and decoded each), and one series per GPU and field
made reading a week of rollups 2.4-2.8 times slower than SQLite's; one series for all 55 fields
made a read of the 26 that scoring needs carry twice the points, parsed here, and two (health,
the rest) made the weekly report's read of 4 fields decode all 55. Series written under an
earlier grouping stay readable: a read selects by ``fields``. Reads select the series
whose ``fields`` hold a field asked for, and take each sample's field from its offset.

The first layout kept one series per GPU and field, ``gpuwarden_rollup{<GPU labels>,
field="mem_temp_c_max", resolution="3600"}`` at the hour (``FIRST``), under the same
``gpuwarden_rollup_until``. Reads do not select it (a second selector in every read, for
series that exist once); ``compact`` rewrites such series in this layout and deletes them
(``first_layout``), so until it has run the hours they hold read as not rolled up: missing.

An hourly read (any ``PrometheusStore``: also ``prometheus+http://`` pointed at such a
VictoriaMetrics) then takes the rolled-up hours from these series and rolls up only the hours
after them on the server, as SQLite stitches its rollups to the raw tail. A plain Prometheus
has no such series and rolls up every hour when it is read.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from gpuwarden.store._promapi import Flat, PromApi
from gpuwarden.store._promql import matcher, quote, regex_alternatives, selector
from gpuwarden.store._schema import ROLLUP_FIELDS
from gpuwarden.store._series import Series, gpu_labels, gpu_of
from gpuwarden.telemetry import GpuId

ROLLUP = "gpuwarden_rollups"
#: The first layout's series: one per GPU and field, the field in label ``field``.
FIRST = "gpuwarden_rollup"
FIRST_FIELD_LABEL = "field"
UNTIL = "gpuwarden_rollup_until"
#: The scrape interval (s) of the raw samples rolled up, written beside ``UNTIL``: whether
#: listing the GPUs from the rollups costs the server less than scanning the raw samples.
INTERVAL = "gpuwarden_rollup_interval"
#: The resolution kept as series (5-minute windows are short: they are rolled up when read).
RESOLUTION = 3600
#: The label naming the fields of a rollup series, in the order of their offsets.
FIELDS_LABEL = "fields"
#: The reliability signals scoring reads besides ``USAGE`` (``models._hourly.ROLLUP_FIELDS``:
#: errors, remaps, retired pages, thermal violations, heat, the PCIe link, clock-event
#: reasons), and nothing else: a scoring read decodes every field of the series it selects,
#: and the 8 health fields it does not read (power violations, the link generation, peaks of
#: core heat and power, pending remaps, DCGM's health) cost it 22% more points in the earlier
#: grouping.
HEALTH: tuple[str, ...] = (
    "ecc_sbe_volatile_total", "ecc_sbe_aggregate_total", "ecc_dbe_volatile_total",
    "ecc_dbe_aggregate_total", "remapped_rows_correctable", "remapped_rows_uncorrectable",
    "retired_pages_sbe", "retired_pages_dbe", "pcie_replay_total", "nvlink_crc_flit_errors_total",
    "nvlink_crc_data_errors_total", "nvlink_replay_errors_total", "nvlink_recovery_errors_total",
    "thermal_violation_us", "gpu_temp_c", "mem_temp_c", "pcie_link_width", "pcie_link_width_max",
    "pcie_link_gen_max", "mem_temp_c_max", "remapped_rows_pending_max",
    "remapped_rows_failure_max", "retired_pages_pending_max", "clock_event_reasons",
)  # fmt: skip
#: Use and draw: what the weekly report reads (``reports._usage.USAGE_FIELDS``), and scoring
#: too. A series of their own lets the report decode 4 fields of an hour instead of all 55.
USAGE: tuple[str, ...] = ("gpu_util_pct", "power_w", "fb_used_mib", "fb_total_mib")
#: The series a GPU's rollups are kept in, each holding these fields; every other field
#: (clocks, traffic, ...) goes in one more.
GROUPS: tuple[tuple[str, ...], ...] = (HEALTH, USAGE)


def groups(fields: Sequence[str]) -> list[list[str]]:
    """``fields`` split into the series they are kept in: ``GROUPS``' in order, then the
    others."""
    kept = [set(g) for g in GROUPS]
    parts = [[f for f in fields if f in g] for g in kept]
    parts.append([f for f in fields if not any(f in g for g in kept)])
    return [p for p in parts if p]


def holding(fields: Sequence[str]) -> str:
    """A PromQL matcher for the rollup series holding any of ``fields``."""
    alternatives = regex_alternatives(sorted(set(fields)))
    return f"{FIELDS_LABEL}=~{quote(f'(.*,)?({alternatives})(,.*)?')}"


def until(api: PromApi, at: float, lookback_s: float) -> tuple[float | None, float | None]:
    """The end of the hours rolled up, as of ``at``, and the scrape interval of the samples
    rolled up last; None when nothing was (or, for the interval, before it was kept)."""

    def newest(name: str) -> float | None:
        sel = selector([name], [matcher("resolution", [str(RESOLUTION)])])
        got = api.query(f"max(last_over_time({sel}[{api.dialect.range(lookback_s)}]))", at)
        return float(got[0].values[-1]) if got and len(got[0].values) else None

    end, interval = api.map(newest, [UNTIL, INTERVAL])
    return end, interval


def series(frame: pd.DataFrame, inventory: pd.DataFrame, fields: list[str]) -> list[Series]:
    """A rolled-up window (``_prom_reads.rollups``: ts the hour, identity, ``fields``) as one
    series per GPU, field k at the hour + k ms; ``inventory`` (uuid index) gives the labels."""
    out: list[Series] = []
    if frame.empty:
        return out
    if len(fields) >= RESOLUTION * 1000:
        raise ValueError(f"{len(fields)} fields do not fit one series' offsets")
    ts_ms = np.rint(frame["ts"].to_numpy(np.float64) * 1000).astype(np.int64)
    codes, uuids = pd.factorize(frame["uuid"])
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    ts_sorted = ts_ms[order]
    packs = [(g, frame[g].to_numpy(np.float64)[order]) for g in groups(fields)]
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(order)], strict=True):
        uuid = str(uuids[codes[order[lo]]])
        row = inventory.loc[uuid]
        gpu = GpuId(
            row["hostname"], int(row["gpu"]), uuid, row["pci_bus_id"], row["model"], row["rack"]
        )
        labels = {"__name__": ROLLUP, **gpu_labels(gpu), "resolution": str(RESOLUTION)}
        for names, grid in packs:
            v = grid[lo:hi]
            keep = np.isfinite(v)
            if keep.any():
                offsets = np.arange(len(names), dtype=np.int64)
                t = (ts_sorted[lo:hi, None] + offsets[None, :])[keep]
                by_t = np.argsort(t, kind="stable")
                named = {**labels, FIELDS_LABEL: ",".join(names)}
                out.append(Series(named, t[by_t], v[keep][by_t]))
    return out


def first_layout(flat: Flat) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Series of the first layout (``FIRST``) as a rolled-up window (ts the hour, uuid, one
    column per field found; a (GPU, hour) some field lacks has NaN there) and the identity of
    its GPUs (uuid index, as ``series`` takes it), from their labels."""
    ids: dict[str, GpuId] = {}
    uuid_of, field_of = [], []
    for labels in flat.labels:
        gpu = gpu_of(labels)  # a MIG instance's key, as the inventory the series came from
        field = labels.get(FIRST_FIELD_LABEL, "")
        ok = gpu is not None and field in ROLLUP_FIELDS
        uuid_of.append(gpu.uuid if ok and gpu is not None else "")
        field_of.append(field if ok else "")
        if ok and gpu is not None:
            ids[gpu.uuid] = gpu
    series_of = np.repeat(np.arange(len(flat.labels)), flat.counts)
    long = pd.DataFrame({
        "uuid": np.asarray(uuid_of, dtype=object)[series_of],
        "field": np.asarray(field_of, dtype=object)[series_of],
        "ts": unpack_ms(flat.ts)[0],  # at the hour (ms offsets, were there any, dropped)
        "value": np.asarray(flat.values, dtype=np.float64),
    })  # fmt: skip
    long = long[long["field"] != ""]
    wide = long.pivot_table(index=["uuid", "ts"], columns="field", values="value", aggfunc="last")
    frame = wide.reset_index()
    frame.columns.name = None
    inventory = pd.DataFrame(
        [(g.uuid, g.hostname, g.index, g.pci_bus_id, g.model, g.rack) for g in ids.values()],
        columns=["uuid", "hostname", "gpu", "pci_bus_id", "model", "rack"],
    ).set_index("uuid", drop=False)
    return frame, inventory


def unpack_ms(ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The hour (s) of each sample of a ``ROLLUP`` series and its offset into it (ms): the
    index of its field in the series' ``fields``."""
    hour_ms, k = split_ms(np.rint(np.asarray(ts, dtype=np.float64) * 1000).astype(np.int64))
    return hour_ms / 1000.0, k


def split_ms(ms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``unpack_ms`` of times in int64 milliseconds: the hour (ms) and the offset (ms)."""
    k = ms % (RESOLUTION * 1000)
    return ms - k, k


def markers(end: float, interval_s: float | None) -> list[Series]:
    """``gpuwarden_rollup_until`` saying the hours before ``end`` are rolled up, and
    ``gpuwarden_rollup_interval`` the scrape interval of their raw samples, when known."""
    at = np.array([int(round(end * 1000))])
    kept = [(UNTIL, float(end))] + ([] if interval_s is None else [(INTERVAL, float(interval_s))])
    return [Series({"__name__": n, "resolution": str(RESOLUTION)}, at, np.array([v]))
            for n, v in kept]  # fmt: skip


__all__ = [
    "FIELDS_LABEL",
    "FIRST",
    "INTERVAL",
    "first_layout",
    "RESOLUTION",
    "ROLLUP",
    "UNTIL",
    "markers",
    "series",
    "split_ms",
    "unpack_ms",
    "until",
]
