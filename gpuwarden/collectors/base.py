"""The collector protocol: one ``collect()`` that returns a ``Batch``.

A collector never raises for one bad GPU or one endpoint down: it returns what it could read and
names the rest in ``Batch.problems``. It raises ``CollectorUnavailable`` only when the whole
source is missing (no NVML library, no nvidia-smi binary).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable
from urllib.parse import SplitResult, parse_qs, urlsplit

from gpuwarden.errors import ConfigError, InputError
from gpuwarden.telemetry import Batch


@runtime_checkable
class Collector(Protocol):
    #: The URL the collector was opened with, secrets removed; shown in logs and health.
    url: str

    def collect(self) -> Batch:
        """Read every GPU once."""
        ...

    def close(self) -> None: ...


def url_options(url: str, takes: Sequence[str]) -> tuple[SplitResult, dict[str, str]]:
    """A collector URL's parts and its options (the last of a repeated one; ``x=`` is ""):
    ``ConfigError`` naming an option not in ``takes`` and the ones the scheme takes."""
    parts = urlsplit(url)
    options = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise ConfigError(
            f"{url!r}: unknown option {', '.join(unknown)}; {parts.scheme}:// takes "
            + ", ".join(f"{t}=" for t in takes)
        )
    return parts, options


def iter_log_lines(path: str | os.PathLike[str]) -> Iterator[str]:
    """A log file's lines, plain or gzip, read as they come (a file larger than memory is
    fine), as ``read_log_text`` decodes them; ``InputError`` naming the file when it cannot be
    read or holds nothing."""
    try:
        with open(path, "rb") as fh:
            gzipped = fh.read(2) == b"\x1f\x8b"
        opener = gzip.open if gzipped else open
        with opener(path, "rt", encoding="utf-8-sig", errors="replace") as text:
            seen = False
            for line in text:
                seen = seen or bool(line.strip())
                yield line.rstrip("\r\n")
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    if not seen:
        raise InputError(f"{path}: the file is empty")


def read_log_bytes(path: str | os.PathLike[str], *, limit: int | None = None) -> bytes:
    """A log file's bytes, plain or gzip (the first ``limit`` of them, when given);
    ``InputError`` naming the file when it cannot be read or holds nothing."""
    try:
        with open(path, "rb") as fh:
            gzipped = fh.read(2) == b"\x1f\x8b"
        opener = gzip.open if gzipped else open
        with opener(path, "rb") as fh:
            raw = fh.read() if limit is None else fh.read(limit)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    if not raw.strip():
        raise InputError(f"{path}: the file is empty")
    return raw


def read_log_text(path: str | os.PathLike[str]) -> str:
    """A log file's text, plain or gzip, a UTF-8 byte-order mark dropped and undecodable bytes
    replaced; ``InputError`` naming the file when it cannot be read or holds nothing."""
    return read_log_bytes(path).decode("utf-8-sig", errors="replace")
