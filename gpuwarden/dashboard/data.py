"""Everything the dashboard shows, read from a store: small functions that return frames.

The Streamlit app (``app.py``) only draws what these return, so each number on a page can be
tested without a browser. Nothing here imports Streamlit, a collector or NVML.

States (``fleet_states``) are gpuwarden's stored verdicts (``health.Verdict``: what ``serve``
decided, with hysteresis, holds and overrides, or what ``gpuwarden score --into`` backfilled),
with one thing the dashboard adds: a GPU that stopped reporting for ``stale_s`` (three sampling
intervals, at least a minute) shows as ``missing`` unless it is unhealthy. Nothing here loads a
model or scores anything. A store with no verdicts yet shows hard-signal states only (a
double-bit ECC error, a row-remap failure, a fatal Xid, the GPU lost or needing a reset, read
with ``health.HARD_SIGNALS``), and ``risk`` NaN: never 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden.counters import step_increases
from gpuwarden.dashboard import _signals
from gpuwarden.dashboard._reads import read_window, resolution_for
from gpuwarden.health import (
    MISSING,
    GpuState,
    at_risk_threshold,
    describe,
    event_action,
)
from gpuwarden.store.base import Store

OK, AT_RISK, UNHEALTHY = GpuState.OK.value, GpuState.AT_RISK.value, GpuState.UNHEALTHY.value
STATES: tuple[str, ...] = (OK, AT_RISK, UNHEALTHY, MISSING)
AT_RISK_BAND = "at risk"
#: The heatmap's risk bands, low to high. The last is the verdict's state, not a fixed line:
#: serve decides at the model's line (0.50 for the shipped one), or the operator's, and keeps
#: a GPU at-risk until its risk falls under the lower bound (the map once coloured GPUs at-risk
#: at 0.5-0.7 as short of a fixed 0.7 line).
RISK_BANDS: tuple[str, ...] = ("< 0.3", "0.3-0.5", ">= 0.5, not at risk", AT_RISK_BAND)
SPREAD_LIMIT_C = 15.0  # HBM more than 15 C above the core: a cooling or HBM problem
#: DCGM's PCIe replay limit per lane per minute by link generation; times the lanes.
PCIE_REPLAY_LIMIT_PER_LANE_MIN: dict[int, float] = {1: 0.12, 2: 0.24, 3: 0.48, 4: 0.96, 5: 1.92}
DAY_S = 86400.0
NODES_PER_GROUP = 8  # heatmap panel size for nodes with no rack

STATE_COLUMNS = [
    "rack", "hostname", "gpu", "uuid", "model", "state", "risk", "reasons", "action",
    "flagged_ts", "last_ts",
]  # fmt: skip


@dataclass(frozen=True)
class Snapshot:
    """When the dashboard looks at the store.

    ``as_of`` is ``now`` while samples arrive; when the newest sample is older than ``stale_s``
    (no collector running, or a demo store from yesterday) it is the newest sample's time, and
    ``live`` is False so the page can say so.
    """

    now: float
    as_of: float
    newest_ts: float
    step_s: float
    stale_s: float
    gpus: int

    @property
    def live(self) -> bool:
        return self.as_of == self.now


def snapshot(store: Store, now: float) -> Snapshot | None:
    """Where the store stands at wall-clock ``now``; None when it holds no GPU yet."""
    gpus = store.gpus()
    if gpus.empty:
        return None
    newest = float(gpus["last_ts"].max())
    latest = gpus.loc[gpus["last_ts"].idxmax(), "uuid"]
    recent = store.read_samples(start=newest - 6 * 3600, uuids=[latest], fields=["gpu_temp_c"])
    ts = np.unique(recent["ts"].to_numpy())
    step = float(np.median(np.diff(ts))) if ts.size > 2 else 60.0
    stale = max(3 * step, 60.0)
    as_of = now if now - newest <= stale else newest
    return Snapshot(now, as_of, newest, step, stale, len(slots(gpus)))


def slots(gpus: pd.DataFrame) -> pd.DataFrame:
    """The board each slot (hostname, gpu) holds now: the latest one seen there."""
    latest = gpus.sort_values("last_ts", kind="stable").drop_duplicates(
        ["hostname", "gpu"], keep="last"
    )
    return latest.sort_values(["hostname", "gpu"]).reset_index(drop=True)


def fleet_states(
    store: Store, at: float, *, stale_s: float, window_s: float = DAY_S
) -> pd.DataFrame:
    """One row per GPU slot at ``at`` (Unix s): ``STATE_COLUMNS``, worst first.

    States, risk, reasons and actions are the verdicts ``gpuwarden serve`` (or ``gpuwarden
    score --into``) stored in the ``window_s`` before ``at``: exactly what the scheduler hooks
    were told. A store with no verdicts there gets hard-signal states only (no risk), and the
    pages say how to store verdicts. ``flagged_ts`` is when the GPU entered its state (for
    missing GPUs, their last sample).
    """
    inv = slots(store.gpus())
    inv = inv[inv["first_ts"] <= at]
    if inv.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in STATE_COLUMNS})
    stored = stored_verdicts(store, at, window_s)
    if not stored.empty:
        return _from_verdicts(inv, stored, at, stale_s, store.read_failures())
    hard = _signals.hard_signals(store, at - window_s, at, list(inv["uuid"]), probe_s=stale_s)
    out = inv[["rack", "hostname", "gpu", "uuid", "model", "last_ts"]].copy()
    out = out.merge(hard, on="uuid", how="left")
    out["risk"] = np.nan
    out["state"] = OK
    _mark_missing(out, (out["last_ts"] < at - stale_s).to_numpy(), store.read_failures())
    bad = out["hard_reasons"].notna()
    out.loc[bad, "state"] = UNHEALTHY
    out.loc[bad, "reasons"] = out.loc[bad, "hard_reasons"]
    out.loc[bad, "action"] = out.loc[bad, "hard_action"]
    out.loc[bad, "flagged_ts"] = out.loc[bad, "hard_ts"]
    rank = out["state"].map({UNHEALTHY: 0, AT_RISK: 1, MISSING: 2, OK: 3})
    out = out.assign(_rank=rank, _risk=-out["risk"].fillna(-1.0))
    out = out.sort_values(["_rank", "_risk", "hostname", "gpu"], kind="stable")
    out["reasons"] = out["reasons"].fillna("")
    out["action"] = out["action"].fillna("")
    out["flagged_ts"] = out["flagged_ts"].astype(float)
    return out[STATE_COLUMNS].reset_index(drop=True)


def _mark_missing(out: pd.DataFrame, missing: np.ndarray, failures: pd.DataFrame) -> None:
    """Mark the ``missing`` rows of ``out`` (state rows) as missing since their last sample. A
    board with a recorded failure (a failures file, a simulation's ground truth) is not a node
    to check but a board to replace: its failure leads the reasons, and the advice follows."""
    out.loc[missing, "state"] = MISSING
    out.loc[missing, "reasons"] = "no sample since " + _fmt_times(out.loc[missing, "last_ts"])
    out.loc[missing, "action"] = _signals.MISSING_ACTION
    out.loc[missing, "flagged_ts"] = out.loc[missing, "last_ts"]
    if failures.empty or not missing.any():
        return
    last = failures.sort_values("ts").drop_duplicates("uuid", keep="last").set_index("uuid")
    failed = missing & out["uuid"].isin(last.index).to_numpy()
    if failed.any():
        f = last.reindex(out.loc[failed, "uuid"])
        said = (
            "failed "
            + _fmt_times(f["ts"]).to_numpy()
            + " ("
            + f["kind"].astype(str).to_numpy()
            + ")"
        )
        out.loc[failed, "reasons"] = said + "; " + out.loc[failed, "reasons"].to_numpy()
        out.loc[failed, "action"] = _signals.FAILED_ACTION


def stored_verdicts(store: Store, at: float, window_s: float = DAY_S) -> pd.DataFrame:
    """Each GPU's newest verdict stored in the ``window_s`` before ``at`` (what ``serve`` or
    ``gpuwarden score --into`` decided); empty when the store holds none there."""
    return store.read_verdicts(start=at - window_s, end=at + 1e-3, latest=True)


def backfill_command(url: str, at: float, days: float = 7.0) -> str:
    """The command that stores a week of hourly verdicts for a store that has none."""
    end = int(at // 3600 * 3600)
    start = end - int(days * 86400)
    return f"gpuwarden score --store {url} --start {start} --end {end} --step 1h --into {url}"


def risk_series(store: Store, uuid: str, start: float, end: float) -> pd.DataFrame:
    """One GPU's stored risk over ``[start, end]`` (ts, risk, threshold): the verdicts' scores,
    oldest first; unknown risks (NaN) left out."""
    v = store.read_verdicts(start=start, end=end + 1e-3, uuids=[uuid])
    v = v.loc[v["risk"].notna(), ["ts", "risk", "threshold"]]
    return v.astype(float).sort_values("ts", kind="stable").reset_index(drop=True)


def _from_verdicts(
    inv: pd.DataFrame, stored: pd.DataFrame, at: float, stale_s: float, failures: pd.DataFrame
) -> pd.DataFrame:
    """States from stored verdicts: exactly what serve decided (hysteresis, holds, overrides
    included), except that a GPU which stopped reporting shows as missing unless unhealthy."""
    out = inv[["rack", "hostname", "gpu", "uuid", "model", "last_ts"]].copy()
    v = stored.drop_duplicates("uuid", keep="last").set_index("uuid").reindex(out["uuid"])
    known = v["state"].notna().to_numpy()
    out["state"] = np.where(known, v["state"].astype(object).fillna(OK).map(str), OK)
    out["risk"] = v["risk"].to_numpy(dtype=float)
    out["reasons"] = ["; ".join(r) if isinstance(r, tuple) else "" for r in v["reasons"]]
    out["action"] = v["action"].fillna("").to_numpy(dtype=object)
    out["flagged_ts"] = np.where(out["state"] != OK, v["since"].to_numpy(dtype=float), np.nan)
    missing = ((out["last_ts"] < at - stale_s) & (out["state"] != UNHEALTHY)).to_numpy()
    _mark_missing(out, missing, failures)
    rank = out["state"].map({UNHEALTHY: 0, AT_RISK: 1, MISSING: 2, OK: 3})
    out = out.assign(_rank=rank, _risk=-out["risk"].fillna(-1.0))
    out = out.sort_values(["_rank", "_risk", "hostname", "gpu"], kind="stable")
    out["flagged_ts"] = out["flagged_ts"].astype(float)
    return out[STATE_COLUMNS].reset_index(drop=True)


def state_counts(states: pd.DataFrame) -> dict[str, int]:
    """GPUs per state, every state present (0 where none)."""
    counts = states["state"].value_counts()
    return {s: int(counts.get(s, 0)) for s in STATES}


def flagged(states: pd.DataFrame) -> pd.DataFrame:
    """The at-risk and unhealthy GPUs (the table a person acts on), worst first."""
    return states[states["state"].isin([UNHEALTHY, AT_RISK])].reset_index(drop=True)


def fleet_now(store: Store, at: float, *, stale_s: float) -> dict[str, float]:
    """Fleet utilisation (mean %, DCGM_FI_DEV_GPU_UTIL) and power (sum W,
    DCGM_FI_DEV_POWER_USAGE) from each GPU's last sample within ``stale_s`` before ``at``;
    NaN when nothing reported."""
    recent = read_window(store, at - stale_s, at + 1e-3, ["gpu_util_pct", "power_w"])
    last = recent.groupby("uuid")[["gpu_util_pct", "power_w"]].last()
    return {
        "util_pct": float(last["gpu_util_pct"].mean()) if len(last) else np.nan,
        "power_w": float(last["power_w"].sum(min_count=1)) if len(last) else np.nan,
        "reporting": float(len(last)),
    }


def fleet_series(
    store: Store, start: float, end: float, *, gpus: int, step_s: float = 60.0
) -> pd.DataFrame:
    """Fleet mean utilisation (%), total power (kW) and GPUs reporting over ``[start, end)``,
    one row per bucket (raw samples, 5-minute or hourly rollups depending on the span). With
    hourly rollups the hour not rolled up yet is read every 30 minutes, not sample by sample."""
    res = resolution_for(end - start, gpus=gpus, step_s=step_s)
    frame = read_window(
        store, start, end, ["gpu_util_pct", "power_w"], resolution_s=res,
        tail_every_s=1800.0 if res == 3600 else None, tail_width_s=1.5 * step_s,
    )  # fmt: skip
    if frame.empty:
        return pd.DataFrame(columns=["ts", "util_pct", "power_kw", "reporting"])
    if res is None:  # raw: a collector's batch shares one ts; align stragglers to the minute
        frame = frame.assign(ts=np.floor(frame["ts"] / 60) * 60)
        frame = frame.groupby(["uuid", "ts"], as_index=False)[["gpu_util_pct", "power_w"]].mean()
    grouped = frame.groupby("ts")
    out = pd.DataFrame(
        {
            "util_pct": grouped["gpu_util_pct"].mean(),
            "power_kw": grouped["power_w"].sum(min_count=1) / 1000.0,
            "reporting": grouped["uuid"].nunique(),
        }
    ).reset_index()
    return out


def gpu_failures(store: Store, uuid: str) -> pd.DataFrame:
    """The failures recorded for one GPU board (a failures file, or a simulation's ground
    truth), newest first: ts, kind."""
    failed = store.read_failures()
    if failed.empty:
        return pd.DataFrame(columns=["ts", "kind"])
    mine = failed[failed["uuid"] == uuid]
    return mine[["ts", "kind"]].sort_values("ts", ascending=False, ignore_index=True)


def recent_events(
    store: Store, start: float, end: float, *, uuid: str | None = None
) -> pd.DataFrame:
    """Events in ``[start, end)`` (of one GPU when ``uuid`` is given), newest first, with each
    Xid's name, class (hardware / application / driver), whether it is fatal, and the Xid
    catalogue's action. The kernel log's ``NVRM: Xid`` lines are what collectors turn into these."""
    ev = store.read_events(start=start, end=end, uuids=None if uuid is None else [uuid])
    cols = ["ts", "hostname", "gpu", "uuid", "kind", "code", "name", "cls", "fatal", "action"]
    if ev.empty:
        return pd.DataFrame(columns=cols)
    entries = [
        describe(int(c)) if k == "xid" and pd.notna(c) else None
        for k, c in zip(ev["kind"], ev["code"], strict=True)
    ]
    ev["name"] = [
        e.name if e else _signals.EVENT_NAMES.get(k, k)
        for e, k in zip(entries, ev["kind"], strict=True)
    ]
    ev["cls"] = [e.cls if e else "hardware" for e in entries]
    ev["fatal"] = [
        e.fatal if e else k in _signals.FATAL_EVENTS
        for e, k in zip(entries, ev["kind"], strict=True)
    ]
    ev["action"] = [
        e.action if e else event_action(k) for e, k in zip(entries, ev["kind"], strict=True)
    ]
    return ev.sort_values("ts", ascending=False, kind="stable")[cols].reset_index(drop=True)


def heatmap_frame(states: pd.DataFrame) -> pd.DataFrame:
    """Cells of the node x GPU-slot heatmap: rack, hostname, gpu, uuid, state, risk, reasons,
    ``node_order`` (position of the node within its rack), ``rack_order`` and ``band``."""
    cells = states[["rack", "hostname", "gpu", "uuid", "model", "state", "risk", "reasons"]].copy()
    # nodes without placement go in groups of 8, so 1,000 of them still fit a screen
    unplaced = cells["rack"].fillna("") == ""
    hosts = sorted(cells.loc[unplaced, "hostname"].unique())
    group = {h: f"no rack {i // NODES_PER_GROUP + 1}" for i, h in enumerate(hosts)}
    cells.loc[unplaced, "rack"] = cells.loc[unplaced, "hostname"].map(group)
    nodes = cells[["rack", "hostname"]].drop_duplicates().sort_values(["rack", "hostname"])
    nodes["node_order"] = nodes.groupby("rack").cumcount()
    racks = {r: i for i, r in enumerate(sorted(cells["rack"].unique()))}
    cells = cells.merge(nodes, on=["rack", "hostname"], how="left")
    cells["rack_order"] = cells["rack"].map(racks)
    cells["band"] = [risk_band(s, r) for s, r in zip(cells["state"], cells["risk"], strict=True)]
    return cells.sort_values(["rack_order", "node_order", "gpu"]).reset_index(drop=True)


def risk_band(state: str, risk: float) -> str:
    """The heatmap's colour class: the risk band, or the state when the risk does not say it
    (unhealthy, missing, not scored: risk unknown is not low risk)."""
    if state in (UNHEALTHY, MISSING):
        return state
    if state == AT_RISK:  # serve's decision, at whatever line it decided
        return AT_RISK_BAND
    if risk != risk:  # NaN
        return "not scored"
    return RISK_BANDS[0] if risk < 0.3 else RISK_BANDS[1] if risk < 0.5 else RISK_BANDS[2]


def model_line() -> float:
    """The line ``gpuwarden serve`` decides at by default: the ``at_risk_threshold`` setting,
    else the card of the model in ``$GPUWARDEN_MODEL`` (or the shipped one), else 0.7. Read
    from the card, so the dashboard loads no model."""
    import json
    import os

    from gpuwarden.models.artifact import CARD_FILE, model_file

    try:
        path = model_file(os.environ.get("GPUWARDEN_MODEL") or None).with_name(CARD_FILE)
        card = json.loads(path.read_text())
    except (OSError, ValueError):
        card = None
    return at_risk_threshold(card if isinstance(card, dict) else None)


def gpu_series(
    store: Store, uuid: str, start: float, end: float, *, step_s: float = 60.0
) -> pd.DataFrame:
    """One GPU's health signals over ``[start, end)``, one row per sample or bucket:

    ts; sbe_errors (new single-bit ECC errors since the previous row, reset-aware,
    DCGM_FI_DEV_ECC_SBE_VOL_TOTAL) and sbe_per_h;
    remapped_rows_correctable / _uncorrectable (DCGM_FI_DEV_*_REMAPPED_ROWS); gpu_temp_c,
    mem_temp_c and spread_c (memory minus core, C); pcie_replay_per_min and
    pcie_limit_per_min (DCGM's per-lane limit times the current lanes); gpu_util_pct, power_w.
    """
    res = resolution_for(end - start, gpus=1, step_s=step_s, budget_rows=3000)
    fields = [
        "ecc_sbe_volatile_total", "remapped_rows_correctable", "remapped_rows_uncorrectable",
        "gpu_temp_c", "mem_temp_c", "pcie_replay_total", "pcie_link_gen", "pcie_link_width",
        "gpu_util_pct", "power_w",
    ]  # fmt: skip
    # one bucket before start gives the first reading in the range its increase
    pad = max(2.0 * (res or step_s), 600.0)
    frame = read_window(store, start - pad, end, fields, uuids=[uuid], resolution_s=res)
    frame = frame[frame["uuid"] == uuid]
    if frame.empty:
        return pd.DataFrame(columns=["ts", *GPU_SERIES_COLUMNS])
    ts = frame["ts"].to_numpy()
    dt_h = np.r_[np.nan, np.diff(ts)] / 3600.0
    out = pd.DataFrame({"ts": ts})
    out["sbe_errors"] = step_increases(frame["ecc_sbe_volatile_total"])
    out["sbe_per_h"] = out["sbe_errors"] / dt_h
    out["remapped_rows_correctable"] = frame["remapped_rows_correctable"].to_numpy()
    out["remapped_rows_uncorrectable"] = frame["remapped_rows_uncorrectable"].to_numpy()
    out["gpu_temp_c"] = frame["gpu_temp_c"].to_numpy()
    out["mem_temp_c"] = frame["mem_temp_c"].to_numpy()
    out["spread_c"] = out["mem_temp_c"] - out["gpu_temp_c"]
    out["pcie_replay_per_min"] = step_increases(frame["pcie_replay_total"]) / (dt_h * 60.0)
    gen = frame["pcie_link_gen"].round().to_numpy()
    per_lane = np.array(
        [
            PCIE_REPLAY_LIMIT_PER_LANE_MIN.get(int(g), np.nan) if np.isfinite(g) else np.nan
            for g in gen
        ]
    )
    out["pcie_limit_per_min"] = per_lane * frame["pcie_link_width"].to_numpy()
    out["gpu_util_pct"] = frame["gpu_util_pct"].to_numpy()
    out["power_w"] = frame["power_w"].to_numpy()
    return out[out["ts"] >= start].reset_index(drop=True)


GPU_SERIES_COLUMNS = [
    "sbe_errors", "sbe_per_h", "remapped_rows_correctable", "remapped_rows_uncorrectable", "gpu_temp_c",
    "mem_temp_c", "spread_c", "pcie_replay_per_min", "pcie_limit_per_min", "gpu_util_pct",
    "power_w",
]  # fmt: skip


def _fmt_times(ts: pd.Series) -> pd.Series:
    return pd.to_datetime(ts, unit="s", utc=True).dt.strftime("%Y-%m-%d %H:%M UTC")
