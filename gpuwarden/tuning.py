"""Process tuning gpuwarden applies to itself at start (docs/scale.md#tuning).

**Transparent huge pages.** numpy advises the kernel to back every large array with huge pages
(``madvise(MADV_HUGEPAGE)``). Where the kernel's THP ``defrag`` mode is ``madvise`` (a common
default, and this project's development machine), each such page fault may compact memory
first, in the faulting process' own time: the first grid of a 2,048-GPU week took 5.8 CPU s
(5.4 in the kernel) against 1.17 s without the advice. The setting ``numpy_huge_pages``:

- ``auto`` (default): no advice where ``defrag`` stalls on it (``madvise``,
  ``defer+madvise``), numpy's default elsewhere;
- ``on`` / ``off``: numpy's advice always / never.

``NUMPY_MADVISE_HUGEPAGE`` in the environment, numpy's own switch, wins over the setting. No
result changes, only where memory comes from.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from gpuwarden.errors import ConfigError

logger = logging.getLogger("gpuwarden.tuning")

DEFRAG = Path("/sys/kernel/mm/transparent_hugepage/defrag")
#: THP defrag modes in which a page fault in an madvise'd range compacts memory synchronously.
STALLING = {"madvise", "defer+madvise"}
CHOICES = ("auto", "on", "off")


def defrag_mode(path: Path = DEFRAG) -> str | None:
    """The kernel's selected THP defrag mode (the bracketed word), None where not readable."""
    try:
        text = path.read_text()
    except OSError:
        return None
    chosen = [w.strip("[]") for w in text.split() if w.startswith("[")]
    return chosen[0] if chosen else None


def want_huge_pages(setting: str, defrag: str | None) -> bool | None:
    """True/False: numpy's advice on/off; None: leave numpy as it is."""
    choice = (setting or "auto").strip().lower()
    if choice not in CHOICES:
        raise ConfigError(f"numpy_huge_pages must be one of {', '.join(CHOICES)}, not {setting!r}")
    if choice == "auto":
        return False if defrag in STALLING else None
    return choice == "on"


def apply_huge_pages(setting: str, *, defrag_path: Path = DEFRAG) -> bool | None:
    """Apply ``setting`` to numpy unless ``NUMPY_MADVISE_HUGEPAGE`` is set; returns what was
    applied (None: nothing)."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return None
    want = want_huge_pages(setting, defrag_mode(defrag_path))
    if want is None:
        return None
    switch = _numpy_switch()
    if switch is None:  # a numpy without the runtime switch: leave it
        return None
    switch(want)
    logger.debug("numpy huge-page advice %s (THP defrag: %s)", "on" if want else "off",
                 defrag_mode(defrag_path))  # fmt: skip
    return want


def huge_pages_said(applied: bool | None) -> str:
    """What ``apply_huge_pages`` did, for a benchmark's header."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return f"NUMPY_MADVISE_HUGEPAGE={os.environ['NUMPY_MADVISE_HUGEPAGE']} (environment)"
    if applied is None:
        return f"numpy's default (THP defrag: {defrag_mode()})"
    return f"{'on' if applied else 'off'} (numpy_huge_pages; THP defrag: {defrag_mode()})"


def _numpy_switch():  # type: ignore[no-untyped-def]
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray  # type: ignore[no-redef]
    return getattr(multiarray, "_set_madvise_hugepage", None)
