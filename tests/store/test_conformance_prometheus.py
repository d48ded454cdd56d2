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


@pytest.fixture(scope="module")
def unchunked(prometheus):
    store = PrometheusStore(
        prometheus.url, clock=lambda: T0 + HOURS * 3600 + 60, max_points=10**9, concurrency=2
    )
    yield store
    store.close()


@pytest.mark.parametrize(("budget", "resolution_s"), [(12, None), (5, 3600), (40, 300)])
def test_a_small_point_budget_chunks_the_read_and_reads_the_same(
    prometheus, unchunked, budget: int, resolution_s: int | None
) -> None:
    # a budget below one host's window cuts the read by host and by time; the frame is the
    # one read in one piece, and no answer held more points than the budget (the client
    # counts each answer's points as it decodes them)
    import pandas as pd

    chunked = PrometheusStore(
        prometheus.url, clock=lambda: T0 + HOURS * 3600 + 60, max_points=budget, concurrency=2
    )
    try:
        whole_before = unchunked.api.queries
        want = unchunked.read_window(start=T0, end=T0 + HOURS * 3600, resolution_s=resolution_s)
        whole_queries = unchunked.api.queries - whole_before
        # the list of GPUs keeps to the budget too, but for one point per GPU at least
        chunked.api.largest = 0
        listed = chunked.gpus()
        pd.testing.assert_frame_equal(listed, unchunked.gpus(), check_exact=True)
        assert 0 < chunked.api.largest <= max(budget, len(listed))
        before = chunked.api.queries
        chunked.api.largest = 0
        got = chunked.read_window(start=T0, end=T0 + HOURS * 3600, resolution_s=resolution_s)
        queries = chunked.api.queries - before
        assert len(want) > 10 and want.notna().sum().sum() > 100
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert 0 < chunked.api.largest <= budget
        assert unchunked.api.largest > budget  # the unchunked read did need cutting
        assert queries >= 4 * whole_queries
    finally:
        chunked.close()
