"""Time-series stores, chosen by URL.

    open_store("sqlite:////var/lib/gpuwarden/gpuwarden.db")   the default: one file, no server
    open_store("sqlite:///relative/path.db")                   three slashes: relative (as SQLAlchemy)
    open_store("sqlite:///:memory:")                          for tests
    open_store("influxdb://influx:8086?org=ops&bucket=gpu")   InfluxDB 2.x (token: $GPUWARDEN_INFLUX_TOKEN)
    open_store("prometheus+http://prometheus:9090")            read-only: Prometheus, Thanos, Mimir
    open_store("victoriametrics://vm:8428")                    reads and writes

docs/store.md lists every scheme and its parameters. Third-party stores register a
``gpuwarden.stores`` entry point naming a callable ``(url: str) -> Store``.
"""

from __future__ import annotations

from gpuwarden.plugins import open_by_scheme
from gpuwarden.store.base import Store

BUILTIN: dict[str, str] = {
    "sqlite": "gpuwarden.store.sqlite:SqliteStore.from_url",
    "influxdb": "gpuwarden.store.influxdb:InfluxStore.from_url",
    "influxdb+https": "gpuwarden.store.influxdb:InfluxStore.from_url",
    "prometheus": "gpuwarden.store.prometheus:PrometheusStore.from_url",
    "prometheus+http": "gpuwarden.store.prometheus:PrometheusStore.from_url",
    "prometheus+https": "gpuwarden.store.prometheus:PrometheusStore.from_url",
    "victoriametrics": "gpuwarden.store.victoriametrics:VictoriaMetricsStore.from_url",
    "victoriametrics+http": "gpuwarden.store.victoriametrics:VictoriaMetricsStore.from_url",
    "victoriametrics+https": "gpuwarden.store.victoriametrics:VictoriaMetricsStore.from_url",
}


def open_store(url: str) -> Store:
    """Open the store for ``url``. A bare path is taken as a SQLite file."""
    if "://" not in url:
        url = "sqlite:///" + url
    store: Store = open_by_scheme(url, BUILTIN, group="gpuwarden.stores", what="store")
    return store


def sqlite_file(url: str) -> str | None:
    """The file a SQLite store URL (or a bare path) names; None for ``:memory:`` and for any
    other scheme."""
    from gpuwarden.store._url import parse_url

    full = url if "://" in url else "sqlite:///" + url
    if not full.startswith("sqlite:"):
        return None
    path, _ = parse_url(full)
    return None if path == ":memory:" else path


__all__ = ["Store", "open_store", "sqlite_file", "BUILTIN"]
