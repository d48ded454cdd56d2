"""The store conformance suite on ``influxdb://``: both tiers, against a local server that
answers InfluxDB 2's v2 write and query API (``influx2_fake``), driven by the real
influxdb-client. tests/integration/test_influxdb_victoriametrics.py writes the same points to a
real VictoriaMetrics."""

from __future__ import annotations

import pytest
from conformance import load_writable
from conformance.read import *  # noqa: F403
from conformance.write import *  # noqa: F403
from influx2_fake import FakeInflux

from gpuwarden.store.influxdb import InfluxStore


def open_influx(fake: FakeInflux, **params: str) -> InfluxStore:
    query = "&".join(f"{k}={v}" for k, v in {"org": "gpuwarden", "bucket": "gpu", **params}.items())
    return InfluxStore(f"influxdb://{fake.url.removeprefix('http://')}?{query}", token=fake.token)


@pytest.fixture(scope="module")
def loaded():
    fake = FakeInflux().start()
    store = load_writable(open_influx(fake))
    yield store
    store.close()
    fake.stop()


@pytest.fixture
def empty():
    fake = FakeInflux().start()
    store = open_influx(fake)
    yield store
    store.close()
    fake.stop()


@pytest.fixture
def rollup_rtol() -> float:
    # Flux's mean adds in float64 in time order; window.aggregate's pandas mean sums otherwise
    return 1e-12
