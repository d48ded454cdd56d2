"""The SQLite store's gpus, events and failures tables: the SQL, and rows in and out."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.telemetry import Batch, Event, Failure, GpuId, Rejection, mig_parent

#: A GPU as the upsert takes it: uuid, hostname, idx, pci_bus_id, model, rack, first_ts, last_ts.
GpuRow = tuple[str, str, int, str, str, str, float, float]


def _newest_nonempty(col: str) -> str:
    # An empty value (a source that does not know the rack) never erases a known one.
    return (
        f"CASE WHEN excluded.{col} = '' THEN gpus.{col} "
        f"WHEN gpus.{col} = '' OR excluded.last_ts >= gpus.last_ts THEN excluded.{col} "
        f"ELSE gpus.{col} END"
    )


#: A uuid is one board; its slot (hostname, idx) is whatever the newest sighting says, so a
#: board moved to another node follows it, and an old file ingested late changes nothing.
UPSERT = f"""
INSERT INTO gpus (uuid, hostname, idx, pci_bus_id, model, rack, first_ts, last_ts)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (uuid) DO UPDATE SET
    hostname = CASE WHEN excluded.last_ts >= gpus.last_ts THEN excluded.hostname ELSE gpus.hostname END,
    idx = CASE WHEN excluded.last_ts >= gpus.last_ts THEN excluded.idx ELSE gpus.idx END,
    pci_bus_id = {_newest_nonempty("pci_bus_id")},
    model = {_newest_nonempty("model")},
    rack = {_newest_nonempty("rack")},
    first_ts = min(gpus.first_ts, excluded.first_ts),
    last_ts = max(gpus.last_ts, excluded.last_ts)
