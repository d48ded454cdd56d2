"""Reading the TOML files a user writes for planning (launches, prices)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from gpuwarden.errors import InputError


def read_toml(path: str | Path) -> dict[str, Any]:
    """The parsed file; a missing, unreadable or malformed one is an ``InputError`` naming it
    (tomllib's message carries the line and column)."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from exc
