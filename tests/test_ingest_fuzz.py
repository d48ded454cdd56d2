"""Property tests of ingest (issue 15): CSV and Parquet files of random good lines, random bad
lines and random cells. Whatever the file holds, the load never raises (nor warns); every good
line is stored, every bad line is named once by its line number, and no impossible reading is
stored. Examples are few (the ``ingest`` profile) so the suite stays fast; set
GPUWARDEN_FUZZ_EXAMPLES to run more."""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwarden.ingest import ingest_telemetry
from gpuwarden.store.sqlite import SqliteStore

settings.register_profile(
    "ingest",
    # a few seconds in the suite; GPUWARDEN_FUZZ_EXAMPLES=2000 for a long hunt
    max_examples=int(os.environ.get("GPUWARDEN_FUZZ_EXAMPLES", "30")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
FUZZ = settings.get_profile("ingest")

T0 = 1_714_564_800
HEADER = "timestamp,hostname,gpu,UUID,modelName,DCGM_FI_DEV_GPU_TEMP\n"
H100 = "NVIDIA H100 80GB HBM3"
NAN = math.nan

#: Temperature cells as a file writes them: (cell, value stored, reason counted). -10..130 C is
#: possible; 1e308 is above DCGM's int64 blank values (a sentinel).
TEMP_CELLS = [
    ("40", 40.0, None),
    ("41.5", 41.5, None),
    (" 42 ", 42.0, None),
    ("-10", -10.0, None),
    ("1e2", 100.0, None),
    ("", NAN, None),
    ("nan", NAN, None),
    ("NaN", NAN, None),
    ("inf", NAN, "out_of_range"),
    ("-Infinity", NAN, "out_of_range"),
    ("-300", NAN, "out_of_range"),
    ("131", NAN, "out_of_range"),
    ("1e308", NAN, "sentinel"),
    ("9223372036854775794", NAN, "sentinel"),
    ("hot", NAN, "not_a_number"),
    ("NA", NAN, "not_a_number"),
    ("0x10", NAN, "not_a_number"),
    ("1_000", NAN, "not_a_number"),
    ("[40]", NAN, "not_a_number"),
    ("4O", NAN, "not_a_number"),
]
#: (column, cell) that make a CSV line no record.
BAD_IDENTITY = [
    ("gpu", "-1"),
    ("gpu", "1e30"),
    ("gpu", "4294967296"),
    ("gpu", "99999999999999999999"),
    ("gpu", "1.5"),
    ("gpu", "x"),
    ("gpu", ""),
    ("gpu", "nan"),
    ("gpu", "inf"),
    ("ts", "-5"),
    ("ts", "0"),
    ("ts", "yesterday"),
    ("ts", ""),
    ("ts", "inf"),
    ("ts", "nan"),
    ("ts", "1714564800000"),
    ("ts", "2150-01-01T00:00:00Z"),
    ("host", ""),
    ("host", "   "),
    ("uuid", ""),
]


@dataclass
class Expected:
    """What a load of the generated file must give."""

    bad_lines: set[int] = field(default_factory=set)
    temps: dict[float, float] = field(default_factory=dict)  # ts -> stored temperature
    counted: dict[str, int] = field(default_factory=dict)  # reason -> cells counted
    hosts: dict[float, str] = field(default_factory=dict)  # ts -> stored hostname
    #: times whose temperature cell was random text: stored as a possible reading or missing
    loose: set[float] = field(default_factory=set)

    def count(self, reason: str | None) -> None:
        if reason is not None:
            self.counted[reason] = self.counted.get(reason, 0) + 1


#: Text a cell may hold without changing the line's shape (no comma, quote or line break).
_CELL_TEXT = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters=',"\r\n'), max_size=12
)
#: A hostname's visible characters; spaces around it are trimmed.
_HOST_TEXT = st.text(
    st.characters(exclude_categories=("Cs", "Cc", "Cf", "Zs", "Zl", "Zp"), exclude_characters=',"'),
    min_size=1,
    max_size=12,
)