"""

INSERT_EVENT = (
    "INSERT OR IGNORE INTO events (ts, gpu_id, kind, code, detail) VALUES (?, ?, ?, ?, ?)"
)
INSERT_FAILURE = (
    "INSERT OR REPLACE INTO failures (ts, gpu_id, kind, precursor_start_ts, repair_s, xid, source) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)

INSERT_REJECTION = (
    "INSERT OR REPLACE INTO rejections (ts, gpu_id, field, reason, value) VALUES (?, ?, ?, ?, ?)"
)

_GPU_COLUMNS = ["hostname", "gpu", "uuid", "pci_bus_id", "model", "rack", "first_ts", "last_ts"]
_TEXT = ("hostname", "uuid", "pci_bus_id", "model", "rack", "kind", "detail", "field", "reason")


def batch_rows(batch: Batch) -> tuple[np.ndarray, list[GpuRow]]:
    """A collector batch checked before any of it is written: its samples' times (a time
    that is not finite is an ``InputError``), and one upsert row per GPU it names."""
    ts = np.array([s.ts for s in batch.samples], dtype=np.float64)
    if not np.isfinite(ts).all():
        raise InputError("write_batch: a sample's ts is not a finite time")
    seen = [(s.ts, s.gpu) for s in batch.samples] + [(e.ts, e.gpu) for e in batch.events]
    seen += [(a.ts, a.gpu) for a in batch.assignments]
    seen += [(r.ts, r.gpu) for r in batch.rejected]
    return ts, rows_from(seen)


def rows_from(seen: Sequence[tuple[float, GpuId]]) -> list[GpuRow]:
    """One upsert row per uuid from (ts, GpuId) sightings: first/last ts, newest identity."""
    acc: dict[str, tuple[float, float, GpuId]] = {}
    for ts, gpu in seen:
        if not gpu.uuid or not gpu.hostname:
            raise InputError(f"a GPU needs a uuid and a hostname, got {gpu!r}")
        if not np.isfinite(ts):
            raise InputError(f"time {ts!r} for GPU {gpu.uuid} is not a finite Unix time")
        old = acc.get(gpu.uuid)
        if old is None:
            acc[gpu.uuid] = (ts, ts, gpu)
        else:
            first, last, newest = old
            acc[gpu.uuid] = (min(first, ts), max(last, ts), gpu if ts >= last else newest)
    return [
        (uuid, g.hostname, int(g.index), g.pci_bus_id, g.model, g.rack, first, last)
        for uuid, (first, last, g) in acc.items()
    ]


def event_rows(events: Sequence[Event], ids: dict[str, int]) -> list[tuple[object, ...]]:
    return [(e.ts, ids[e.gpu.uuid], e.kind, e.code, e.detail) for e in events]


def rejection_rows(
    rejections: Sequence[Rejection], ids: dict[str, int]
) -> list[tuple[object, ...]]:
    return [(r.ts, ids[r.gpu.uuid], r.field, r.reason, r.value) for r in rejections]


def failure_rows(
    failures: Sequence[Failure], ids: dict[str, int], source: str | None
) -> list[tuple[object, ...]]:
    return [
        (f.ts, ids[f.gpu.uuid], f.kind, f.precursor_start_ts, f.repair_s, f.xid, source)
        for f in failures
    ]


def _frame(rows: list[tuple], columns: list[str], ints: Sequence[str] = ()) -> pd.DataFrame:
    out = pd.DataFrame.from_records(rows, columns=columns)
    for c in columns:
        if c in _TEXT:
            out[c] = out[c].astype(str)
        elif c == "gpu":
            out[c] = out[c].astype(np.int64)
        elif c in ints:
            out[c] = out[c].astype("Int64")  # nullable: no Xid is not Xid 0
        else:
            out[c] = out[c].astype(np.float64)
    return out


def table(conn: sqlite3.Connection) -> pd.DataFrame:
    """The gpus table indexed by id, plus ``slot_rank``: the order of (hostname, gpu, uuid)."""
    rows = conn.execute(
        "SELECT id, hostname, idx, uuid, pci_bus_id, model, rack, first_ts, last_ts FROM gpus"
    ).fetchall()
    out = _frame(rows, ["id", *_GPU_COLUMNS]).astype({"id": np.int64}).set_index("id")
    out = out.sort_values(["hostname", "gpu", "uuid"], kind="stable")
    out["slot_rank"] = np.arange(len(out), dtype=np.int64)
    out["parent_uuid"] = [mig_parent(u) for u in out["uuid"]]
    return out


def select(
    gpus: pd.DataFrame, *, uuids: Sequence[str] | None, hostnames: Sequence[str] | None
) -> list[int] | None:
    """Ids of the GPUs matching both filters; None when there is no filter (and no MIG).

    MIG instances (``telemetry.mig_uuid`` keys) are read only when ``uuids`` names them: a
    whole-GPU read never counts a MIG instance as one more GPU."""
    whole = (gpus["parent_uuid"] == "").to_numpy()
    if uuids is None and hostnames is None:
        return None if whole.all() else [int(i) for i in gpus.index[whole]]
    keep = np.ones(len(gpus), dtype=bool)
    if uuids is not None:
        keep &= gpus["uuid"].isin(list(uuids)).to_numpy()
    else:
        keep &= whole
    if hostnames is not None:
        keep &= gpus["hostname"].isin(list(hostnames)).to_numpy()
    return [int(i) for i in gpus.index[keep]]


def public(gpus: pd.DataFrame) -> pd.DataFrame:
    """The gpus table as ``Store.gpus()`` returns it, sorted by hostname, gpu, first_ts: whole
    GPUs only. MIG instances (a parent uuid) are listed by ``mig_instances``; devices filed at
    index -1 (an NVSwitch's SXids, an Xid at a PCI address no GPU has) carry events per node
    but are not GPUs: no inventory, panel or page counts them."""
    whole = (gpus["parent_uuid"] == "") & (gpus["gpu"] >= 0)
    out = gpus[whole].sort_values(["hostname", "gpu", "first_ts"], kind="stable")
    return out[_GPU_COLUMNS].reset_index(drop=True)


def mig_instances(gpus: pd.DataFrame) -> pd.DataFrame:
    """MIG instances seen: hostname, gpu, uuid, parent_uuid, model (with the MIG profile),
    first_ts, last_ts."""
    out = gpus[gpus["parent_uuid"] != ""].sort_values(["hostname", "gpu", "uuid"], kind="stable")
    columns = ["hostname", "gpu", "uuid", "parent_uuid", "model", "first_ts", "last_ts"]
    return out[columns].reset_index(drop=True)


def _where(where: list[str]) -> str:
    return f" WHERE {' AND '.join(where)}" if where else ""


def events_frame(conn: sqlite3.Connection, where: list[str], params: list[object]) -> pd.DataFrame:
    rows = conn.execute(
        "SELECT e.ts, g.hostname, g.idx, g.uuid, e.kind, e.code, e.detail "
        f"FROM events e JOIN gpus g ON g.id = e.gpu_id{_where(where)} "
        "ORDER BY e.ts, g.hostname, g.idx, e.id",
        params,
    ).fetchall()
    columns = ["ts", "hostname", "gpu", "uuid", "kind", "code", "detail"]
    return _frame(rows, columns, ints=("code",))


def failures_frame(
    conn: sqlite3.Connection, where: list[str], params: list[object]
) -> pd.DataFrame:
    rows = conn.execute(
        "SELECT f.ts, g.hostname, g.idx, g.uuid, f.kind, f.precursor_start_ts, f.repair_s, f.xid "
        f"FROM failures f JOIN gpus g ON g.id = f.gpu_id{_where(where)} "
        "ORDER BY f.ts, g.hostname, g.idx, f.id",
        params,
    ).fetchall()
    columns = ["ts", "hostname", "gpu", "uuid", "kind", "precursor_start_ts", "repair_s", "xid"]
    return _frame(rows, columns, ints=("xid",))


def rejections_frame(
    conn: sqlite3.Connection, where: list[str], params: list[object]
) -> pd.DataFrame:
    """Rejected readings counted per GPU, field and reason, most first."""
    rows = conn.execute(
        "SELECT g.hostname, g.idx, g.uuid, r.field, r.reason, count(*), min(r.ts), max(r.ts) "
        f"FROM rejections r JOIN gpus g ON g.id = r.gpu_id{_where(where)} "
        "GROUP BY r.gpu_id, r.field, r.reason ORDER BY count(*) DESC, g.hostname, g.idx, r.field",
        params,
    ).fetchall()
    columns = ["hostname", "gpu", "uuid", "field", "reason", "count", "first_ts", "last_ts"]
    out = _frame(rows, columns, ints=("count",))
    out["count"] = out["count"].astype(np.int64)
    return out
