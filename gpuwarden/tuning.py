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

**pyarrow's memory pool.** pandas keeps string columns in pyarrow, whose default allocator
(mimalloc, in the pyarrow 26 measured here) reserves its arenas a GiB at a time with the same
advice: the report's read of a 10,000-GPU week from VictoriaMetrics spent 1.7-2.5 s in the
kernel for 1.5-2 s of its own work, against 0.2-0.4 s through the C library's allocator. The
setting ``arrow_memory_pool``:

- ``auto`` (default): the C library's allocator (``system``) where ``defrag`` stalls,
  pyarrow's default elsewhere;
- ``system``, ``mimalloc``, ``jemalloc``: that one (where this pyarrow was built with it).

``ARROW_DEFAULT_MEMORY_POOL`` in the environment, pyarrow's own switch, wins over the setting.

**Scoring threads.** The trees predict in one OpenMP parallel region per tree, 300 regions for
each batch of GPUs. Where the cores are busy (a shared host, or a container whose CPU quota is
below the cores it sees), each region waits for threads the kernel has not scheduled. On the
2-core development machine beside two processes writing to /dev/null as `yes` does, one risk
pass over 32 GPUs took 253 ms with OpenMP's default threads against 26 ms with one, over 10,000
GPUs 255 ms against 155 ms (means of 5, `bench/bench_score_threads.py`); the demo's risk loop
(24 hourly passes over 32 GPUs, with their reasons) took 160 s against 22 s. On idle cores one
thread is slower, 108 ms against 69 ms at 10,000 GPUs, a few milliseconds of it the limit's
own cost. The setting ``score_threads``: OpenMP threads while ``score``, ``serve`` and their
backtests score (the risk and its reasons), default 1; 0 leaves OpenMP's default. Training is
not limited. ``OMP_NUM_THREADS`` in the environment, OpenMP's own switch, wins over the setting.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpuwarden.errors import ConfigError

logger = logging.getLogger("gpuwarden.tuning")

DEFRAG = Path("/sys/kernel/mm/transparent_hugepage/defrag")
#: THP defrag modes in which a page fault in an madvise'd range compacts memory synchronously.
STALLING = {"madvise", "defer+madvise"}
CHOICES = ("auto", "on", "off")
POOLS = ("auto", "system", "mimalloc", "jemalloc")
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
OMP_ENV = "OMP_NUM_THREADS"

#: OpenMP threads for scoring (``apply_score_threads``); 0: OpenMP's own default.
_score_threads = 1


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


def want_arrow_pool(setting: str, defrag: str | None) -> str | None:
    """The pyarrow memory pool to use; None: pyarrow's default."""
    choice = (setting or "auto").strip().lower()
    if choice not in POOLS:
        raise ConfigError(f"arrow_memory_pool must be one of {', '.join(POOLS)}, not {setting!r}")
    if choice == "auto":
        return "system" if defrag in STALLING else None
    return choice


def apply_arrow_pool(setting: str, *, defrag_path: Path = DEFRAG) -> str | None:
    """Make ``setting``'s pool pyarrow's default unless ``ARROW_DEFAULT_MEMORY_POOL`` is set;
    returns the pool chosen (None: nothing done). Before pyarrow is imported this sets that
    variable, which pyarrow reads when it first allocates (a command that never loads pandas
    pays no import for it); after, the pool is swapped in."""
    if ARROW_POOL_ENV in os.environ:
        return None
    pool = want_arrow_pool(setting, defrag_mode(defrag_path))
    if pool is None:
        return None
    if "pyarrow" in sys.modules:
        import pyarrow as pa

        try:
            pa.set_memory_pool(getattr(pa, f"{pool}_memory_pool")())
        except NotImplementedError as exc:  # a pyarrow built without it
            raise ConfigError(f"arrow_memory_pool {pool}: not in this pyarrow ({exc})") from exc
    else:
        os.environ[ARROW_POOL_ENV] = pool
    logger.debug("pyarrow memory pool %s (THP defrag: %s)", pool, defrag_mode(defrag_path))
    return pool


def apply_score_threads(setting: Any) -> int:
    """Put the ``score_threads`` setting in force (0: OpenMP's default); returns it. Refuses a
    negative or non-integer value, naming the setting."""
    global _score_threads
    try:
        n = int(setting)
    except (TypeError, ValueError):
        n = -1
    if n < 0:
        raise ConfigError(f"score_threads must be 0 (OpenMP's default) or more, not {setting!r}")
    _score_threads = n
    return n


@contextmanager
def scoring_threads() -> Iterator[None]:
    """OpenMP limited to the ``score_threads`` setting inside the block, unless
    ``OMP_NUM_THREADS`` is set or the setting is 0. Costs a few milliseconds a block: wrap a
    whole scoring pass, not each call."""
    if _score_threads <= 0 or os.environ.get(OMP_ENV):
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=_score_threads, user_api="openmp"):
        yield


def apply(settings: Mapping[str, Any]) -> str:
    """Apply the settings (``numpy_huge_pages``, ``arrow_memory_pool``, ``score_threads``) as
    the CLI does at start; what was done, in words (a benchmark's header)."""
    huge = apply_huge_pages(str(settings.get("numpy_huge_pages") or "auto"))
    pool = apply_arrow_pool(str(settings.get("arrow_memory_pool") or "auto"))
    threads = apply_score_threads(settings.get("score_threads", 1))
    chosen = pool or os.environ.get(ARROW_POOL_ENV) or "pyarrow's default"
    said = (
        f"{os.environ[OMP_ENV]} ({OMP_ENV})"
        if os.environ.get(OMP_ENV)
        else (str(threads) if threads else "OpenMP's default")
    )
    return (
        f"numpy huge-page advice: {huge_pages_said(huge)}; pyarrow memory pool: {chosen}; "
        f"scoring threads: {said}"
    )


def _numpy_switch():  # type: ignore[no-untyped-def]
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray  # type: ignore[no-redef]
    return getattr(multiarray, "_set_madvise_hugepage", None)
