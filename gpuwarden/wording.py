"""Counts and figures as people read them, in every command's output and the report.

counted(1, "node")         "1 node"            (never "1 nodes")
counted(10000, "GPU")      "10,000 GPUs"
plural(2, "was", "were")   "were"
figure(1_680_000.0)        "1,680,000"          (never 1.68e+06)
"""

from __future__ import annotations

import math


def number(x: float | None) -> str:
    """A count or amount: thousands separated, one decimal at most ("n/a" when unknown)."""
    if x is None:
        return "n/a"
    return f"{x:,.1f}".rstrip("0").rstrip(".") if x != int(x) else f"{int(x):,}"


def plural(n: float | None, one: str, many: str | None = None) -> str:
    """The form of a word that agrees with the count ``n``: ``plural(1, "GPU")`` is "GPU",
    ``plural(5, "GPU")`` "GPUs", ``plural(2, "journal entry")`` "journal entries",
    ``plural(2, "was", "were")`` "were". Only exactly one is singular (0 GPUs, 1.5 GPUs); an
    unknown count (None) is plural."""
    if n == 1:
        return one
    if many is not None:
        return many
    if one.endswith("y") and one[-2:-1].isalpha() and one[-2] not in "aeiouAEIOU":
        return one[:-1] + "ies"
    return one + "s"


def counted(n: float | None, one: str, many: str | None = None) -> str:
    """A count and its noun: ``counted(1, "GPU")`` is "1 GPU", ``counted(10000, "GPU")``
    "10,000 GPUs", ``counted(3, "state transition")`` "3 state transitions"."""
    return f"{number(n)} {plural(n, one, many)}"


def figure(x: float | None) -> str:
    """A figure as tables and code-written lines show it: thousands separated, up to three
    decimals, never in exponent form (``:g`` wrote a 10,000-GPU fleet's week of 1,680,000
    GPU-hours as 1.68e+06); None is blank."""
    if x is None:
        return ""
    if not math.isfinite(x):
        return str(x)
    s = f"{x:,.3f}".rstrip("0").rstrip(".")
    return "0" if s == "-0" else s


__all__ = ["counted", "figure", "number", "plural"]
