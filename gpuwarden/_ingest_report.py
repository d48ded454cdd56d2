"""The bad-lines report: every line ingest did not store, as ``FILE:LINE: reason``, one a line.

The terminal shows the first few; the report holds them all, written as they are found, so a
file with a million bad lines costs no memory. ``gpuwarden ingest`` writes it next to each
input (``<input>.bad-lines.txt``) unless ``--bad-lines FILE`` names one file for them all.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

#: Appended to an input's name for its report when no report file is named.
SUFFIX = ".bad-lines.txt"


def report_path(source: str | os.PathLike[str]) -> Path:
    """Where the report of ``source`` goes by default: beside it."""
    return Path(f"{os.fspath(source)}{SUFFIX}")


class BadLineReport:
    """A report file, opened (and emptied) at the first bad line; ``sink(source)`` gives the
    callback ingest calls with each bad line of ``source``.

    A report that cannot be written does not stop the load: ``error`` says why, and the lines
    are still counted in ``written``'s place by ``seen``."""

    def __init__(self, path: str | os.PathLike[str], *, always: bool = False) -> None:
        self.path = Path(path)
        self.seen = 0
        self.error: str | None = None
        self._fh: TextIO | None = None
        if always:  # a report the user named exists after the run, empty when all went well
            self._open()

    def _open(self) -> None:
        try:
            self._fh = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"

    def sink(self, source: str | os.PathLike[str]) -> Callable[[int, str], None]:
        name = os.fspath(source)

        def write(line: int, reason: str) -> None:
            self.seen += 1
            if self._fh is None and self.error is None:
                self._open()
            if self._fh is not None:
                try:
                    self._fh.write(f"{name}:{line}: {reason}\n")
                except OSError as exc:  # a full disk: keep loading, say so at the end
                    self.error = f"cannot write {self.path}: {exc.strerror or exc}"
                    self._fh.close()
                    self._fh = None

        return write

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


__all__ = ["SUFFIX", "BadLineReport", "report_path"]
