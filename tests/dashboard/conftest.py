"""Fixtures over the known fleet of ``known_fleet.py`` (imported by name: pytest puts this
folder on sys.path, and every folder has its own conftest module)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from known_fleet import write_known

from gpuwarden.store.sqlite import SqliteStore


@pytest.fixture
def known_url(tmp_path: Path) -> str:
    return write_known(tmp_path / "known.db")


@pytest.fixture
def known_store(known_url: str) -> Iterator[SqliteStore]:
    store = SqliteStore.from_url(known_url)
    yield store
    store.close()
