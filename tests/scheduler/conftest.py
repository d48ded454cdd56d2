"""Fixtures for the scheduler tests: the shared openb trace, a service on a clock we move."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from service_helpers import Clock  # this directory's helpers, imported by path

from gpuwarden.scheduler import openb
from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.state import SchedulerDB


@pytest.fixture
def openb_files() -> tuple[Path, Path]:
    """(nodes, default pods) of the openb trace; skipped when absent, except under CI."""
    nodes, pods = openb.default_paths("default")
    if not (nodes.exists() and pods.exists()):
        message = f"openb trace not found under {nodes.parent} (set GPUWARDEN_SHARED_DATA)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return nodes, pods


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def svc(tmp_path, clock) -> SchedulerService:
    return SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
