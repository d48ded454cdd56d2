"""Store URLs taken apart: ``sqlite://`` (the file path and its parameters) and ``influxdb://``
(the server, org, bucket and client settings)."""

from __future__ import annotations

from dataclasses import dataclass
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


#: ``influxdb://`` URL parameter -> (InfluxUrl attribute, default); ``org`` and ``bucket`` are
#: required and have none.
INFLUX_PARAMS: dict[str, tuple[str, float | None]] = {
    "org": ("org", None),
    "bucket": ("bucket", None),
    "timeout": ("timeout_s", 30.0),
    "batch": ("batch_lines", 5000),
    "retries": ("retries", 3),
    "chunk": ("chunk_s", 86400.0),
}
#: where the token is read from, first set wins (InfluxDB 1.8: ``user:password``)
INFLUX_TOKEN_ENV = ("GPUWARDEN_INFLUX_TOKEN", "INFLUX_TOKEN")
_INFLUX_SCHEMES = {"influxdb": "http", "influxdb+https": "https"}


@dataclass(frozen=True)
class InfluxUrl:
    """An ``influxdb://`` URL taken apart; ``base`` is the server's HTTP URL."""

    url: str
    base: str
    org: str
    bucket: str
    timeout_s: float = 30.0
    batch_lines: int = 5000
    retries: int = 3
    chunk_s: float = 86400.0


def parse_influx_url(url: str) -> InfluxUrl:
    """``influxdb://host:8086?org=ORG&bucket=BUCKET`` (``influxdb+https://`` for TLS) ->
    ``InfluxUrl``; the token is never in the URL (``INFLUX_TOKEN_ENV``)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{_shown(url)}: not a usable URL ({exc})") from exc
    if parts.scheme not in _INFLUX_SCHEMES:
        raise ConfigError(f"{_shown(url)} is not an influxdb:// or influxdb+https:// URL")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"{_shown(url)}: no credentials in the URL; put the token in "
            f"${INFLUX_TOKEN_ENV[0]} (InfluxDB 1.8: user:password)"
        )
    if not parts.hostname:
        raise ConfigError(f"{_shown(url)}: no host (write influxdb://HOST:8086?org=...&bucket=...)")
    values: dict[str, Any] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in INFLUX_PARAMS:
            raise ConfigError(
                f"{_shown(url)}: unknown parameter {key!r}; known: {', '.join(INFLUX_PARAMS)}"
            )
        attr, default = INFLUX_PARAMS[key]
        if default is None:
            values[attr] = value
        elif key in ("timeout", "chunk"):
            values[attr] = parse_duration(value, key)
        else:
            values[attr] = _count(value, key, url, allow_zero=key == "retries")
    for key in ("org", "bucket"):
        if not values.get(key):
            raise ConfigError(
                f"{_shown(url)}: give {key}= (influxdb://HOST:8086?org=...&bucket=...)"
            )
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    base = f"{_INFLUX_SCHEMES[parts.scheme]}://{host}:{port or 8086}{parts.path.rstrip('/')}"
    return InfluxUrl(url=url, base=base, **values)


def _count(text: str, key: str, url: str, *, allow_zero: bool) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{_shown(url)}: {key} must be a whole number, not {text!r}")
    return value


def _shown(url: str) -> str:
    """``url`` with any password in it masked, for messages."""
    head, sep, rest = url.partition("://")
    if "@" in rest.split("/", 1)[0]:
        userinfo, _, host = rest.partition("@")
        user = userinfo.split(":", 1)[0]
        return f"{head}{sep}{user}:***@{host}"
    return url
