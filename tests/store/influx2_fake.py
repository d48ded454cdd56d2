"""A local server that answers InfluxDB 2's HTTP API as InfluxData documents it, for tests.

No InfluxDB 2 installs here (Debian ships 1.6.7, which has no /api/v2). This speaks the part of
the v2 API that influxdb-client uses, on 127.0.0.1, so the real client drives it:

- ``POST /api/v2/write?org=&bucket=&precision=``: line protocol (gzip or not) as documented
  ("Line protocol" reference: escaping, float / ``i`` / ``u`` / string / boolean fields,
  precision); a point written again replaces the fields it carries; a field whose type changes
  is refused (400, as InfluxDB refuses a field type conflict); 204 on success.
- ``POST /api/v2/query?org=``: a Flux subset, parsed strictly (an unknown function, argument or
  token is a 400 "compilation failed"), answered in annotated CSV (``#datatype``, ``#group``,
  ``#default``; tables of one shape under one header, a blank line before the next shape).
  Functions: ``from``, ``range``, ``filter``, ``keep``, ``drop``, ``pivot``, ``aggregateWindow``
  (``mean``, ``last``, ``first``, ``max``, ``min``, ``sum``, ``count``), ``window``,
  ``distinct``, ``first``, ``last``, ``max``, ``min``, ``mean``, ``count``, ``group``; predicates
  with ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``and``, ``or``, ``not``, ``r.x`` and
  ``r["x"]``. Windows are aligned to the Unix epoch and clipped to the range, as Flux's are.
- ``Authorization: Token ...`` checked (401 otherwise), ``/health``, ``/ping``.

``forward_to``: every write body the fake accepts is also posted to another v2 write endpoint (a
real VictoriaMetrics), and refused when that refuses it, so a test can check that a real server
parsed the same points. ``fail(n, status, retry_after)`` answers the next ``n`` requests with
``status`` (retries, 429, 503).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import numpy as np


class Time(int):
    """A Flux time: Unix nanoseconds."""


class Duration(int):
    """A Flux duration: nanoseconds."""


class FluxError(Exception):
    pass


class LineError(Exception):
    pass


# -- line protocol ------------------------------------------------------------------------

_PRECISION = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_TRUE = {"t", "T", "true", "True", "TRUE"}
_FALSE = {"f", "F", "false", "False", "FALSE"}


def _scan(text: str, i: int, stops: str, escapable: str) -> tuple[str, int]:
    """Read from ``i`` up to an unescaped character of ``stops``; a backslash before a
    character of ``escapable`` escapes it, any other backslash is literal."""
    out = []
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in escapable:
            out.append(text[i + 1])
            i += 2
            continue
        if c in stops:
            break
        out.append(c)
        i += 1
    return "".join(out), i


def parse_line(text: str) -> tuple[str, dict[str, str], dict[str, Any], int | None]:
    """One line -> (measurement, tags, fields, timestamp or None)."""
    measurement, i = _scan(text, 0, ", ", ", ")
    if not measurement:
        raise LineError("missing measurement")
    tags: dict[str, str] = {}
    while i < len(text) and text[i] == ",":
        key, i = _scan(text, i + 1, "=, ", ",= ")
        if i >= len(text) or text[i] != "=" or not key:
            raise LineError(f"missing tag value for {key!r}")
        value, i = _scan(text, i + 1, ", ", ",= ")
        if not value:
            raise LineError(f"missing tag value for {key!r}")
        tags[key] = value
    if i >= len(text) or text[i] != " ":
        raise LineError("missing fields")
    i += 1
    fields: dict[str, Any] = {}
    while True:
        key, i = _scan(text, i, "=, ", ",= ")
        if i >= len(text) or text[i] != "=" or not key:
            raise LineError(f"invalid field {key!r}")
        i += 1
        if i < len(text) and text[i] == '"':
            value, i = _scan(text, i + 1, '"', '"\\')
            if i >= len(text):
                raise LineError(f"unterminated string field {key!r}")
            fields[key] = value
            i += 1
        else:
            raw, i = _scan(text, i, ", ", "")
            fields[key] = _field_value(raw, key)
        if i < len(text) and text[i] == ",":
            i += 1
            continue
        break
    ts = None
    rest = text[i:].strip()
    if rest:
        if not re.fullmatch(r"-?\d+", rest):
            raise LineError(f"bad timestamp {rest!r}")
        ts = int(rest)
    return measurement, tags, fields, ts


def _field_value(raw: str, key: str) -> Any:
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    if re.fullmatch(r"-?\d+i", raw):
        return int(raw[:-1])
    if re.fullmatch(r"\d+u", raw):
        return np.uint64(int(raw[:-1]))
    try:
        value = float(raw)
    except ValueError:
        raise LineError(f"invalid field value {raw!r} for {key!r}") from None
    if not math.isfinite(value) or raw.lower() in ("nan", "inf", "+inf", "-inf", "infinity"):
        raise LineError(f"invalid number {raw!r} for {key!r}")
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, np.uint64):
        return "unsignedLong"
    if isinstance(value, Time):
        return "dateTime:RFC3339"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    return "string"


# -- storage and tables ---------------------------------------------------------------------

SeriesKey = tuple[str, tuple[tuple[str, str], ...], str]  # measurement, tags, field


@dataclass
class Table:
    key: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    points: dict[int, Any] | None = None  # from(): a series' points, before range()

    def columns(self) -> list[str]:
        seen: dict[str, None] = dict.fromkeys(self.key)
        for row in self.rows:
            seen.update(dict.fromkeys(row))
        return list(seen)


def _regroup(tables: list[Table], key_columns: Callable[[Table], list[str]]) -> list[Table]:
    """Tables with equal group keys (after ``key_columns``) merged, rows in order."""
    out: dict[tuple[Any, ...], Table] = {}
    for t in tables:
        names = key_columns(t)
        key = {k: t.key[k] for k in names if k in t.key}
        ident = tuple(sorted(key.items(), key=lambda kv: kv[0]))
        merged = out.setdefault(ident, Table(key))
        merged.rows.extend(t.rows)
    return list(out.values())


# -- Flux: tokens, parser, evaluation -------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
    (?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))
    |(?P<duration>(?:\d+(?:ns|us|ms|mo|s|m|h|d|w|y))+)
    |(?P<float>\d+\.\d+)
    |(?P<int>\d+)
    |(?P<string>"(?:[^"\\]|\\.)*")
    |(?P<op>\|>|=>|<-|==|!=|<=|>=|=~|!~|[()\[\]{},:.=<>+\-*/])
    |(?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_DURATION_NS = {
    "ns": 1, "us": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9,
    "d": 86400 * 10**9, "w": 7 * 86400 * 10**9,
}  # fmt: skip


def _tokens(text: str) -> list[tuple[str, str]]:
    out, i = [], 0
    while i < len(text):
        if text[i:].strip() == "":
            break
        m = _TOKEN.match(text, i)
        if not m or m.end() == i:
            raise FluxError(f"compilation failed: unexpected {text[i : i + 20].strip()!r}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        i = m.end()
    return out


def _unquote(s: str) -> str:
    body = s[1:-1]
    if "${" in body.replace("\\${", ""):
        raise FluxError("compilation failed: string interpolation is not supported here")
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "r": "\r", "t": "\t"}.get(m[1], m[1]), body)


def _time(text: str) -> Time:
    m = re.fullmatch(r"(.{19})(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    assert m
    base = datetime.fromisoformat(m[1] + ("+00:00" if m[3] == "Z" else m[3]))
    frac = int((m[2] or "0").ljust(9, "0")[:9])
    return Time(int(base.timestamp()) * 10**9 + frac)


def _duration(text: str) -> Duration:
    total = 0
    for number, unit in re.findall(r"(\d+)(ns|us|ms|mo|s|m|h|d|w|y)", text):
        if unit not in _DURATION_NS:
            raise FluxError(f"compilation failed: duration unit {unit!r} is not supported here")
        total += int(number) * _DURATION_NS[unit]
    return Duration(total)


@dataclass
class Lambda:
    params: list[str]
    body: Any


@dataclass
class Call:
    name: str
    args: dict[str, Any]


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self, value: str | None = None, kind: str | None = None) -> bool:
        if self.i >= len(self.toks):
            return False
        k, v = self.toks[self.i]
        return (value is None or v == value) and (kind is None or k == kind)

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        if not self.peek(value, kind):
            got = self.toks[self.i][1] if self.i < len(self.toks) else "end of query"
            raise FluxError(f"compilation failed: expected {value or kind}, got {got!r}")
        self.i += 1
        return self.toks[self.i - 1][1]

    def program(self) -> tuple[list[str], Any]:
        imports = []
        while self.peek("import"):
            self.take("import")
            imports.append(_unquote(self.take(kind="string")))
        expr = self.pipe()
        if self.i != len(self.toks):
            raise FluxError(f"compilation failed: unexpected {self.toks[self.i][1]!r}")
        return imports, expr

    def pipe(self) -> Any:
        expr = self.logical()
        stages = []
        while self.peek("|>"):
            self.take("|>")
            call = self.primary()
            if not isinstance(call, Call):
                raise FluxError("compilation failed: |> needs a function call")
            stages.append(call)
        return ("pipe", expr, stages) if stages else expr

    def logical(self) -> Any:
        left = self.conj()
        while self.peek("or"):
            self.take("or")
            left = ("or", left, self.conj())
        return left

    def conj(self) -> Any:
        left = self.unary()
        while self.peek("and"):
            self.take("and")
            left = ("and", left, self.unary())
        return left

    def unary(self) -> Any:
        if self.peek("not"):
            self.take("not")
            return ("not", self.unary())
        return self.comparison()

    def comparison(self) -> Any:
        left = self.postfix()
        for op in ("==", "!=", "<=", ">=", "<", ">"):
            if self.peek(op, "op"):
                self.take(op)
                return (op, left, self.postfix())
        if self.peek("=~") or self.peek("!~"):
            raise FluxError("compilation failed: regular expressions are not supported here")
        return left

    def postfix(self) -> Any:
        expr = self.primary()
        while True:
            if self.peek("."):
                self.take(".")
                expr = ("member", expr, self.take(kind="ident"))
            elif self.peek("["):
                self.take("[")
                expr = ("member", expr, _unquote(self.take(kind="string")))
                self.take("]")
            else:
                return expr

    def primary(self) -> Any:
        if self.peek(kind="string"):
            return ("lit", _unquote(self.take()))
        if self.peek(kind="time"):
            return ("lit", _time(self.take()))
        if self.peek(kind="duration"):
            return ("lit", _duration(self.take()))
        if self.peek(kind="float"):
            return ("lit", float(self.take()))
        if self.peek(kind="int"):
            return ("lit", int(self.take()))
        if self.peek("-"):
            self.take("-")
            inner = self.primary()
            if inner[0] != "lit" or not isinstance(inner[1], int | float):
                raise FluxError("compilation failed: - needs a number or duration")
            value = inner[1]
            return ("lit", type(value)(-value) if isinstance(value, Duration) else -value)
        if self.peek("["):
            self.take("[")
            items = []
            while not self.peek("]"):
                items.append(self.logical())
                if not self.peek("]"):
                    self.take(",")
            self.take("]")
            return ("array", items)
        if self.peek("("):
            start = self.i
            if self._is_lambda():
                return self.function()
            self.i = start
            self.take("(")
            inner = self.logical()
            self.take(")")
            return inner
        name = self.take(kind="ident")
        if name in ("true", "false"):
            return ("lit", name == "true")
        if self.peek(".") and self.i + 2 < len(self.toks) and self.toks[self.i + 2][1] == "(":
            self.take(".")  # a package member's call: strings.hasPrefix(...)
            name = f"{name}.{self.take(kind='ident')}"
        if self.peek("("):
            self.take("(")
            args: dict[str, Any] = {}
            while not self.peek(")"):
                key = self.take(kind="ident")
                self.take(":")
                args[key] = self.pipe()
                if not self.peek(")"):
                    self.take(",")
            self.take(")")
            return Call(name, args)
        return ("ident", name)

    def _is_lambda(self) -> bool:
        depth = 0
        for j in range(self.i, len(self.toks)):
            v = self.toks[j][1]
            depth += v == "("
            depth -= v == ")"
            if depth == 0:
                return j + 1 < len(self.toks) and self.toks[j + 1][1] == "=>"
        return False

    def function(self) -> Lambda:
        self.take("(")
        params = []
        while not self.peek(")"):
            params.append(self.take(kind="ident"))
            if self.peek("="):
                self.take("=")
                self.take("<-")
            if not self.peek(")"):
                self.take(",")
        self.take(")")
        self.take("=>")
        return Lambda(params, self.logical())


def _value(expr: Any, env: dict[str, Any]) -> Any:
    kind = expr[0] if isinstance(expr, tuple) else None
    if isinstance(expr, Lambda):
        return expr
    if kind == "lit":
        return expr[1]
    if kind == "array":
        return [_value(e, env) for e in expr[1]]
    if kind == "ident":
        if expr[1] not in env:
            raise FluxError(f"compilation failed: undefined identifier {expr[1]}")
        return env[expr[1]]
    if kind == "member":
        obj = _value(expr[1], env)
        return obj.get(expr[2]) if isinstance(obj, dict) else None
    if kind in ("and", "or"):
        left = _truthy(_value(expr[1], env))
        if kind == "and":
            return left and _truthy(_value(expr[2], env))
        return left or _truthy(_value(expr[2], env))
    if kind == "not":
        return not _truthy(_value(expr[1], env))
    if kind in ("==", "!=", "<", "<=", ">", ">="):
        a, b = _value(expr[1], env), _value(expr[2], env)
        if a is None or b is None:
            return False  # a comparison with null is not true
        return {
            "==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b,
        }[kind]  # fmt: skip
    raise FluxError(f"compilation failed: cannot evaluate {expr!r}")


def _columns_read(expr: Any) -> set[str]:
    """The columns of ``r`` an expression reads."""
    if isinstance(expr, tuple):
        if expr[0] == "member" and expr[1] == ("ident", "r"):
            return {expr[2]}
        return set().union(*(_columns_read(e) for e in expr[1:]))
    if isinstance(expr, list):
        return set().union(*(_columns_read(e) for e in expr))
    return set()


def _truthy(v: Any) -> bool:
    if not isinstance(v, bool):
        raise FluxError(f"runtime error: expected a boolean, got {v!r}")
    return v


# -- the functions --------------------------------------------------------------------------

_AGGREGATES: dict[str, Callable[[list[dict[str, Any]], str], Any]] = {}


def _aggregate(name: str, selector: bool) -> Callable[..., Any]:
    def register(fn: Callable[[list[Any]], Any]) -> Callable[..., Any]:
        def over(rows: list[dict[str, Any]], column: str) -> Any:
            values = [r.get(column) for r in rows if r.get(column) is not None]
            return fn(values)

        over.selector = selector  # type: ignore[attr-defined]
        _AGGREGATES[name] = over
        return over

    return register


@_aggregate("mean", selector=False)
def _mean(values: list[Any]) -> Any:
    if not values:
        return None
    total = 0.0
    for v in values:  # Flux sums in order, in float64
        total += float(v)
    return total / len(values)


@_aggregate("sum", selector=False)
def _sum(values: list[Any]) -> Any:
    return sum(values) if values else None


@_aggregate("count", selector=False)
def _count(values: list[Any]) -> Any:
    return len(values)


@_aggregate("last", selector=True)
def _last(values: list[Any]) -> Any:
    return values[-1] if values else None


@_aggregate("first", selector=True)
def _first(values: list[Any]) -> Any:
    return values[0] if values else None


@_aggregate("max", selector=True)
def _max(values: list[Any]) -> Any:
    return max(values) if values else None


@_aggregate("min", selector=True)
def _min(values: list[Any]) -> Any:
    return min(values) if values else None


def _windows(lo: int, hi: int, every: int) -> Iterator[tuple[int, int]]:
    """Epoch-aligned windows covering [lo, hi), clipped to it."""
    start = (lo // every) * every
    while start < hi:
        yield max(lo, start), min(hi, start + every)
        start += every


class Flux:
    """Evaluates a parsed query over ``storage`` (``FakeInflux.series``)."""

    def __init__(self, server: FakeInflux, org: str) -> None:
        self.server = server
        self.org = org

    def run(self, text: str) -> list[Table]:
        imports, expr = _Parser(text).program()
        for name in imports:
            raise FluxError(f"compilation failed: package {name!r} is not supported here")
        if not (isinstance(expr, tuple) and expr[0] == "pipe"):
            raise FluxError("compilation failed: the query yields no tables")
        _, source, stages = expr
        if not (isinstance(source, Call) and source.name == "from"):
            raise FluxError("compilation failed: a query starts with from()")
        tables = self.call_from(source.args)
        ranged = False
        for stage in stages:
            if stage.name == "range":
                ranged = True
            elif not ranged:
                raise FluxError("error calling function: from() must be followed by range()")
            tables = self.stage(stage, tables)
        return [t for t in tables if t.rows]

    def args(
        self, call: Call, required: tuple[str, ...], optional: dict[str, Any]
    ) -> dict[str, Any]:
        unknown = set(call.args) - set(required) - set(optional)
        if unknown:
            raise FluxError(
                f"error calling function {call.name!r}: unknown argument(s) {sorted(unknown)}"
            )
        missing = [a for a in required if a not in call.args]
        if missing:
            raise FluxError(
                f"error calling function {call.name!r}: missing required argument {missing[0]!r}"
            )
        env = {"mean": "mean", "last": "last", "first": "first", "max": "max", "min": "min",
               "sum": "sum", "count": "count"}  # fmt: skip
        out = dict(optional)
        for k, v in call.args.items():
            out[k] = _value(v, env)
        return out

    def call_from(self, args: dict[str, Any]) -> list[Table]:
        a = self.args(Call("from", args), ("bucket",), {})
        bucket = a["bucket"]
        if (self.org, bucket) not in self.server.buckets:
            raise FluxError(f'could not find bucket "{bucket}"')
        tables = []
        for (measurement, tags, fld), points in self.server.snapshot(bucket).items():
            key = {"_measurement": measurement, **dict(tags), "_field": fld}
            tables.append(Table(key, points=points))  # rows are made by range(), in its bounds
        return tables

    def stage(self, call: Call, tables: list[Table]) -> list[Table]:
        method = getattr(self, f"fn_{call.name}", None)
        if method is None:
            raise FluxError(f"compilation failed: undefined identifier {call.name}")
        return method(call, tables)

    def fn_range(self, call: Call, tables: list[Table]) -> list[Table]:
        a = self.args(call, ("start",), {"stop": None})
        now = self.server.now_ns()

        def bound(v: Any) -> int:
            if isinstance(v, Duration):
                return now + v
            if isinstance(v, Time):
                return int(v)
            if isinstance(v, int) and not isinstance(v, bool):
                return v * 10**9  # an integer is Unix seconds
            raise FluxError(f'error calling function "range": bad bound {v!r}')

        lo = bound(a["start"])
        hi = now if a["stop"] is None else bound(a["stop"])
        out = []
        for t in tables:
            key = {"_start": Time(lo), "_stop": Time(hi), **t.key}
            rows = [
                {**key, "_time": Time(ts), "_value": v}
                for ts, v in sorted((t.points or {}).items())
                if lo <= ts < hi
            ]
            out.append(Table(key, rows))
        return out

    def fn_filter(self, call: Call, tables: list[Table]) -> list[Table]:
        a = self.args(call, ("fn",), {"onEmpty": "drop"})
        fn = a["fn"]
        if not isinstance(fn, Lambda) or fn.params != ["r"]:
            raise FluxError('error calling function "filter": fn must be (r) => ...')
        used = _columns_read(fn.body)
        out = []
        for t in tables:
            if used <= set(t.key):  # a test of the group key only: once per table, as pushed down
                rows = t.rows if _truthy(_value(fn.body, {"r": t.key})) else []
            else:
                rows = [r for r in t.rows if _truthy(_value(fn.body, {"r": r}))]
            if rows or a["onEmpty"] == "keep":
                out.append(Table(dict(t.key), rows))
        return out

    def fn_keep(self, call: Call, tables: list[Table]) -> list[Table]:
        cols = self.args(call, ("columns",), {})["columns"]
        kept = [
            Table(
                {k: v for k, v in t.key.items() if k in cols},
                [{k: v for k, v in r.items() if k in cols} for r in t.rows],
            )
            for t in tables
        ]
        return _regroup(kept, lambda t: list(t.key))

    def fn_drop(self, call: Call, tables: list[Table]) -> list[Table]:
        cols = self.args(call, ("columns",), {})["columns"]
        kept = [
            Table(
                {k: v for k, v in t.key.items() if k not in cols},
                [{k: v for k, v in r.items() if k not in cols} for r in t.rows],
            )
            for t in tables
        ]
        return _regroup(kept, lambda t: list(t.key))

    def fn_group(self, call: Call, tables: list[Table]) -> list[Table]:
        a = self.args(call, (), {"columns": [], "mode": "by"})
        if a["mode"] != "by":
            raise FluxError('error calling function "group": only mode "by" is supported here')
        out: dict[tuple[Any, ...], Table] = {}
        for t in tables:
            for r in t.rows:
                key = {c: r.get(c) for c in a["columns"] if c in r}
                ident = tuple(key.items())
                out.setdefault(ident, Table(key)).rows.append(r)
        return list(out.values())

    def fn_pivot(self, call: Call, tables: list[Table]) -> list[Table]:
        a = self.args(call, ("rowKey", "columnKey", "valueColumn"), {})
        row_key, col_key, value = a["rowKey"], a["columnKey"], a["valueColumn"]
        dropped = set(col_key) | {value}
        groups = _regroup(
            [Table(dict(t.key), list(t.rows)) for t in tables],
            lambda t: [k for k in t.key if k not in dropped],
        )
        out = []
        for g in groups:
            rows: dict[tuple[Any, ...], dict[str, Any]] = {}
            for r in g.rows:
                ident = tuple(r.get(k) for k in row_key)
                row = rows.setdefault(ident, {**g.key, **{k: r.get(k) for k in row_key}})
                name = "_".join(str(r.get(k)) for k in col_key)
                row[name] = r.get(value)  # a second value for the same cell: the last wins
            out.append(Table(dict(g.key), [rows[k] for k in sorted(rows, key=_sort_key)]))
        return out

    def fn_aggregateWindow(self, call: Call, tables: list[Table]) -> list[Table]:
        a = self.args(
            call,
            ("every", "fn"),
            {"period": None, "offset": None, "column": "_value", "timeSrc": "_stop",
             "timeDst": "_time", "createEmpty": True, "location": None},
        )  # fmt: skip
        if a["period"] is not None or a["offset"] is not None or a["location"] is not None:
            raise FluxError(
                'error calling function "aggregateWindow": period, offset and location are not supported here'
            )
        every = int(a["every"])
        fn = _AGGREGATES.get(a["fn"]) if isinstance(a["fn"], str) else None
        if fn is None:
            raise FluxError(
                'error calling function "aggregateWindow": fn must be mean, last, first, max, min, sum or count here'
            )
        if a["timeSrc"] not in ("_start", "_stop", "_time"):
            raise FluxError('error calling function "aggregateWindow": bad timeSrc')
        column = a["column"]
        out = []
        for t in tables:
            lo, hi = int(t.key["_start"]), int(t.key["_stop"])
            rows = []
            by_window: dict[int, list[dict[str, Any]]] = {}
            for r in t.rows:
                w = (int(r["_time"]) // every) * every
                by_window.setdefault(w, []).append(r)
            for w_lo, w_hi in _windows(lo, hi, every):
                inside = by_window.get((w_lo // every) * every, [])
                if not inside and not a["createEmpty"]:
                    continue
                stamp = {"_start": w_lo, "_stop": w_hi}.get(a["timeSrc"], w_hi)
                row = {**t.key, a["timeDst"]: Time(stamp), column: fn(inside, column)}
                rows.append(row)
            out.append(Table(dict(t.key), rows))
        return out

    def fn_window(self, call: Call, tables: list[Table]) -> list[Table]:
        a = self.args(call, ("every",), {"period": None, "offset": None, "createEmpty": False})
        if a["period"] is not None or a["offset"] is not None:
            raise FluxError(
                'error calling function "window": period and offset are not supported here'
            )
        every = int(a["every"])
        out = []
        for t in tables:
            lo, hi = int(t.key["_start"]), int(t.key["_stop"])
            for w_lo, w_hi in _windows(lo, hi, every):
                key = {**t.key, "_start": Time(w_lo), "_stop": Time(w_hi)}
                rows = [
                    {**r, "_start": Time(w_lo), "_stop": Time(w_hi)}
                    for r in t.rows
                    if w_lo <= r["_time"] < w_hi
                ]
                if rows or a["createEmpty"]:
                    out.append(Table(key, rows))
        return out

    def fn_distinct(self, call: Call, tables: list[Table]) -> list[Table]:
        column = self.args(call, (), {"column": "_value"})["column"]
        out = []
        for t in tables:
            seen: dict[Any, None] = {}
            for r in t.rows:
                seen.setdefault(r.get(column), None)
            out.append(Table(dict(t.key), [{**t.key, "_value": v} for v in seen]))
        return out

    def _selector(self, name: str, call: Call, tables: list[Table]) -> list[Table]:
        column = self.args(call, (), {"column": "_value"})["column"]
        fn = _AGGREGATES[name]
        out = []
        for t in tables:
            rows = [r for r in t.rows if r.get(column) is not None]
            if not rows:
                continue
            if fn.selector:  # type: ignore[attr-defined]
                target = fn(rows, column)
                pick = next(
                    r
                    for r in (rows if name != "last" else reversed(rows))
                    if r.get(column) == target
                )
                out.append(Table(dict(t.key), [dict(pick)]))
            else:
                out.append(Table(dict(t.key), [{**t.key, column: fn(rows, column)}]))
        return out

    def fn_first(self, call: Call, tables: list[Table]) -> list[Table]:
        return self._selector("first", call, tables)

    def fn_last(self, call: Call, tables: list[Table]) -> list[Table]:
        return self._selector("last", call, tables)

    def fn_max(self, call: Call, tables: list[Table]) -> list[Table]:
        return self._selector("max", call, tables)

    def fn_min(self, call: Call, tables: list[Table]) -> list[Table]:
        return self._selector("min", call, tables)

    def fn_mean(self, call: Call, tables: list[Table]) -> list[Table]:
        return self._selector("mean", call, tables)

    def fn_count(self, call: Call, tables: list[Table]) -> list[Table]:
        return self._selector("count", call, tables)


def _sort_key(ident: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, v if v is not None else 0) for v in ident)


# -- annotated CSV ----------------------------------------------------------------------------


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, Time):
        seconds, nanos = divmod(int(value), 10**9)
        text = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{text}.{nanos:09d}".rstrip("0").rstrip(".") + "Z"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return np.format_float_positional(value, unique=True, trim="-")
    return str(value)


def annotated_csv(tables: list[Table]) -> str:
    """Tables as InfluxDB writes them: one header per shape, a blank line between shapes."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    shape = None
    for n, t in enumerate(tables):
        columns = t.columns()
        types = []
        for c in columns:
            kinds = {_kind(r[c]) for r in t.rows if r.get(c) is not None}
            types.append(kinds.pop() if len(kinds) == 1 else "string")
        group = ["true" if c in t.key else "false" for c in columns]
        this = (tuple(columns), tuple(types), tuple(group))
        if this != shape:
            if shape is not None:
                buf.write("\r\n")
            writer.writerow(["#datatype", "string", "long", *types])
            writer.writerow(["#group", "false", "false", *group])
            writer.writerow(["#default", "_result", "", *[""] * len(columns)])
            writer.writerow(["", "result", "table", *columns])
            shape = this
        for r in t.rows:
            writer.writerow(["", "", str(n), *(_format(r.get(c)) for c in columns)])
    if tables:
        buf.write("\r\n")
    return buf.getvalue()


