"""``sqlite://`` URLs: the file path and the query parameters the store takes."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from gpuwarden.errors import ConfigError

#: URL parameter -> SqliteStore keyword
URL_PARAMS = {
    "retention": "retention_s",
    "rollup_retention": "rollup_retention_s",
    "busy_timeout": "busy_timeout_s",
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, name: str) -> float:
    """``"14d"``, ``"36h"``, ``"90m"``, ``"600s"`` or plain seconds -> seconds."""
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"{name}={text!r} is not a duration such as 14d, 36h, 90m or 600")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def parse_url(url: str) -> tuple[str, dict[str, Any]]:
    """``sqlite:///relative.db``, ``sqlite:////absolute.db`` (SQLAlchemy's convention, which
    ``open_store`` follows for a bare path) or ``sqlite:///:memory:`` -> (path, keywords)."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        raise ConfigError(f"{url!r} is not a sqlite:// URL")
    if parts.netloc:
        raise ConfigError(
            f"{url!r}: a sqlite URL has no host; write sqlite:///relative.db "
            "or sqlite:////absolute/path.db"
        )
    path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    if not path:
        raise ConfigError(f"{url!r} names no database file")
    kwargs: dict[str, Any] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in URL_PARAMS:
            raise ConfigError(f"{url!r}: unknown parameter {key!r}; known: {', '.join(URL_PARAMS)}")
        kwargs[URL_PARAMS[key]] = parse_duration(value, key)
    return path, kwargs
