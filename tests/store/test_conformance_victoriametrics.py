"""The store conformance suite, both tiers, on a real VictoriaMetrics 1.79."""

from __future__ import annotations

import pytest
from conformance import HOURS, T0, load_writable
from conformance.read import *  # noqa: F403
from conformance.write import *  # noqa: F403
from tsdb_servers import start_victoriametrics

from gpuwarden.store.victoriametrics import VictoriaMetricsStore

pytestmark = pytest.mark.integration


def _clock() -> float:  # "now" for the stores: just after DATA
    return T0 + HOURS * 3600 + 60


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    vm = start_victoriametrics(tmp_path_factory.mktemp("vm-read"))
    store = load_writable(VictoriaMetricsStore(vm.url, clock=_clock, concurrency=2))
    yield store
    store.close()
    vm.stop()


@pytest.fixture
def empty(tmp_path):
    vm = start_victoriametrics(tmp_path / "vm")
    store = VictoriaMetricsStore(vm.url, clock=_clock, refresh_s=0.0)
    yield store
    store.close()
    vm.stop()
