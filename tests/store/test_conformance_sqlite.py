"""The store conformance suite (``conformance.py``), both tiers, on SQLite."""

from __future__ import annotations

import pytest
from conformance import load_writable
from conformance.read import *  # noqa: F403
from conformance.write import *  # noqa: F403

from gpuwarden.store.sqlite import SqliteStore


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    # the read tier only reads: one store for all its tests
    store = load_writable(SqliteStore(tmp_path_factory.mktemp("conformance") / "read.db"))
    yield store
    store.close()


@pytest.fixture
def empty():
    store = SqliteStore(":memory:")
    yield store
    store.close()
