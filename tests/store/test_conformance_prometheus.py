"""The read tier of the store conformance suite on a real Prometheus 2.42, loaded with
``conformance.DATA`` by backfilling blocks (promtool), as a fleet's history is loaded into a
Prometheus after the fact."""

from __future__ import annotations

import pytest
from conformance import DATA, HOURS, T0, frame_of
from conformance.read import *  # noqa: F403
from tsdb_servers import history_series, start_prometheus_with

from gpuwarden.store import open_store
from gpuwarden.store.prometheus import PrometheusStore

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    series = history_series(
        [frame_of(DATA.samples)], DATA.events, DATA.failures, verdicts=DATA.verdicts
    )
    daemon = start_prometheus_with(tmp_path_factory.mktemp("prometheus"), series)
    yield daemon
    daemon.stop()


@pytest.fixture
def rollup_rtol() -> float:
    return 1e-12  # the server's avg_over_time adds in its own order


@pytest.fixture(scope="module")
def loaded(prometheus):
    store = PrometheusStore(prometheus.url, clock=lambda: T0 + HOURS * 3600 + 60, concurrency=2)
    yield store
    store.close()


def test_it_is_read_only(prometheus) -> None:
    from gpuwarden.store.base import WritableStore

    store = open_store(prometheus.url.replace("http://", "prometheus+http://"))
    assert isinstance(store, PrometheusStore) and not isinstance(store, WritableStore)
    store.close()


def test_range_selectors_are_closed_on_prometheus_2(loaded) -> None:
    # the windows are written for the server: [t - d, t) needs d - 1 ms on Prometheus 2.x
    assert loaded.api.dialect.closed and not loaded.api.dialect.tfuncs
