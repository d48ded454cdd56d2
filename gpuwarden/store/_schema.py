"""The SQLite store's schema, derived from ``telemetry.FIELDS``, and its migrations.

The version lives in ``PRAGMA user_version``. Structural changes are numbered steps in
``_MIGRATIONS``; field columns are reconciled on every open by ``ALTER TABLE ... ADD COLUMN``,
so adding a field to the catalogue migrates an existing file by itself (old rows read NULL, which
is NaN: the field was not collected then). A column for a field the catalogue no longer has is
left in place and ignored.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from gpuwarden.errors import SchemaError, StoreError
from gpuwarden.store import _assignments, _verdicts
from gpuwarden.telemetry import FIELDS, Field

#: The schema this code writes. A file with a larger ``user_version`` is refused.
SCHEMA_VERSION = 5

#: Rollup bucket widths in seconds. Each divides ``ROLLUP_WINDOW_S``, the unit compact() works in.
ROLLUP_RESOLUTIONS: tuple[int, ...] = (300, 3600)
ROLLUP_WINDOW_S = 3600

# Gauges whose peak matters as much as their mean (a 5-minute mean hides a thermal spike);
# each gets a ``<field>_max`` rollup column.
_MAX_UNITS = frozenset({"C", "W", "%", "bool"})


def rollup_agg(f: Field) -> str:
    """How a field is downsampled: counters keep the last value read in the bucket (resets
    included: rates are computed later, from increases), bitmasks OR their bits (a mean of
    clock-event bits means nothing), other gauges the mean."""
    if f.kind == "counter":
        return "last"
    if f.unit == "bitmask":
        return "or"
    return "mean"


SAMPLE_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS)
ROLLUP_MAX_FIELDS: tuple[str, ...] = tuple(
    f.name for f in FIELDS if f.kind == "gauge" and f.unit in _MAX_UNITS
)
#: Every value column of the rollups table: the fields, then ``<field>_max`` columns.
ROLLUP_FIELDS: tuple[str, ...] = SAMPLE_FIELDS + tuple(f"{n}_max" for n in ROLLUP_MAX_FIELDS)


def _columns(names: tuple[str, ...]) -> str:
    return "".join(f",\n    {n} REAL" for n in names)


def _v1(conn: sqlite3.Connection) -> None:
    # samples are keyed (ts, gpu_id) so the collector's writes append at the end of the
    # b-tree; the (gpu_id, ts) index serves one GPU's history.
    # Not executescript(): it COMMITs first, which would end migrate()'s transaction.
    ddl = f"""
CREATE TABLE gpus (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    hostname TEXT NOT NULL,
    idx INTEGER NOT NULL,
    pci_bus_id TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    rack TEXT NOT NULL DEFAULT '',
    first_ts REAL NOT NULL,
    last_ts REAL NOT NULL
);
CREATE INDEX gpus_slot ON gpus (hostname, idx);
CREATE TABLE samples (
    ts REAL NOT NULL,
    gpu_id INTEGER NOT NULL REFERENCES gpus (id){_columns(SAMPLE_FIELDS)},
    PRIMARY KEY (ts, gpu_id)
) WITHOUT ROWID;
CREATE INDEX samples_gpu_ts ON samples (gpu_id, ts);
CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    gpu_id INTEGER NOT NULL REFERENCES gpus (id),
    kind TEXT NOT NULL,
    code INTEGER,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX events_once ON events (gpu_id, ts, kind, ifnull(code, -1), detail);
