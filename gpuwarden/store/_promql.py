"""PromQL text for gpuwarden's reads: selectors, half-open windows, server-side rollups.

Every window gpuwarden reads is half open, ``[t - d, t)``, as the SQLite store's are. A range
selector evaluated at ``t`` is not: Prometheus 2.x includes both ends, VictoriaMetrics (and
Prometheus 3) leaves out the left one. So a window is written for the server it goes to,
``x[<d, less 1 ms if closed>] offset 1ms``: at millisecond resolution, exactly ``[t - d, t)``
on both (``Dialect``, found by asking the server, ``_promapi.PromApi.dialect``).

The hourly rollups run on the server, one query per chunk of GPUs for every field:

    counters   last_over_time   the last value read in the bucket (increases are taken later,
                                reset-aware, as for SQLite's rollups)
    gauges     avg_over_time    and max_over_time for ``<field>_max``
    bitmasks   the OR of the bits seen: per bit, max_over_time over a subquery that looks at
               each scrape interval once (PromQL has no bitwise OR over time)

each wrapped in ``max by (<GPU labels>)`` (``avg by`` for means), which drops what is not the
GPU (``instance``, ``job``, a pod) and merges a GPU's series split by a relabel.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuwarden.store._schema import rollup_agg
from gpuwarden.store._series import GPU_LABELS
from gpuwarden.telemetry import FIELDS_BY_NAME

#: The tag the field union puts on each result series.
FIELD_LABEL = "gpuwarden_field"
#: Bits of a bitmask field that are ORed (``clock_event_reasons``: NVML's nine reasons).
BITMASK_BITS = 9
#: what ``max by`` keeps: the labels that say which GPU
GPU_BY = ", ".join(GPU_LABELS)
_REGEX_SPECIAL = re.compile(r"([.+*?()|\[\]{}^$\\])")
_MAX = "_max"


@dataclass(frozen=True)
class Dialect:
    """What the server's PromQL does: ``closed`` range selectors include their left end
    (Prometheus 2.x, Thanos, Mimir); ``tfuncs``: it has ``tfirst_over_time`` and
    ``tlast_over_time`` (VictoriaMetrics)."""

    closed: bool = True
    tfuncs: bool = False

    def range(self, seconds: float) -> str:
        """A range of ``seconds`` meant as ``(t - seconds, t]``, in this server's terms."""
        ms = int(round(seconds * 1000)) - (1 if self.closed else 0)
        # PromQL has no empty range: a window under 2 ms reads 1 ms (callers drop what is
        # outside their window)
        return f"{max(1, ms)}ms"

    def window(self, selector: str, seconds: float) -> str:
        """``selector`` over ``[t - seconds, t)``."""
        return f"{selector}[{self.range(seconds)}] offset 1ms"


def quote(text: str) -> str:
    """A PromQL string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def regex_alternatives(values: Iterable[str]) -> str:
    """An RE2 alternation matching exactly ``values``."""
    return "|".join(_REGEX_SPECIAL.sub(r"\\\1", v) for v in values)


def matcher(label: str, values: Sequence[str]) -> str:
    """``label="v"`` or ``label=~"v1|v2"``."""
    if len(values) == 1:
        return f"{label}={quote(values[0])}"
    return f"{label}=~{quote(regex_alternatives(sorted(set(values))))}"


def selector(names: Sequence[str], matchers: Sequence[str] = ()) -> str:
    """``name{matchers}``, or ``{__name__=~"a|b", matchers}`` for several names."""
    inner = ", ".join(matchers)
    if len(names) == 1:
        return f"{names[0]}{{{inner}}}"
    head = f"__name__=~{quote(regex_alternatives(names))}"
    return f"{{{head}{', ' + inner if inner else ''}}}"


def base_field(name: str) -> str:
    """``mem_temp_c_max`` -> ``mem_temp_c``; a catalogue field is itself."""
    return name if name in FIELDS_BY_NAME else name.removesuffix(_MAX)


def rollup(
    name: str,
    matchers: Sequence[str],
    width_s: float,
    dialect: Dialect,
    bit_step_s: int,
    *,
    partial: bool = False,
) -> str:
    """The rollup of field ``name`` (or its ``<field>_max`` peak) over ``[t - width_s, t)``,
    one series per GPU, tagged with ``FIELD_LABEL``. ``partial``: ``t`` need not be a
    multiple of ``bit_step_s`` (the bucket ``end`` cuts short)."""
    field = FIELDS_BY_NAME[base_field(name)]
    kind = "max" if name != field.name else rollup_agg(field)
    agg = "avg" if kind == "mean" else "max"
    names = [field.dcgm, *field.dcgm_aliases]
    # one expression per name (a GPU exported under both, mid-upgrade, must not collide),
    # each selecting only the chunk's GPUs
    parts = [
        _rollup_of(selector([n], matchers), kind, width_s, dialect, bit_step_s, partial)
        for n in names
    ]
    if len(parts) == 1:
        expr = parts[0]
    else:
        tag = quote("gpuwarden_metric")
        tagged = [
            f"label_replace({p}, {tag}, {quote(n)}, {quote('')}, {quote('')})"
            for n, p in zip(names, parts, strict=True)
        ]
        expr = f"{agg} by ({GPU_BY}) ({' or '.join(tagged)})"
    return f"label_replace({expr}, {quote(FIELD_LABEL)}, {quote(name)}, {quote('')}, {quote('')})"


def _rollup_of(
    sel: str, kind: str, width_s: float, dialect: Dialect, bit_step_s: int, partial: bool
) -> str:
    if kind == "or":
        return " + ".join(
            _bit(sel, b, width_s, dialect, bit_step_s, partial) for b in range(BITMASK_BITS)
        )
    fn = {"last": "last_over_time", "mean": "avg_over_time", "max": "max_over_time"}[kind]
    agg = "avg" if kind == "mean" else "max"
    return f"{agg} by ({GPU_BY}) ({fn}({dialect.window(sel, width_s)}))"


def _bit(sel: str, bit: int, width_s: float, dialect: Dialect, step_s: int, partial: bool) -> str:
    """``2**bit`` where bit ``bit`` of a bitmask was set in any sample of ``[t - width_s,
    t)``, else 0. A subquery steps through the window one ``step_s`` (at most the scrape
    interval) at a time, each step seeing only its own ``[s - step_s, s)``; when ``t`` is not
    on a step, the samples after the last step are looked at as well."""
    value = 1 << bit

    def flag(window: str) -> str:
        return f"(floor(last_over_time({window}) / {value}) % 2)"

    sub = f"max_over_time({flag(dialect.window(sel, step_s))}[{dialect.range(width_s)}:{step_s}s])"
    if partial:
        tail = flag(dialect.window(sel, min(step_s, width_s)))
        tag = quote("gpuwarden_part")
        sub = (
            f"label_replace({sub}, {tag}, {quote('steps')}, {quote('')}, {quote('')}) or "
            f"label_replace({tail}, {tag}, {quote('tail')}, {quote('')}, {quote('')})"
        )
    return f"{value} * max by ({GPU_BY}) ({sub})"


def union(parts: Sequence[str]) -> str:
    """Several tagged expressions as one query."""
    return " or ".join(f"({p})" for p in parts)


def presence(names: Sequence[str], matchers: Sequence[str] = ()) -> str:
    """A selector of the series that say a GPU reported (``names``: dcgm-exporter metrics)."""
    return selector(names, matchers)


__all__ = [
    "FIELD_LABEL",
    "GPU_BY",
    "Dialect",
    "base_field",
    "matcher",
    "quote",
    "rollup",
    "selector",
    "union",
]