def _garbage_line(data: bytes) -> bytes:
    return data.replace(b"\n", b" ").replace(b"\r", b" ") + b"#x"  # never a blank line


@st.composite
def csv_files(draw: st.DrawFn) -> tuple[bytes, Expected]:
    """A telemetry CSV of good lines, bad lines and blank lines, and what it must give."""
    want = Expected()
    out = [HEADER.encode()]
    for k in range(draw(st.integers(1, 60))):
        line, ts = k + 2, float(T0 + k)
        kind = draw(
            st.sampled_from(["good"] * 6 + ["random", "identity", "cells", "garbage", "blank"])
        )
        cell, temp, why = draw(st.sampled_from(TEMP_CELLS))
        ids = {"ts": str(T0 + k), "host": f"n{k % 2}", "gpu": str(k % 8), "uuid": f"GPU-{k % 3}"}
        if kind == "random":  # any text in the metric cell, any visible hostname
            cell, temp, why = draw(_CELL_TEXT), NAN, None
            ids["host"] = " " * draw(st.integers(0, 1)) + draw(_HOST_TEXT)
            ids["uuid"] = f"GPU-r{k}"  # a GPU of its own: its hostname is this line's
            want.loose.add(ts)
            want.hosts[ts] = ids["host"].strip()
        if kind == "blank":
            out.append(b"\n")  # no record: neither stored nor reported
            continue
        if kind == "garbage":
            out.append(_garbage_line(draw(st.binary(max_size=40))) + b"\n")
            want.bad_lines.add(line)
            continue
        if kind == "identity":
            column, bad = draw(st.sampled_from(BAD_IDENTITY))
            ids[column] = bad
        text = f"{ids['ts']},{ids['host']},{ids['gpu']},{ids['uuid']},{H100},{cell}"
        if kind == "cells":  # too few or too many cells, or a quote never closed
            text = draw(
                st.sampled_from([text.rsplit(",", 1)[0], text + ",1", text.replace(",n", ',"n', 1)])
            )
        out.append(text.encode() + b"\n")
        if kind in ("identity", "cells"):
            want.bad_lines.add(line)
        else:
            want.temps[ts] = temp
            want.count(why)
    return b"".join(out), want


def _load(path: Path, chunk_rows: int) -> tuple[SqliteStore, object]:
    store = SqliteStore()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning, no pandas warning
        report = ingest_telemetry(store, path, chunk_rows=chunk_rows)
    return store, report


def _check(store: SqliteStore, report, want: Expected) -> None:
    named = [line for line, _ in report.bad_rows]
    assert len(named) == len(set(named)), "a bad line named twice"
    assert set(named) == want.bad_lines
    assert report.bad_rows_total == len(want.bad_lines)
    got = store.read_samples()
    assert report.rows_stored == len(want.temps) == len(got)
    stored = dict(zip(got["ts"].tolist(), got["gpu_temp_c"].tolist(), strict=True))
    assert stored.keys() == want.temps.keys()
    for ts, temp in want.temps.items():
        if ts in want.loose:  # random text: a possible reading, or missing
            assert math.isnan(stored[ts]) or -10 <= stored[ts] <= 130, stored[ts]
        else:
            assert (math.isnan(temp) and math.isnan(stored[ts])) or stored[ts] == temp, ts
    counted = {r: n for (f, r), n in report.rejected.items() if f == "gpu_temp_c"}
    for reason, n in want.counted.items():
        assert counted.get(reason, 0) >= n, reason
    assert sum(counted.values()) <= sum(want.counted.values()) + len(want.loose)
    host = dict(zip(got["ts"].tolist(), got["hostname"].tolist(), strict=True))
    assert {t: host[t] for t in want.hosts} == want.hosts


