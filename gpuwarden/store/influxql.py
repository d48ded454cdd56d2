"""GPU history read from InfluxDB 1.x over InfluxQL, where Telegraf has been writing it.

    source = InfluxQLSource("influxql://influx:8086?db=telegraf")          rp: the default
    source = InfluxQLSource("influxql+https://user:pw@influx:8086?db=telegraf&rp=autogen")
    for point in source.points("nvidia_smi", start, end): ...

Read-only: ``gpuwarden ingest --influxql URL`` copies what Telegraf's ``nvidia_smi`` input and
its prometheus input's dcgm-exporter series hold (``collectors.telegraf`` maps them) into a
gpuwarden store. Credentials: ``user:password@`` in the URL (masked wherever the URL is shown),
or ``$GPUWARDEN_INFLUX_TOKEN`` sent as InfluxDB 1.8's ``Authorization: Token user:password``.
URL parameters: ``db`` (required), ``rp`` (retention policy), ``timeout`` (per request, default
30 s), ``retries`` (default 3; refused connections, timeouts, 5xx and 429 are tried again).

Each query reads one measurement over one time chunk, ``GROUP BY *`` so the tags come back
apart from the fields, with ``epoch=ns`` and InfluxDB's chunked answer (a JSON document per
10,000 rows), so a long range never has to fit in one response.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gpuwarden.collectors.lineproto import Point
from gpuwarden.errors import ConfigError, StoreError
from gpuwarden.store._remote import (
    RemoteHttp,
    mask,
    parse_remote_url,
    positive,
    token_header,
)

SCHEMES = {"influxql": ("http", 8086), "influxql+https": ("https", 8086)}
TOKEN_ENV = "GPUWARDEN_INFLUX_TOKEN"
#: Rows per chunk of InfluxDB's chunked answer.
CHUNK_ROWS = 10_000


def _quoted(name: str) -> str:
    """An InfluxQL identifier in double quotes."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


class InfluxQLSource:
    """One InfluxDB 1.x database (see the module docstring). ``client``: a test seam."""

    def __init__(self, url: str, *, client: Any = None) -> None:
        parsed = parse_remote_url(url, schemes=SCHEMES, params=("db", "rp", "timeout", "retries"))
        self.shown = parsed.shown
        self.db = parsed.params.get("db", "")
        if not self.db:
            raise ConfigError(
                f"{self.shown}: say which database with ?db=NAME (Telegraf's: telegraf)"
            )
        self.rp = parsed.params.get("rp", "")
        timeout = positive(parsed.params, "timeout", 30.0, self.shown)
        retries = int(positive(parsed.params, "retries", 3, self.shown))
        self._http = RemoteHttp(
            parsed.base,
            what="InfluxDB",
            shown=self.shown,
            auth=parsed.auth,
            headers=token_header(TOKEN_ENV, "Token") if parsed.auth is None else None,
            timeout_s=timeout,
            retries=retries,
            client=client,
        )

    @staticmethod
    def shown_url(url: str) -> str:
        """``url`` with its password masked, for messages."""
        return mask(url)

    def _from(self, measurement: str) -> str:
        """``"rp"."measurement"``, or the measurement alone in the default policy (the
        database is the request's ``db``); a measurement written ``/regex/`` stays a regex."""
        rp = f"{_quoted(self.rp)}." if self.rp else ""
        regex = measurement.startswith("/") and measurement.endswith("/") and len(measurement) > 1
        return f"{rp}{measurement if regex else _quoted(measurement)}"

    def _edge(self, measurement: str, start: float, end: float, order: str) -> float | None:
        where = f"WHERE time >= {round(start * 1e9)} AND time < {round(end * 1e9)}"
        q = f"SELECT * FROM {self._from(measurement)} {where} ORDER BY time {order} LIMIT 1"
        times = [
            row[0]
            for result in self._query(q)
            for series in result.get("series", [])
            for row in series.get("values", [])
        ]
        if not times:
            return None
        return (min(times) if order == "ASC" else max(times)) / 1e9

    def first(self, measurement: str, start: float, end: float) -> float | None:
        """The time of ``measurement``'s first point in start <= time < end, or None."""
        return self._edge(measurement, start, end, "ASC")

    def span(self, measurement: str, start: float, end: float) -> tuple[float, float] | None:
        """The first and last time of ``measurement``'s points in start <= time < end, or
        None when it has none there (two one-row queries)."""
        first = self.first(measurement, start, end)
        last = self._edge(measurement, start, end, "DESC") if first is not None else None
        return None if first is None or last is None else (first, last)

    def _query(self, q: str, *, chunked: bool = False) -> list[dict[str, Any]]:
        """The results of ``q`` (every chunk's), or a ``StoreError`` naming InfluxDB's error."""
        params = {"db": self.db, "q": q, "epoch": "ns"}
        if chunked:
            params |= {"chunked": "true", "chunk_size": str(CHUNK_ROWS)}

        def parse(response: Any) -> list[dict[str, Any]]:
            out = []
            for line in response.text.splitlines():
                if line.strip():
                    out.extend(json.loads(line).get("results", []))
            return out

        results = self._http.fetch("GET", "/query", parse, params=params)
        for result in results:
            if "error" in result:
                raise StoreError(f"InfluxDB at {self.shown}: {result['error']}")
        return results

    def measurements(self) -> list[str]:
        """Every measurement of the database; a database the server does not have is a
        ``StoreError`` naming those it has."""
        databases = []
        for result in self._query("SHOW DATABASES"):
            for series in result.get("series", []):
                databases += [str(row[0]) for row in series.get("values", [])]
        if self.db not in databases:
            have = ", ".join(d for d in databases if not d.startswith("_")) or "none"
            raise StoreError(
                f"InfluxDB at {self.shown} has no database {self.db!r} (it has: {have})"
            )
        names = []
        for result in self._query("SHOW MEASUREMENTS"):
            for series in result.get("series", []):
                names += [str(row[0]) for row in series.get("values", [])]
        return names

    def field_keys(self, measurement: str) -> list[str]:
        """The field keys of ``measurement``."""
        keys = []
        for result in self._query(f"SHOW FIELD KEYS FROM {self._from(measurement)}"):
            for series in result.get("series", []):
                keys += [str(row[0]) for row in series.get("values", [])]
        return keys

    def points(
        self, measurement: str, start: float, end: float, fields: list[str] | None = None
    ) -> Iterator[Point]:
        """The points of ``measurement`` with start <= time < end (Unix seconds): every field,
        or only ``fields``."""
        shown = ", ".join(map(_quoted, fields)) if fields else "*"
        q = (
            f"SELECT {shown} FROM {self._from(measurement)} WHERE time >= {round(start * 1e9)} "
            f"AND time < {round(end * 1e9)} GROUP BY *"
        )
        for result in self._query(q, chunked=True):
            for series in result.get("series", []):
                tags = {k: str(v) for k, v in (series.get("tags") or {}).items() if v}
                columns = series["columns"]
                for row in series.get("values", []):
                    values = dict(zip(columns, row, strict=True))
                    when = values.pop("time")
                    held = {k: v for k, v in values.items() if v is not None}
                    yield Point(str(series.get("name", measurement)), tags, held, when / 1e9)

    def close(self) -> None:
        self._http.close()


__all__ = ["CHUNK_ROWS", "SCHEMES", "TOKEN_ENV", "InfluxQLSource"]
