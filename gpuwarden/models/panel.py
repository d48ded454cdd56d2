"""A fleet's history as (hours x GPUs) arrays: what every feature is computed from.

    panel = load_panel(store, start=at - 8 * 86400, end=at)   # rollups + raw for the last hour
    panel = panel_from_frames(frames, events, failures)        # simulator chunks, no store

One column per *GPU life*: a board's UUID, split again after each recorded failure of that UUID
(a board that comes back after a repair starts a new history, as a replacement board with a new
UUID does). Counters become reset-aware hourly increases (a volatile counter that restarts after
a driver reload never gives a negative increase); gauges stay hourly means or peaks; Xid and
GPU-lost events become hourly counts. NaN means "not read", never zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden.counters import column_increases
from gpuwarden.health import DEFAULT_XID_TABLE, FATAL_XIDS
from gpuwarden.models import _hourly as H
from gpuwarden.signals import SIGNAL_FIELDS
from gpuwarden.telemetry import Event, Failure

HOUR_S = H.HOUR_S

#: hourly increase -> (counters it comes from, how two sources combine). Aggregate (InfoROM) and
#: volatile ECC counts describe the same errors: take the larger, so a volatile reset or an
#: unsupported aggregate counter loses nothing.
INCREASES: dict[str, tuple[tuple[str, ...], str]] = {
    "sbe": (("ecc_sbe_volatile_total", "ecc_sbe_aggregate_total"), "max"),
    "dbe": (("ecc_dbe_volatile_total", "ecc_dbe_aggregate_total"), "max"),
    "remap_c": (("remapped_rows_correctable",), "sum"),
    "remap_u": (("remapped_rows_uncorrectable",), "sum"),
    "retired": (("retired_pages_sbe", "retired_pages_dbe"), "sum"),
    "replay": (("pcie_replay_total",), "sum"),
    "nvl_crc": (("nvlink_crc_flit_errors_total", "nvlink_crc_data_errors_total"), "sum"),
    "nvl_replay": (("nvlink_replay_errors_total",), "sum"),
    "nvl_recovery": (("nvlink_recovery_errors_total",), "sum"),
    "thermal_us": (("thermal_violation_us",), "sum"),
}
#: hourly event counts: xid_hw / xid_app by the Xid catalogue's class, xid_fatal = FATAL_XIDS,
#: gpu_lost = fell off the bus or needs a reset, then three codes the features name.
EVENT_CHANNELS: tuple[str, ...] = (
    "xid_hw",
    "xid_app",
    "xid_fatal",
    "gpu_lost",
    "xid63",
    "xid92",
    "xid74",
)
_IDENT = ("hostname", "gpu", "model", "rack")


@dataclass
class HourlyPanel:
    """``hours[t]`` is the start of bucket ``t``; ``keys`` has one row per GPU life (column).

    ``keys`` columns: key, uuid, hostname, gpu, model, rack, fail_ts, fail_kind,
    precursor_start_ts (the failure that ended this life, NaN / "" if none).
    """

    hours: np.ndarray
    keys: pd.DataFrame
    seen: np.ndarray  # bool (T, G): any sample in the hour
    first: np.ndarray  # (G,) first bucket with a sample
    inc: dict[str, np.ndarray]  # float32 (T, G) hourly increases
    gauge: dict[str, np.ndarray]  # float32 (T, G) hourly means / peaks
    events: dict[str, np.ndarray]  # float32 (T, G) hourly counts
    retired_total: np.ndarray  # float32 (T, G) retired pages (sbe + dbe) at the end of the hour
    fatal_xid: np.ndarray  # float32 (T, G) code of the hour's last fatal Xid (NaN: none)
    #: share of the last bucket the history covers (a score at 10:20 sees 1/3 of 10:00-11:00)
    last_fraction: float = 1.0
    #: (G, len(SIGNAL_FIELDS)) whether each GPU life had any reading of each field the
    #: model's signals read (``gpuwarden.signals``): a field never read is unknown, not clean
    fields_read: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return self.seen.shape

    def index_of(self, hour_start: float) -> int:
        """Bucket index of the hour that starts at or holds ``hour_start``."""
        return int((np.floor(hour_start / HOUR_S) * HOUR_S - self.hours[0]) // HOUR_S)


def _epochs(
    uuid_codes: np.ndarray,
    ts: np.ndarray,
    fail_codes: np.ndarray,
    fail_ts: np.ndarray,
    *,
    inclusive: bool,
) -> np.ndarray:
    """How many failures of the same UUID happened before ``ts`` (at or before: ``inclusive``)."""
    if fail_codes.size == 0:
        return np.zeros(ts.size, dtype=np.int64)
    span = 4e9  # Unix seconds stay below this until 2096: one number orders (uuid, ts)
    fkey = np.sort(fail_codes * span + fail_ts)
    pos = np.searchsorted(fkey, uuid_codes * span + ts, side="right" if inclusive else "left")
    return (pos - np.searchsorted(fkey, uuid_codes * span, side="left")).astype(np.int64)


def _fill(t_idx: np.ndarray, g_idx: np.ndarray, values: np.ndarray, shape: tuple[int, int]):
    out = np.full(shape, np.nan)
    out[t_idx, g_idx] = values
    return out


def build_panel(
    hourly: pd.DataFrame,
    ident: pd.DataFrame,
    events: pd.DataFrame,
    failures: pd.DataFrame,
    *,
    start_hour: float | None = None,
    end_hour: float | None = None,
) -> HourlyPanel:
    """The panel from the canonical hourly frame (``_hourly``), one identity row per uuid
    (hostname, gpu, model, rack), events (ts, uuid, kind, code) and failures (ts, uuid, kind,
    precursor_start_ts). ``start_hour``/``end_hour`` fix the bucket range (default: the data's)."""
    hours_col = hourly["hour"].to_numpy(dtype=np.int64)
    h0 = int(start_hour if start_hour is not None else (hours_col.min() if len(hourly) else 0))
    h1 = int(end_hour if end_hour is not None else (hours_col.max() if len(hourly) else h0))
    h0, h1 = h0 // HOUR_S * HOUR_S, h1 // HOUR_S * HOUR_S
    keep = (hours_col >= h0) & (hours_col <= h1)
    hourly = hourly[keep]
    hours_col = hours_col[keep]
    cats = pd.Index(
        pd.unique(
            np.concatenate(
                [hourly["uuid"].astype(str).to_numpy(), failures["uuid"].astype(str).to_numpy()]
            )
        )
    )
    fail_codes = cats.get_indexer(failures["uuid"].astype(str)).astype(np.float64)
    fail_ts = failures["ts"].to_numpy(dtype=np.float64)
    row_codes = cats.get_indexer(hourly["uuid"].astype(str))
    epoch = _epochs(
        row_codes.astype(np.float64),
        hours_col.astype(np.float64),
        fail_codes,
        fail_ts,
        inclusive=True,
    )
    life = row_codes.astype(np.int64) * 1024 + epoch
    g_codes, lives = pd.factorize(life, sort=True)
    t_idx = (hours_col - h0) // HOUR_S
    shape = (int((h1 - h0) // HOUR_S) + 1, len(lives))

    seen = np.zeros(shape, dtype=bool)
    seen[t_idx, g_codes] = True
    first = np.where(seen.any(axis=0), seen.argmax(axis=0), shape[0])
    inc: dict[str, np.ndarray] = {}
    for name, (sources, how) in INCREASES.items():
        parts = [
            column_increases(_fill(t_idx, g_codes, hourly[s].to_numpy(np.float64), shape))
            for s in sources
        ]
        if len(parts) == 1:
            value = parts[0]
        elif how == "max":
            value = np.fmax(parts[0], parts[1])
        else:
            both = np.isnan(parts[0]) & np.isnan(parts[1])
            value = np.where(both, np.nan, np.nansum(np.stack(parts), axis=0))
        inc[name] = value.astype(np.float32)
    gauge = {
        c: _fill(t_idx, g_codes, hourly[c].to_numpy(np.float64), shape).astype(np.float32)
        for c in (*H.MEANS, *(f"{m}_max" for m in H.MAXES), "hw_slowdown")
    }
    gauge["spread_c"] = gauge["mem_temp_c"] - gauge["gpu_temp_c"]
    retired = [
        _fill(t_idx, g_codes, hourly[c].to_numpy(np.float64), shape)
        for c in ("retired_pages_sbe", "retired_pages_dbe")
    ]
    both = np.isnan(retired[0]) & np.isnan(retired[1])
    retired_total = np.where(both, np.nan, np.nansum(np.stack(retired), axis=0))

    keys = _key_table(np.asarray(lives), cats, ident, failures, fail_codes)
    fields_read = _fields_read(hourly, g_codes, len(lives))
    ev, fatal = _event_counts(events, cats, fail_codes, fail_ts, np.asarray(lives), h0, shape)
    return HourlyPanel(
        np.arange(h0, h1 + 1, HOUR_S, dtype=np.int64),
        keys,
        seen,
        first.astype(np.int64),
        inc,
        gauge,
        ev,
        retired_total.astype(np.float32),
        fatal,
        fields_read=fields_read,
    )


def _fields_read(hourly: pd.DataFrame, g_codes: np.ndarray, n: int) -> np.ndarray:
    """Per GPU life, whether each of ``SIGNAL_FIELDS`` was read in any hour (the hourly
    frame keeps a flag's peak as ``<field>_max`` and the clock-event bits as
    ``hw_slowdown``)."""
    out = np.zeros((n, len(SIGNAL_FIELDS)), dtype=bool)
    for j, name in enumerate(SIGNAL_FIELDS):
        column = next(
            (c for c in (name, f"{name}_max", "hw_slowdown" if name == H.REASONS else "")
             if c in hourly.columns),
            None,
        )  # fmt: skip
        if column is not None and len(hourly):
            seen = np.isfinite(hourly[column].to_numpy(np.float64))
            np.logical_or.at(out[:, j], g_codes, seen)
    return out


def _key_table(
    lives: np.ndarray,
    cats: pd.Index,
    ident: pd.DataFrame,
    failures: pd.DataFrame,
    fail_codes: np.ndarray,
) -> pd.DataFrame:
    uuid = cats[lives // 1024].astype(str)
    epoch = lives % 1024
    ident = ident.drop_duplicates("uuid", keep="last").set_index("uuid")
    keys = pd.DataFrame(
        {
            "key": [u if e == 0 else f"{u}#{e}" for u, e in zip(uuid, epoch, strict=True)],
            "uuid": np.asarray(uuid, dtype=object),
        }
    )
    for c in _IDENT:
        col = ident[c].reindex(keys["uuid"]) if c in ident.columns else None
        default: object = -1 if c == "gpu" else ""
        keys[c] = default if col is None else col.fillna(default).to_numpy()
    keys["gpu"] = keys["gpu"].astype(np.int64)
    # the failure that ended life e of a uuid is that uuid's e-th failure in time order
    f = pd.DataFrame(
        {
            "code": fail_codes.astype(np.int64),
            "ts": failures["ts"].to_numpy(float),
            "kind": failures["kind"].astype(str).to_numpy(),
            "pre": failures["precursor_start_ts"].to_numpy(float)
            if "precursor_start_ts" in failures.columns
            else np.nan,
        }
    )
    f = f.sort_values(["code", "ts"], kind="stable")
    f["epoch"] = f.groupby("code").cumcount()
    f.index = f["code"] * 1024 + f["epoch"]
    f = f[~f.index.duplicated()].reindex(lives)
    keys["fail_ts"] = f["ts"].to_numpy(float)
    keys["fail_kind"] = f["kind"].fillna("").astype(str).to_numpy()
    keys["precursor_start_ts"] = f["pre"].to_numpy(float)
    return keys


def _event_counts(
    events: pd.DataFrame,
    cats: pd.Index,
    fail_codes: np.ndarray,
    fail_ts: np.ndarray,
    lives: np.ndarray,
    h0: int,
    shape: tuple[int, int],
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    out = {ch: np.zeros(shape, dtype=np.float32) for ch in EVENT_CHANNELS}
    fatal = np.full(shape, np.nan, dtype=np.float32)
    if events.empty:
        return out, fatal
    events = events.sort_values("ts", kind="stable")
    ts = events["ts"].to_numpy(np.float64)
    codes = cats.get_indexer(events["uuid"].astype(str))
    # an event at the failure's own time (the Xid 79 that ends it) belongs to the dying life
    epoch = _epochs(codes.astype(np.float64), ts, fail_codes, fail_ts, inclusive=False)
    col = pd.Index(lives).get_indexer(codes.astype(np.int64) * 1024 + epoch)
    t = (np.floor(ts / HOUR_S) * HOUR_S - h0) // HOUR_S
    ok = (codes >= 0) & (col >= 0) & (t >= 0) & (t < shape[0])
    kind = events["kind"].astype(str).to_numpy()
    xid = pd.to_numeric(events["code"], errors="coerce").to_numpy(np.float64)
    is_xid = (kind == "xid") & np.isfinite(xid)
    # The shipped table, never a user's severity file: the model was trained on these counts.
    known = {c: DEFAULT_XID_TABLE.describe(int(c)).cls for c in np.unique(xid[is_xid])}
    cls = np.array([known.get(c, "") if x else "" for c, x in zip(xid, is_xid, strict=True)])
    masks = {
        "xid_hw": is_xid & (cls == "hardware"),
        "xid_app": is_xid & (cls == "application"),
        "xid_fatal": is_xid & np.isin(xid, list(FATAL_XIDS)),
        "gpu_lost": np.isin(kind, ["gpu_lost", "gpu_requires_reset"]),
        "xid63": is_xid & (xid == 63),
        "xid92": is_xid & (xid == 92),
        "xid74": is_xid & (xid == 74),
    }
    ti, ci = t.astype(np.int64), col.astype(np.int64)
    for ch, m in masks.items():
        sel = m & ok
        np.add.at(out[ch], (ti[sel], ci[sel]), 1.0)
    sel = masks["xid_fatal"] & ok  # time-ordered, so the hour's last one is written last
    fatal[ti[sel], ci[sel]] = xid[sel]
    return out, fatal


def events_frame(events: Iterable[Event]) -> pd.DataFrame:
    """Event records -> the (ts, uuid, kind, code) frame ``build_panel`` takes."""
    rows = [(e.ts, e.gpu.uuid, e.kind, np.nan if e.code is None else float(e.code)) for e in events]
    return pd.DataFrame(rows, columns=["ts", "uuid", "kind", "code"]).astype(
        {"ts": np.float64, "uuid": object, "kind": object, "code": np.float64}
    )


def failures_frame(failures: Iterable[Failure]) -> pd.DataFrame:
    """Failure records -> the frame ``build_panel`` and the labels take (store layout)."""
    rows = [
        (
            f.ts,
            f.gpu.hostname,
            f.gpu.index,
            f.gpu.uuid,
            f.kind,
            np.nan if f.precursor_start_ts is None else f.precursor_start_ts,
        )
        for f in failures
    ]
    return pd.DataFrame(
        rows, columns=["ts", "hostname", "gpu", "uuid", "kind", "precursor_start_ts"]
    ).astype({"ts": np.float64, "gpu": np.int64, "precursor_start_ts": np.float64})


def panel_from_frames(
    frames: Iterable[pd.DataFrame],
    events: pd.DataFrame,
    failures: pd.DataFrame,
) -> HourlyPanel:
    """Build a panel straight from wide sample frames (simulator chunks), without a store."""
    parts, idents = [], []
    for frame in frames:
        parts.append(H.from_raw(frame))
        cols = [c for c in ("uuid", *_IDENT) if c in frame.columns]
        idents.append(
            frame[cols]
            .drop_duplicates("uuid", keep="last")
            .astype({c: str for c in cols if c != "gpu"})
        )
    ident = pd.concat(idents, ignore_index=True) if idents else pd.DataFrame(columns=["uuid"])
    return build_panel(H.combine(parts), ident, events, failures)