@FUZZ
@given(csv_files(), st.integers(1, 25))
def test_csv_fuzz(tmp_path_factory, made, chunk_rows):
    body, want = made
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    path.write_bytes(body)
    store, report = _load(path, chunk_rows)
    _check(store, report, want)


# -- Parquet -------------------------------------------------------------------------------------

#: Per column type: how a good cell is written, and cells that make the line no record.
TS_TYPES = {
    "int": (pa.int64(), lambda t: t, [None, -5, 0, 10**13]),
    "float": (pa.float64(), float, [None, -5.0, NAN, math.inf]),
    "timestamp": (
        pa.timestamp("us", "UTC"),
        lambda t: t * 10**6,
        [None, -5 * 10**6, 253402300799 * 10**6],
    ),
    "string": (pa.string(), str, [None, "-5", "yesterday", "", "nan"]),
}
GPU_TYPES = {
    "int64": (pa.int64(), lambda g: g, [None, 2**32, -1]),
    "uint64": (pa.uint64(), lambda g: g, [None, 2**32, 2**64 - 1]),
    "float": (pa.float64(), float, [None, 2.0**32, -1.0, 1.5, NAN, math.inf]),
    "string": (pa.string(), str, [None, "4294967296", "-1", "1.5", "x", ""]),
}


def _temp_column(draw: st.DrawFn, n: int, want: list[tuple[float, str | None]]) -> pa.Array:
    """A temperature column of a random type; ``want`` gets each row's (stored, reason)."""
    kind = draw(st.sampled_from(["float", "int", "string", "list", "bool"]))
    if kind == "string":
        cells = [draw(st.sampled_from(TEMP_CELLS)) for _ in range(n)]
        want.extend((v, why) for _, v, why in cells)
        return pa.array([c for c, _, _ in cells], pa.string())
    if kind in ("list", "bool"):  # no number; a boolean is one only for a 0/1 flag field
        value = st.booleans() if kind == "bool" else st.lists(st.floats(0, 99), max_size=2)
        items = [draw(st.none() | value) for _ in range(n)]
        want.extend((NAN, None if c is None else "not_a_number") for c in items)
        return pa.array(items, pa.bool_() if kind == "bool" else pa.list_(pa.float64()))
    numbers = (
        st.integers(-1000, 1000)
        if kind == "int"
        else (st.floats(-1000, 1000) | st.sampled_from([math.inf, -math.inf, NAN, -300.0, 55.0]))
    )
    values = [draw(st.none() | numbers) for _ in range(n)]
    for v in values:
        if v is None or math.isnan(v):
            want.append((NAN, None))
        else:
            want.append((float(v), None) if -10 <= v <= 130 else (NAN, "out_of_range"))
    return pa.array(values, pa.int64() if kind == "int" else pa.float64())


