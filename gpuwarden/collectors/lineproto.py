"""InfluxDB line protocol, read: what Telegraf writes and InfluxDB exports.

    measurement[,tag=value...] field=value[,field=value...] [timestamp]

as InfluxData documents it (docs.influxdata.com, "Line protocol"): a comma, space or equals
sign inside a measurement, tag key, tag value or field key is escaped with a backslash (a
measurement escapes commas and spaces only); a string field is double-quoted, with ``\\"`` and
``\\\\`` inside; an integer ends in ``i``, an unsigned one in ``u``; ``t``, ``T``, ``true``,
``True``, ``TRUE`` and their ``f`` forms are booleans; anything else is a float. The time is an
integer in ``precision`` units (nanoseconds unless told); a line without one has no time here
(None), where a server would use its own clock. ``#`` starts a comment line.

``parse_line`` raises ``InputError`` naming what does not read; it never guesses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuwarden.errors import InputError

#: Units of each time precision InfluxDB's write API takes, per second (a time is divided by it:
#: 60,000,000,000 ns is 60.0 s exactly, where multiplying by 1e-9 gives 60.00000000000001).
PRECISIONS: dict[str, int] = {"ns": 1_000_000_000, "us": 1_000_000, "ms": 1_000, "s": 1}
_TRUE = frozenset({"t", "T", "true", "True", "TRUE"})
_FALSE = frozenset({"f", "F", "false", "False", "FALSE"})

Value = float | int | bool | str


@dataclass(frozen=True)
class Point:
    """One line: ``ts`` in Unix seconds, None when the line has no time."""

    measurement: str
    tags: dict[str, str]
    fields: dict[str, Value]
    ts: float | None


#: the measurement and tags: up to the first space no backslash escapes (the patterns are
#: written as "unrolled loops", [^x\\]*(?:\\.[^x\\]*)*, several times faster in Python's re
#: than an alternation per character)
_HEAD = re.compile(r"[^ \\]*(?:\\.[^ \\]*)*")
#: a comma-separated part (no backslash before the comma), and a key=value pair
_PART = re.compile(r"[^,\\]+(?:\\.[^,\\]*)*|(?:\\.[^,\\]*)+")
_PAIR = re.compile(r"([^=\\]*(?:\\.[^=\\]*)*)=(.+)\Z", re.S)
#: one field: key, then a quoted string (its quotes and backslashes escaped) or a bare value,
#: then a comma, or the space before the time, or the end
_FIELD = re.compile(
    r'([^,=\\ ]*(?:\\.[^,=\\ ]*)*)=("[^"\\]*(?:\\.[^"\\]*)*"|[^,\s"]+)(,|(?= )|\s*\Z)'
)
_TIME = re.compile(r" +(-?\d+)\s*\Z")
_ESCAPED = re.compile(r"\\([,= ])")
_MEASUREMENT_ESCAPED = re.compile(r"\\([, ])")
_STRING_ESCAPED = re.compile(r'\\(["\\])')


def _key(text: str) -> str:
    return _ESCAPED.sub(r"\1", text) if "\\" in text else text


def _value(text: str, key: str) -> Value:
    if text[0] == '"':
        inner = text[1:-1]
        return _STRING_ESCAPED.sub(r"\1", inner) if "\\" in inner else inner
    last = text[-1]
    try:
        if last == "i":
            return int(text[:-1])
        if last == "u":
            number = int(text[:-1])
            if number < 0:
                raise ValueError
            return number
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        return float(text)
    except ValueError:
        raise InputError(f"field {key!r}: {text!r} is not a number, boolean or string") from None


def _fields(text: str, pos: int) -> tuple[dict[str, Value], int]:
    """The fields from ``pos``: (fields, where they end)."""
    out: dict[str, Value] = {}
    for m in _FIELD.finditer(text, pos):
        key, raw, sep = m.groups()
        if m.start() != pos or not key:
            break
        if "\\" in key:
            key = _ESCAPED.sub(r"\1", key)
        out[key] = _value(raw, key)
        pos = m.end()
        if sep != ",":
            return out, pos
    rest = text[pos:].split(",", 1)[0].split(" ", 1)[0]
    if text.count('"', pos) % 2:
        raise InputError("a string field value has no closing quote")
    name, eq, value = rest.partition("=")
    if not eq or not name:
        raise InputError(f"field {rest!r} is not key=value")
    raise InputError(f"field {_key(name)!r}: {value!r} is not a number, boolean or string")


def parse_line(line: str, precision: str = "ns") -> Point | None:
    """One line of line protocol; None for a blank or comment line."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    unit = PRECISIONS.get(precision)
    if unit is None:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    head = _HEAD.match(text)
    if head is None or head.end() >= len(text) or text[head.end()] != " ":
        raise InputError("a line is a measurement and tags, fields, and an optional time")
    parts = _PART.findall(head.group())
    first = head.group().split(",", 1)[0] if "\\" not in head.group() else parts[0]
    if not first or head.group().startswith(","):
        raise InputError("no measurement name")
    measurement = _MEASUREMENT_ESCAPED.sub(r"\1", first) if "\\" in first else first
    tags: dict[str, str] = {}
    for pair in parts[1:]:
        kv = _PAIR.match(pair)
        if kv is None:
            raise InputError(f"tag {pair!r} is not key=value")
        tags[_key(kv.group(1))] = _key(kv.group(2))
    start = head.end()
    while start < len(text) and text[start] == " ":
        start += 1
    if start >= len(text):
        raise InputError("a line is a measurement and tags, fields, and an optional time")
    fields, end = _fields(text, start)
    ts = None
    if end < len(text):
        when = _TIME.match(text, end)
        if when is None:
            rest = text[end:].strip()
            if " " in rest:
                raise InputError("a line is a measurement and tags, fields, and an optional time")
            raise InputError(f"time {rest!r} is not an integer")
        ts = int(when.group(1)) / unit
    return Point(measurement, tags, fields, ts)


__all__ = ["PRECISIONS", "Point", "Value", "parse_line"]
