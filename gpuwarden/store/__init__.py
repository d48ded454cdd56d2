"""Time-series stores, chosen by URL.

    open_store("sqlite:////var/lib/gpuwarden/gpuwarden.db")   the default: one file, no server
    open_store("sqlite:///relative/path.db")                   three slashes: relative (as SQLAlchemy)
    open_store("sqlite:///:memory:")                          for tests

InfluxDB and Prometheus-compatible backends plug in the same way. Third-party stores register a
``gpuwarden.stores`` entry point naming a callable ``(url: str) -> Store``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from urllib.parse import urlsplit

from gpuwarden.errors import UnknownSchemeError
from gpuwarden.store.base import Store

BUILTIN: dict[str, str] = {
    "sqlite": "gpuwarden.store.sqlite:SqliteStore.from_url",
}


def _load(target: str) -> Callable[[str], Store]:
    module_name, _, attr = target.partition(":")
    obj: object = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def open_store(url: str) -> Store:
    """Open the store for ``url``. A bare path is taken as a SQLite file."""
    if "://" not in url:
        url = "sqlite:///" + url
    scheme = urlsplit(url).scheme
    if scheme in BUILTIN:
        return _load(BUILTIN[scheme])(url)
    for ep in entry_points(group="gpuwarden.stores"):
        if ep.name == scheme:
            return ep.load()(url)
    known = ", ".join(sorted(BUILTIN))
    raise UnknownSchemeError(f"no store for {url!r}: scheme must be one of {known}")


__all__ = ["Store", "open_store", "BUILTIN"]