@st.composite
def parquet_files(draw: st.DrawFn) -> tuple[pa.Table, Expected]:
    """A telemetry Parquet table, its columns of random types, and what it must give."""
    n = draw(st.integers(1, 30))
    ts_type, ts_good, ts_bad = TS_TYPES[draw(st.sampled_from(sorted(TS_TYPES)))]
    gpu_type, gpu_good, gpu_bad = GPU_TYPES[draw(st.sampled_from(sorted(GPU_TYPES)))]
    bad = [draw(st.integers(0, 5)) == 0 for _ in range(n)]  # about 1 row in 6 spoiled
    ts, gpu, host, uuid = [], [], [], []
    for k in range(n):
        t, g, h, u = ts_good(T0 + k), gpu_good(k % 8), f"n{k % 2}", f"GPU-{k % 3}"
        which = draw(st.sampled_from(["ts", "gpu", "host", "uuid"])) if bad[k] else ""
        t = draw(st.sampled_from(ts_bad)) if which == "ts" else t
        g = draw(st.sampled_from(gpu_bad)) if which == "gpu" else g
        h = draw(st.sampled_from([None, "", "  "])) if which == "host" else h
        u = draw(st.sampled_from([None, ""])) if which == "uuid" else u
        ts.append(t)
        gpu.append(g)
        host.append(h)
        uuid.append(u)
    ts_col = pa.array(ts, ts_type)
    if draw(st.integers(0, 7)) == 0:  # a boolean time column: no line of it is a record
        bad = [True] * n
        ts_col = pa.array([draw(st.none() | st.booleans()) for _ in range(n)], pa.bool_())
    temps: list[tuple[float, str | None]] = []
    table = pa.table(
        {
            "timestamp": ts_col,
            "hostname": pa.array(host, pa.string()),
            "gpu": pa.array(gpu, gpu_type),
            "UUID": pa.array(uuid, pa.string()).dictionary_encode(),
            "modelName": pa.array([H100] * n),
            "DCGM_FI_DEV_GPU_TEMP": _temp_column(draw, n, temps),
        }
    )
    want = Expected()
    for k in range(n):
        if bad[k]:
            want.bad_lines.add(k + 2)  # the line a CSV export of the table would give it
        else:
            want.temps[float(T0 + k)] = temps[k][0]
            want.count(temps[k][1])
    return table, want


@FUZZ
@given(parquet_files(), st.integers(1, 25))
def test_parquet_fuzz(tmp_path_factory, made, chunk_rows):
    table, want = made
    path = tmp_path_factory.mktemp("pq") / "t.parquet"
    pq.write_table(table, path, row_group_size=max(1, len(table) // 3))
    store, report = _load(path, chunk_rows)
    _check(store, report, want)


def test_the_checks_catch_a_lost_row_or_a_wrongly_named_line(tmp_path):
    """Not vacuous: a good row not stored, or a good line named, fails ``_check``."""
    path = tmp_path / "t.csv"
    path.write_text(HEADER + f"{T0},n1,0,GPU-0,{H100},40\n{T0 + 1},n1,x,GPU-0,{H100},40\n")
    store, report = _load(path, 10)
    _check(store, report, Expected(bad_lines={3}, temps={float(T0): 40.0}))
    for wrong in (
        Expected(bad_lines={3}, temps={float(T0): 40.0, float(T0 + 1): 40.0}),
        Expected(bad_lines={2, 3}, temps={float(T0): 40.0}),
        Expected(bad_lines={3}, temps={float(T0): 41.0}),
        Expected(bad_lines={3}, temps={float(T0): 40.0}, counted={"out_of_range": 1}),
    ):
        with pytest.raises(AssertionError):
            _check(store, report, wrong)


@FUZZ
@given(
    st.lists(
        _CELL_TEXT
        | st.sampled_from([c for c, _, _ in TEMP_CELLS])
        | st.from_regex(r"\A[ +\-.0-9eE_xXinfatyINFATY()]{1,9}\Z"),  # number-like text
        min_size=1,
    )
)
def test_a_cell_reads_the_same_whatever_its_neighbours(cells):
    """pyarrow takes a clean column whole and ``_NUMBER`` judges a dirty one cell by cell: both
    must read a cell alike, or a value would depend on the other cells of its chunk."""
    from gpuwarden._ingest_cells import _parse

    text = pa.array(cells, pa.string())
    trimmed = pc.if_else(
        pc.equal(pc.utf8_trim_whitespace(text), ""), None, pc.utf8_trim_whitespace(text)
    )
    slow, unreadable = _parse(trimmed)
    for k, cell in enumerate(cells):
        try:
            alone = pc.cast(pa.array([cell or None], pa.string()), pa.float64())[0].as_py()
        except pa.ArrowInvalid:
            continue  # not a clean cell: only the cell-by-cell reading applies
        assert not unreadable[k], cell
        assert (
            (alone is None and math.isnan(slow[k]))
            or alone == slow[k]
            or (math.isnan(alone) and math.isnan(slow[k]))
        ), cell
