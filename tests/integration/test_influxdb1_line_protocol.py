"""Telegraf's line protocol fixtures (tests/data/telegraf) through a real InfluxDB 1.x
(Debian's ``influxdb``): the server takes every line, and what it stored is what gpuwarden's
reader read, point for point, tag for tag, field for field (an independent parser of the same
protocol; Telegraf writes these files for InfluxDB)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from gpuwarden.collectors.lineproto import Point, parse_line

if TYPE_CHECKING:
    from conftest import Daemon

pytestmark = pytest.mark.integration

TELEGRAF = Path(__file__).resolve().parents[1] / "data" / "telegraf"
DB = "telegraf"


def _query(influxdb: Daemon, q: str) -> list[dict]:
    r = httpx.get(f"{influxdb.url}/query", params={"db": DB, "q": q, "epoch": "ns"}, timeout=30)
    r.raise_for_status()
    (result,) = r.json()["results"]
    assert "error" not in result, result
    return result.get("series", [])


def _stored(influxdb: Daemon, measurement: str) -> dict[tuple, dict]:
    """(tags, time in ns) -> the fields InfluxDB holds of that point (nulls left out)."""
    out = {}
    for series in _query(influxdb, f'SELECT * FROM "{measurement}" GROUP BY *'):
        tags = tuple(sorted((k, v) for k, v in series.get("tags", {}).items() if v))
        for row in series["values"]:
            point = dict(zip(series["columns"], row, strict=True))
            when = point.pop("time")
            out[(tags, when)] = {k: v for k, v in point.items() if v is not None}
    return out


def test_influxdb_stores_what_the_reader_reads(influxdb: Daemon) -> None:
    httpx.post(f"{influxdb.url}/query", params={"q": f"CREATE DATABASE {DB}"}).raise_for_status()
    ours: list[Point] = []
    for path in sorted(TELEGRAF.glob("*.lp")):
        body = path.read_bytes()
        r = httpx.post(f"{influxdb.url}/write", params={"db": DB, "precision": "ns"},
                       content=body, timeout=30)  # fmt: skip
        assert r.status_code == 204, (path.name, r.status_code, r.text)
        for line in body.decode().splitlines():
            if (p := parse_line(line)) is not None:
                ours.append(p)
    assert len(ours) == 3 + 2 + 2 + 1 + 23 + 1 + 18 + 12
    stored = {m: _stored(influxdb, m) for m in {p.measurement for p in ours}}
    for p in ours:
        assert p.ts is not None
        key = (tuple(sorted(p.tags.items())), round(p.ts * 1e9))
        got = stored[p.measurement].get(key)
        assert got is not None, (p.measurement, key, list(stored[p.measurement])[:3])
        assert got == p.fields, (p.measurement, p.tags)
        for name, value in p.fields.items():  # integers stay integers, strings strings
            assert type(got[name]) is type(value) or (
                isinstance(value, float) and isinstance(got[name], int)  # JSON's 700 of 700.0
            ), (name, value, got[name])
