"""Fixtures: the known week (known_week.py), built once per session, and a fake LLM server."""

from __future__ import annotations

import pytest
from fake_llm import FakeLLM
from known_week import SINCE, UNTIL, build_audit, build_scheduler, build_store

from gpuwarden.reports import FactSources, build_facts
from gpuwarden.store import open_store


@pytest.fixture(scope="session")
def week(tmp_path_factory):
    """(store URL, scheduler db, audit db) of the known week."""
    folder = tmp_path_factory.mktemp("week")
    return (
        build_store(folder / "store.db"),
        build_scheduler(folder / "scheduler.db"),
        build_audit(folder / "audit.db"),
    )


@pytest.fixture(scope="session")
def sources(week):
    _, sched, audit = week
    return FactSources(
        audit_db=audit, scheduler_db=sched, gpu_hour_price=2.5, grid_g_co2_per_kwh=400.0
    )


@pytest.fixture(scope="session")
def facts(week, sources):
    store = open_store(week[0])
    try:
        return build_facts(store, SINCE, UNTIL, sources=sources, now=UNTIL + 3600)
    finally:
        store.close()


@pytest.fixture
def llm():
    server = FakeLLM()
    yield server
    server.close()
