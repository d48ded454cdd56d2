"""A readable fleet summary from a store: what `gpuwarden summary` and the demo print."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuwarden.collectors.memory_errors import by_ecc_type
from gpuwarden.counters import total_increase
from gpuwarden.health import GpuState, describe
from gpuwarden.signals import COUNTERS_FILE, SIGNAL_FIELDS, SIGNALS, Signal, missing_signals
from gpuwarden.store.base import Store
from gpuwarden.store.inventory import never_reported
from gpuwarden.wording import counted

_WATCH_FIELDS = (
    "ecc_sbe_volatile_total",
    "ecc_dbe_volatile_total",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "pcie_replay_total",
    "nvlink_crc_flit_errors_total",
)


@dataclass(frozen=True)
class FleetSummary:
    start_ts: float
    end_ts: float
    gpus: pd.DataFrame  # the store's inventory
    reporting: int  # GPUs with a sample in the last window
    missing: pd.DataFrame  # slots whose last sample is older than the window
    xids: pd.DataFrame  # code, name, class, count
    failures: pd.DataFrame  # kind, count
    watch: pd.DataFrame  # per-GPU signals over the window, worst first
    #: each GPU's newest stored verdict in the last day (``health.VERDICT_COLUMNS``)
    verdicts: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: readings rejected as impossible in the window, per GPU, field and reason
    #: (``Store.read_rejections``: hostname, gpu, uuid, field, reason, count, ...), most first
    rejections: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: the model's signals (``gpuwarden.signals``) some GPUs had nothing of in the last day:
    #: (signal, GPUs lacking it), most first; ``reported``: GPUs read in that day
    gaps: list[tuple[Signal, int]] = field(default_factory=list)
    reported: int = 0
    #: Xids of a kernel log whose PCI address no stored GPU had (``xid_unmatched`` events):
    #: code, name, cls, count, as ``xids``
    unmatched: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: memory-error events in the window (``ingest --memory-errors``): ECC type -> (errors,
    #: devices)
    memory_errors: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: slots known only from events (a memory-error log, a kernel log's Xids): no telemetry
    #: stored for them ever, so "missing" would say they stopped reporting
    events_only: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: the first sample in the window: its start, or later where the store begins later
    telemetry_from: float | None = None

    def render(self, top: int = 10) -> str:
        lines: list[str] = []
        span_h = (self.end_ts - self.start_ts) / 3600 if self.end_ts > self.start_ts else 0.0
        start = pd.Timestamp(self.start_ts, unit="s", tz="UTC").strftime("%Y-%m-%d %H:%M")
        end = pd.Timestamp(self.end_ts, unit="s", tz="UTC").strftime("%Y-%m-%d %H:%M")
        nodes = self.gpus["hostname"].nunique() if len(self.gpus) else 0
        slots = self.gpus.drop_duplicates(["hostname", "gpu"]) if len(self.gpus) else self.gpus
        lines.append(
            f"Fleet: {counted(nodes, 'node')}, {counted(len(slots), 'GPU slot')}, "
            f"{counted(len(self.gpus), 'GPU board')} seen"
        )
        if len(slots):
            by_model = slots.groupby("model").size().sort_values(ascending=False)
            lines.append("  " + ", ".join(f"{n} x {m or 'unknown'}" for m, n in by_model.items()))
        first = self.start_ts if self.telemetry_from is None else self.telemetry_from
        held_s = max(0.0, self.end_ts - first)
        if len(self.gpus) > len(self.events_only) and held_s == 0:
            lines.append(f"Telemetry: {end} UTC only (one reading in time)")
        elif len(self.gpus) > len(self.events_only):
            since = pd.Timestamp(first, unit="s", tz="UTC").strftime("%Y-%m-%d %H:%M")
            lines.append(f"Telemetry: {since} .. {end} UTC ({_span(held_s)})")
        else:
            lines.append(f"Telemetry: none stored; events {start} .. {end} UTC ({span_h:.0f} h)")
        lines.append(
            f"Reporting now: {counted(self.reporting, 'GPU')}; missing: {len(self.missing)}"
        )
        for row in self.missing.head(top).itertuples():
            lines.append(f"  {row.hostname} gpu{row.gpu}  last seen {row.last_seen}")
        if len(self.events_only):
            lines.append(
                f"Known from events alone (no telemetry stored): "
                f"{counted(len(self.events_only), 'device')}"
            )
        lines.append("")
        lines += self._verdict_lines(top)
        lines.append("")
        # failures: every one the store holds (a failure is rare, and its history matters)
        lines.append(
            "Failures recorded, all stored:" if len(self.failures) else "Failures recorded: none"
        )
        for row in self.failures.itertuples():
            lines.append(f"  {row.count:5d}  {row.kind}")
        lines.append("")
        if len(self.xids):
            lines.append(f"Xid events, last {span_h:.0f} h:")
        elif not len(self.unmatched):
            lines.append(f"Xid events, last {span_h:.0f} h: none")
        for row in self.xids.itertuples():
            lines.append(f"  {row.count:5d}  Xid {row.code:<4d} {row.name} ({row.cls})")
        if len(self.unmatched):
            lines.append(
                "Xid events of no known GPU (kernel-log PCI addresses no stored GPU has; "
                "load telemetry with pci_bus_id, then the log again):"
            )
            for row in self.unmatched.itertuples():
                lines.append(f"  {row.count:5d}  Xid {row.code:<4d} {row.name} ({row.cls})")
        if self.memory_errors:
            lines.append(f"Memory errors, last {span_h:.0f} h:")
            for ecc, (n, devices) in self.memory_errors.items():
                lines.append(f"  {n:5d}  {ecc:<4} on {counted(devices, 'device')}")
        lines.append("")
        lines += self._rejection_lines(span_h, top)
        lines.append("")
        lines += self._gap_lines()
        lines.append("")
        if len(self.watch):
            lines.append(f"GPUs to watch (increase over the last {span_h:.0f} h, worst first):")
            table = self.watch.head(top).copy()
            lines.append(table.to_string(index=False, na_rep="-", float_format=_fmt))
        return "\n".join(lines)

    def _verdict_lines(self, top: int) -> list[str]:
        """gpuwarden's stored verdicts: counts per state, then the flagged GPUs, worst first."""
        v = self.verdicts
        if v.empty:
            return ["Verdicts: none stored in the last day (run gpuwarden serve, or backfill "
                    "with gpuwarden score --into)"]  # fmt: skip
        counts = v["state"].map(str).value_counts()
        said = ", ".join(f"{counts.get(s, 0)} {s}" for s in reversed(GpuState))
        out = [f"Verdicts (newest per GPU, last day): {said}"]
        rank = {GpuState.UNHEALTHY: 0, GpuState.AT_RISK: 1}
        flagged = v[v["state"] != GpuState.OK]
        # from its own columns: a Series of all of ``v`` given to an empty frame is its index
        flagged = flagged.assign(_r=flagged["state"].map(rank), _k=-flagged["risk"])
        for r in flagged.sort_values(["_r", "_k"]).head(top).itertuples():
            risk = "-" if math.isnan(r.risk) else f"{r.risk:.2f}"
            why = "; ".join(r.reasons)[:90]
            out.append(f"  {r.hostname} gpu{r.gpu}  {r.state:<9} risk {risk:<4}  {r.cause}: {why}")
        return out

    def _gap_lines(self) -> list[str]:
        """The signals the model reads that the store lacks: unknown, so left out of risk."""
        if self.gpus.empty:
            return ["Signals the model reads: none, no telemetry stored"]
        if not self.reported:
            return ["Signals the model reads: none in the last day, no GPU reported in it"]
        if not self.gaps:
            return ["Signals the model reads: all in the store"]
        out = ["Signals the model reads that the store lacks (left out of the risk, not zero):"]
        for signal, n in self.gaps:
            out.append(
                f"  {n:5d} of {counted(self.reported, 'GPU')}  {signal.name} ({' or '.join(signal.metrics)})"
            )
        out.append(f"  dcgm-exporter exports them with {COUNTERS_FILE} (docs/store.md)")
        smi = [q for signal, _ in self.gaps for q in signal.smi_fields]
        if smi:
            out.append(f"  nvidia-smi logs them with --query-gpu={','.join(smi)}")
        only = [signal for signal, _ in self.gaps if not signal.smi_fields]
        if only:
            q = any("pcie_replay_total" in signal.fields for signal in only)
            out.append(
                f"  not in nvidia-smi's --query-gpu: {', '.join(s.name for s in only)} (NVML or "
                "DCGM read them: gpuwarden collect nvml://"
                + (
                    "; nvidia-smi -q logs show PCIe replays: gpuwarden ingest --smi-q)"
                    if q
                    else ")"
                )
            )
        return out

    def _rejection_lines(self, span_h: float, top: int) -> list[str]:
        """Readings left out as impossible, per GPU and field, most first."""
        r = self.rejections
        if r.empty:
            return ["Rejected readings: none"]
        by_reason = r.groupby("reason")["count"].sum()
        said = ", ".join(f"{n} {why}" for why, n in by_reason.sort_values(ascending=False).items())
        out = [f"Rejected readings (stored as missing), last {span_h:.0f} h: {said}"]
        for row in r.head(top).itertuples():
            out.append(
                f"  {row.count:6d}  {row.hostname} gpu{row.gpu}  {row.field:<24} {row.reason}"
            )
        if len(r) > top:
            out.append(f"  ... and {len(r) - top} more GPU/field pairs")
        return out