CREATE INDEX events_ts ON events (ts);
CREATE TABLE failures (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    gpu_id INTEGER NOT NULL REFERENCES gpus (id),
    kind TEXT NOT NULL,
    precursor_start_ts REAL,
    repair_s REAL,
    xid INTEGER,
    source TEXT,
    UNIQUE (gpu_id, ts, kind)
);
CREATE TABLE rollups (
    resolution_s INTEGER NOT NULL,
    ts REAL NOT NULL,
    gpu_id INTEGER NOT NULL REFERENCES gpus (id),
    n_samples INTEGER NOT NULL{_columns(ROLLUP_FIELDS)},
    PRIMARY KEY (resolution_s, ts, gpu_id)
) WITHOUT ROWID;
CREATE INDEX rollups_gpu_ts ON rollups (resolution_s, gpu_id, ts);
-- Start (Unix s) of each hour that received raw samples since compact() last rolled it up.
CREATE TABLE rollup_pending (hour_ts INTEGER PRIMARY KEY);
"""
    for statement in ddl.split(";\n"):
        if statement.strip():
            conn.execute(statement)


#: Fields added by version 2: DCGM's profiling ratios (dashboard 12239's utilisation panels).
_V2_FIELDS = ("gr_engine_active", "tensor_active")


def _v2(conn: sqlite3.Connection) -> None:
    # A file made by _v1 of this code has them already; an older file gets them, its rows
    # reading NULL (NaN: not collected then). Nothing else changes, so nothing is lost.
    for table in ("samples", "rollups"):
        have = _table_columns(conn, table)
        for name in _V2_FIELDS:
            if name not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} REAL")


def _v3(conn: sqlite3.Connection) -> None:
    # gpuwarden's verdicts (serve, score --into). An older file gets an empty table: the
    # dashboard says there are no verdicts yet and names the backfill command.
    _verdicts.create(conn)


def _v4(conn: sqlite3.Connection) -> None:
    # Who held each GPU (dcgm-exporter's pod labels) and each node's driver versions. An older
    # file gets empty tables; nothing else changes.
    _assignments.create(conn)


def _v5(conn: sqlite3.Connection) -> None:
    # Readings rejected as impossible (gpuwarden.readings): one row per GPU, time and field, so
    # a replayed batch or a re-ingested file changes nothing. An older file gets an empty table.
    conn.execute(
        """CREATE TABLE IF NOT EXISTS rejections (
    ts REAL NOT NULL,
    gpu_id INTEGER NOT NULL REFERENCES gpus (id),
    field TEXT NOT NULL,
    reason TEXT NOT NULL,
    value REAL,
    PRIMARY KEY (ts, gpu_id, field)
) WITHOUT ROWID"""
    )


#: version -> the step that brings a file from version - 1 to it.
_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _v1,
    2: _v2,
    3: _v3,
    4: _v4,
    5: _v5,
}


def _table_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _add_field_columns(conn: sqlite3.Connection) -> list[str]:
    added = []
    for table, names in (("samples", SAMPLE_FIELDS), ("rollups", ROLLUP_FIELDS)):
        have = _table_columns(conn, table)
        for name in names:
            if name not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} REAL")
                added.append(f"{table}.{name}")
    return added


def _needs_work(conn: sqlite3.Connection) -> bool:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"the store's schema is version {version}, newer than this gpuwarden knows "
            f"({SCHEMA_VERSION}): upgrade gpuwarden to read it"
        )
    if version < SCHEMA_VERSION:
        return True
    return not (
        set(SAMPLE_FIELDS) <= _table_columns(conn, "samples")
        and set(ROLLUP_FIELDS) <= _table_columns(conn, "rollups")
    )


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the file to ``SCHEMA_VERSION`` and the current field catalogue, in one transaction.

    Raises ``SchemaError`` for a file written by a newer gpuwarden and ``StoreError`` for a
    SQLite file that is not a gpuwarden store. ``conn`` must be in autocommit mode.
    """
    if not _needs_work(conn):  # the common case takes no write lock, so readers open freely
        return
    # IMMEDIATE: two processes opening a new file at once must not both create the tables.
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        _needs_work(conn)  # re-check the version under the lock
        if version == 0:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")
            ]
            if tables:
                raise StoreError(
                    "the file is a SQLite database but not a gpuwarden store "
                    f"(it has tables {', '.join(sorted(tables))})"
                )
        for step in range(version + 1, SCHEMA_VERSION + 1):
            _MIGRATIONS[step](conn)
        _add_field_columns(conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
