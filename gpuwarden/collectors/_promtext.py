"""A small, lenient parser for the Prometheus text exposition format (version 0.0.4).

Why not ``prometheus_client.parser``: it raises on the first line it cannot read, and real
dcgm-exporter output has such lines (``DCGM_FI_DEV_NAME{...} Tesla T4`` in some builds), which
would throw away a whole node's scrape for one string-valued metric we do not even use. This
parser skips a malformed line, keeps the rest, and reports what it skipped so the caller can
decide whether the body is garbage (nothing parsed) or merely has an odd line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

_METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
#: ``name{labels} value [timestamp_ms]``; the label block is taken up to its last ``}``.
_SAMPLE = re.compile(rf"^({_METRIC_NAME})(?:\{{(.*)\}})?[ \t]+(\S+)(?:[ \t]+(-?\d+))?[ \t]*$")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"n": "\n", "\\": "\\", '"': '"'}


class PromSample(NamedTuple):
    """One sample line: metric name, labels, value (NaN and +-Inf allowed), timestamp or None."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp_ms: int | None


class ParseResult(NamedTuple):
    samples: list[PromSample]
    #: Non-comment lines that could not be read, as they appeared (stripped).
    bad_lines: list[str]


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: _UNESCAPED.get(m.group(1), "\\" + m.group(1)), value)


def _parse_labels(block: str) -> dict[str, str] | None:
    """``a="1",b="x\\"y"`` -> dict; None when the block is not a well-formed label list."""
    labels: dict[str, str] = {}
    pos = 0
    end = len(block.rstrip())
    while pos < end:
        m = _LABEL.match(block, pos)
        if m is None:
            return None
        labels[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return labels


def parse_text(body: str) -> ParseResult:
    """Parse an exposition body. ``# HELP``/``# TYPE`` and other comments are skipped.

    Example line, as dcgm-exporter writes it::

        DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-...",device="nvidia0",Hostname="n1"} 41
    """
    samples: list[PromSample] = []
    bad: list[str] = []
    for raw in body.split("\n"):  # only \n ends a line; str.splitlines() also splits on \r, \x1e...
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m is None:
            bad.append(line)
            continue
        name, block, value_text, ts_text = m.groups()
        labels = _parse_labels(block) if block else {}
        if labels is None:
            bad.append(line)
            continue
        try:
            value = float(value_text)
        except ValueError:
            bad.append(line)
            continue
        samples.append(PromSample(name, labels, value, int(ts_text) if ts_text else None))
    return ParseResult(samples, bad)