# -- the server ---------------------------------------------------------------------------


class FakeInflux:
    """The fake server (see the module docstring). ``url``: its base URL once started."""

    def __init__(
        self,
        *,
        token: str = "test-token",
        org: str = "gpuwarden",
        buckets: tuple[str, ...] = ("gpu",),
        forward_to: str | None = None,
        now: Callable[[], float] | None = None,
    ) -> None:
        self.token = token
        self.buckets = {(org, b) for b in buckets}
        self.forward_to = forward_to
        self.series: dict[str, dict[SeriesKey, dict[int, Any]]] = {b: {} for b in buckets}
        self.types: dict[tuple[str, str, str], str] = {}
        self.requests: list[tuple[str, str, int]] = []
        self.queries: list[str] = []
        self._fail: list[tuple[int, str | None]] = []
        self._lock = threading.Lock()
        self._now = now
        self._server: ThreadingHTTPServer | None = None

    def now_ns(self) -> int:
        import time

        return int((self._now or time.time)() * 1e9)

    def snapshot(self, bucket: str) -> dict[SeriesKey, dict[int, Any]]:
        with self._lock:
            return {k: dict(v) for k, v in self.series[bucket].items()}

    def fail(self, n: int, status: int = 503, retry_after: str | None = None) -> None:
        """Answer the next ``n`` requests with ``status`` (and ``Retry-After``)."""
        with self._lock:
            self._fail += [(status, retry_after)] * n

    def recover(self) -> None:
        """Stop answering with injected failures."""
        with self._lock:
            self._fail.clear()

    def write(self, bucket: str, body: str, precision: str) -> None:
        scale = _PRECISION.get(precision)
        if scale is None:
            raise LineError(f"invalid precision {precision!r}")
        points = []
        for n, text in enumerate(body.splitlines(), 1):
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            try:
                measurement, tags, fields, ts = parse_line(text)
            except LineError as exc:
                raise LineError(f"unable to parse '{text[:80]}': line {n}: {exc}") from None
            if ts is None:
                ts = self.now_ns() // scale
            points.append((measurement, tags, fields, ts * scale))
        with self._lock:
            types = dict(self.types)
            for measurement, _, fields, _ in points:
                for k, v in fields.items():
                    kind = _kind(v)
                    old = types.setdefault((bucket, measurement, k), kind)
                    if old != kind:
                        raise LineError(
                            f"failure writing points to database: partial write: field type conflict: "
                            f'input field "{k}" on measurement "{measurement}" is type {kind}, already exists as type {old}'
                        )
            if self.forward_to:
                self._forward(bucket, body, precision)
            self.types = types
            store = self.series[bucket]
            for measurement, tags, fields, ts in points:
                tagkey = tuple(sorted(tags.items()))
                for k, v in fields.items():
                    store.setdefault((measurement, tagkey, k), {})[ts] = v

    def _forward(self, bucket: str, body: str, precision: str) -> None:
        got = httpx.post(
            f"{self.forward_to}/api/v2/write",
            params={"org": "gpuwarden", "bucket": bucket, "precision": precision},
            content=body.encode(),
            timeout=30,
        )
        if got.status_code // 100 != 2:
            raise LineError(
                f"the real server refused the write ({got.status_code}): {got.text[:300]}"
            )

    def query(self, org: str, text: str) -> str:
        with self._lock:
            self.queries.append(text)
        return annotated_csv(Flux(self, org).run(text))

    def start(self) -> FakeInflux:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        self._server = server
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def take_failure(self) -> tuple[int, str | None] | None:
        with self._lock:
            return self._fail.pop(0) if self._fail else None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeInflux


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _reply(
        self,
        status: int,
        body: bytes = b"",
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.server.fake.requests.append((self.command, urlsplit(self.path).path, status))
        self.send_response(status)
        if (
            body
            and "gzip" in self.headers.get("Accept-Encoding", "")
            and content_type.startswith("text/csv")
        ):
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, code: str, message: str) -> None:
        self._reply(status, json.dumps({"code": code, "message": message}).encode())

    def _body(self) -> bytes:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        return raw

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/health":
            self._reply(
                200,
                json.dumps({"name": "influxdb", "status": "pass", "version": "v2-fake"}).encode(),
            )
        elif path == "/ping":
            self._reply(204)
        else:
            self._error(404, "not found", "path not found")

    def do_POST(self) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        body = self._body()
        failure = fake.take_failure()
        if failure is not None:
            status, retry_after = failure
            headers = {"Retry-After": retry_after} if retry_after else {}
            self._reply(
                status,
                json.dumps({"code": "unavailable", "message": "injected failure"}).encode(),
                headers=headers,
            )
            return
        if self.headers.get("Authorization") != f"Token {fake.token}":
            self._error(401, "unauthorized", "unauthorized access")
            return
        org = query.get("org", "")
        if parts.path == "/api/v2/write":
            bucket = query.get("bucket", "")
            if (org, bucket) not in fake.buckets:
                self._error(404, "not found", f'bucket "{bucket}" not found')
                return
            try:
                fake.write(bucket, body.decode(), query.get("precision", "ns"))
            except LineError as exc:
                self._error(400, "invalid", str(exc))
                return
            self._reply(204)
        elif parts.path == "/api/v2/query":
            try:
                request = json.loads(body)
                text = fake.query(org, request["query"])
            except FluxError as exc:
                self._error(400, "invalid", str(exc))
                return
            except (ValueError, KeyError) as exc:
                self._error(400, "invalid", f"bad request body: {exc}")
                return
            self._reply(200, text.encode(), "text/csv; charset=utf-8")
        else:
            self._error(404, "not found", "path not found")