def _fmt(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0f}"


def _span(seconds: float) -> str:
    """A span: "168 h", or "3 min" under an hour (where whole hours would read 0)."""
    return f"{seconds / 3600:.0f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def fleet_summary(
    store: Store, *, window_s: float = 7 * 86400, now: float | None = None
) -> FleetSummary:
    """Summarise the last ``window_s`` seconds of ``store`` (ending at its newest sample; in a
    store of events alone, a kernel log ingested, at its newest event)."""
    gpus = store.gpus()
    if now is None and len(gpus):
        now = float(gpus["last_ts"].max())
    elif now is None:
        events = store.read_events(start=0.0, end=time.time() + 86400)
        now = float(events["ts"].max()) if len(events) else time.time()
    start = now - window_s
    samples = store.read_samples(
        start=start, end=now + 1, fields=list(_WATCH_FIELDS) + ["mem_temp_c", "gpu_temp_c"]
    )
    # where the window holds less than a window of samples (one -q capture is a moment)
    first = float(samples["ts"].min()) if len(samples) else start
    events = store.read_events(start=start, end=now + 1)
    failures = store.read_failures()

    step = (
        float(np.median(np.diff(np.unique(samples["ts"])))) if samples["ts"].nunique() > 1 else 60.0
    )
    fresh = now - 3 * step
    latest = (
        gpus.sort_values("last_ts").drop_duplicates(["hostname", "gpu"], keep="last")
        if len(gpus)
        else gpus
    )
    # a slot an event named (a memory-error log, a kernel log) but no sample ever did has not
    # stopped reporting, nor is it reporting: ask the store only of those the window's samples
    # leave in doubt
    sampled = set(samples["uuid"].unique()) if len(samples) else set()
    doubt = (
        latest[(latest["last_ts"] < fresh) | ~latest["uuid"].isin(sampled)]
        if len(latest)
        else latest
    )
    events_only = doubt[never_reported(store, doubt)]
    silent = set(events_only["uuid"])
    reporting = (
        int(((gpus["last_ts"] >= fresh) & ~gpus["uuid"].isin(silent)).sum()) if len(gpus) else 0
    )
    missing = (
        latest[(latest["last_ts"] < fresh) & ~latest["uuid"].isin(silent)].copy()
        if len(latest)
        else latest
    )
    if len(missing):
        missing["last_seen"] = pd.to_datetime(missing["last_ts"], unit="s", utc=True).dt.strftime(
            "%Y-%m-%d %H:%M"
        )

    xid_table = _xid_table(events, "xid")
    memory = by_ecc_type(events)
    unmatched = _xid_table(_since_unmatched(events), "xid_unmatched")
    if len(failures):
        fail_table = (
            failures.groupby("kind")
            .size()
            .rename("count")
            .reset_index()
            .sort_values("count", ascending=False)
        )
    else:
        fail_table = pd.DataFrame(columns=["kind", "count"])

    # a slot's newest board only, as for the verdicts: a replaced board's errors are its history
    if len(samples) and len(latest):
        samples = samples[samples["uuid"].isin(latest["uuid"])]
    watch = _watch_table(samples)
    verdicts = store.read_verdicts(start=now - 86400, end=now + 1, latest=True)
    # a slot's newest board only: a replaced board's last verdict is history
    verdicts = verdicts.drop_duplicates(["hostname", "gpu"], keep="last")
    rejections = store.read_rejections(start=start, end=now + 1)
    gaps, reported = _gaps(store, gpus, now)
    return FleetSummary(
        start, now, gpus, reporting, missing, xid_table, fail_table, watch, verdicts, rejections,
        gaps, reported, unmatched, memory, events_only, max(start, first),
    )  # fmt: skip


