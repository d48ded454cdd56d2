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

from dataclasses import dataclass

from gpuwarden.errors import InputError

#: Seconds per unit of each time precision InfluxDB's write API takes.
PRECISIONS: dict[str, float] = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
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


def _split(text: str, sep: str, *, quotes: bool = False) -> list[str]:
    """``text`` cut at each ``sep`` that no backslash escapes (nor, with ``quotes``, that sits
    inside a double-quoted string); the escapes stay for ``_unescape``."""
    out, start, i, quoted = [], 0, 0, False
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if quotes and c == '"':
            quoted = not quoted
        elif c == sep and not quoted:
            out.append(text[start:i])
            start = i + 1
        i += 1
    if quoted:
        raise InputError("a string field value has no closing quote")
    out.append(text[start:])
    return out


def _unescape(text: str, chars: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in chars:
            out.append(text[i + 1])
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _value(text: str, key: str) -> Value:
    if not text:
        raise InputError(f"field {key!r} has no value")
    if text[0] == '"':
        if len(text) < 2 or text[-1] != '"':
            raise InputError(f"field {key!r}: a string value has no closing quote")
        return _unescape(text[1:-1], '"\\')
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    try:
        if text[-1] in "iu":
            number = int(text[:-1])
            if text[-1] == "u" and number < 0:
                raise ValueError
            return number
        return float(text)
    except ValueError:
        raise InputError(f"field {key!r}: {text!r} is not a number, boolean or string") from None


def parse_line(line: str, precision: str = "ns") -> Point | None:
    """One line of line protocol; None for a blank or comment line."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    parts = [p for p in _split(text, " ", quotes=True) if p]
    if len(parts) not in (2, 3):
        raise InputError("a line is a measurement and tags, fields, and an optional time")
    head = _split(parts[0], ",")
    measurement = _unescape(head[0], ", ")
    if not measurement:
        raise InputError("no measurement name")
    tags: dict[str, str] = {}
    for pair in head[1:]:
        kv = _split(pair, "=")
        if len(kv) != 2 or not kv[0] or not kv[1]:
            raise InputError(f"tag {pair!r} is not key=value")
        tags[_unescape(kv[0], ",= ")] = _unescape(kv[1], ",= ")
    fields: dict[str, Value] = {}
    for pair in _split(parts[1], ",", quotes=True):
        kv = _split(pair, "=", quotes=True)
        if len(kv) != 2 or not kv[0]:
            raise InputError(f"field {pair!r} is not key=value")
        key = _unescape(kv[0], ",= ")
        fields[key] = _value(kv[1], key)
    ts = None
    if len(parts) == 3:
        try:
            ts = int(parts[2]) * PRECISIONS[precision]
        except ValueError:
            raise InputError(f"time {parts[2]!r} is not an integer") from None
    return Point(measurement, tags, fields, ts)


__all__ = ["PRECISIONS", "Point", "Value", "parse_line"]
