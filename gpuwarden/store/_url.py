"""``sqlite://`` URLs: the file path and the query parameters the store takes."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from gpuwarden.config import parse_duration
from gpuwarden.errors import ConfigError

#: URL parameter -> SqliteStore keyword
URL_PARAMS = {
    "retention": "retention_s",
    "rollup_retention": "rollup_retention_s",
    "busy_timeout": "busy_timeout_s",
}


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