def _since_unmatched(events: pd.DataFrame) -> pd.DataFrame:
    """``events`` less the ``xid_unmatched`` ones a later load of the same log matched (the
    hint says: load telemetry with pci_bus_id, then the log again): the same host, time and
    code stored as an ``xid`` of a GPU. The store keeps both; the unmatched one is history."""
    if events.empty:
        return events
    key = ["hostname", "ts", "code"]
    matched = events.loc[events["kind"] == "xid", key].drop_duplicates()
    twin = events[key].merge(matched, on=key, how="left", indicator=True)["_merge"].to_numpy()
    return events[~((events["kind"] == "xid_unmatched").to_numpy() & (twin == "both"))]


def _xid_table(events: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Events of ``kind`` counted per Xid code, with NVIDIA's name and class, most first."""
    xids = events[events["kind"] == kind] if len(events) else events
    if not len(xids):
        return pd.DataFrame(columns=["code", "name", "cls", "count"])
    counts = xids.groupby("code").size()
    return pd.DataFrame(
        [
            {"code": int(c), "name": describe(int(c)).name, "cls": describe(int(c)).cls,
             "count": int(n)}
            for c, n in counts.items()
        ]
    ).sort_values("count", ascending=False)  # fmt: skip


def _gaps(store: Store, gpus: pd.DataFrame, now: float) -> tuple[list[tuple[Signal, int]], int]:
    """Per signal, how many GPUs read in the last day had nothing of it (hourly rollups)."""
    if gpus.empty:
        return [], 0
    hours = store.read_window(
        start=now - 86400, end=now + 1, fields=list(SIGNAL_FIELDS), resolution_s=3600
    )
    if hours.empty:
        return [], 0
    read = hours[list(SIGNAL_FIELDS)].notna().groupby(hours["uuid"].to_numpy()).any()
    models = gpus.drop_duplicates("uuid").set_index("uuid")["model"]
    counts: dict[str, int] = {}
    for uuid, row in read.iterrows():
        for s in missing_signals(row.to_dict(), str(models.get(uuid, ""))):
            counts[s.name] = counts.get(s.name, 0) + 1
    order = sorted(counts.items(), key=lambda kv: -kv[1])
    by_name = {s.name: s for s in SIGNALS}
    return [(by_name[name], n) for name, n in order], len(read)


def _watch_table(samples: pd.DataFrame) -> pd.DataFrame:
    if samples.empty:
        return pd.DataFrame()
    rows = []
    for (host, gpu, uuid), g in samples.groupby(["hostname", "gpu", "uuid"], sort=False):
        spread = (g["mem_temp_c"] - g["gpu_temp_c"]).to_numpy(dtype=float)
        rows.append(
            {
                "hostname": host,
                "gpu": gpu,
                "uuid": str(uuid)[:12],
                "sbe": total_increase(g["ecc_sbe_volatile_total"]),
                "dbe": total_increase(g["ecc_dbe_volatile_total"]),
                "remap_c": total_increase(g["remapped_rows_correctable"]),
                "remap_u": total_increase(g["remapped_rows_uncorrectable"]),
                "pcie_replay": total_increase(g["pcie_replay_total"]),
                "nvlink_crc": total_increase(g["nvlink_crc_flit_errors_total"]),
                "mem_temp_max": float(np.nanmax(g["mem_temp_c"]))
                if g["mem_temp_c"].notna().any()
                else math.nan,
                "spread_max": float(np.nanmax(spread)) if np.isfinite(spread).any() else math.nan,
            }
        )
    table = pd.DataFrame(rows)
    score = (
        table[["dbe", "remap_u"]].fillna(0).sum(axis=1) * 1e6
        + table["remap_c"].fillna(0) * 1e3
        + table["sbe"].fillna(0)
        + table["pcie_replay"].fillna(0) / 10
        + table["nvlink_crc"].fillna(0) / 10
    )
    interesting = score > 0
    return (
        table[interesting]
        .assign(_s=score[interesting])
        .sort_values("_s", ascending=False)
        .drop(columns="_s")
    )
