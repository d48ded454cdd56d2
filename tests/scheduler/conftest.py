"""Fixtures for the scheduler tests: the vendored openb trace, a service on a clock we move."""

from __future__ import annotations

from pathlib import Path

import pytest
from service_helpers import Clock  # this directory's helpers, imported by path

from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.state import SchedulerDB

#: The openb default trace and node list, vendored byte-identical (tests/data/openb/SOURCES.md).
OPENB_DIR = Path(__file__).resolve().parents[1] / "data" / "openb"


@pytest.fixture
def openb_files() -> tuple[Path, Path]:
    """(nodes, default pods) of the openb trace, from the copy in tests/data/openb."""
    nodes = OPENB_DIR / "openb_node_list_gpu_node.csv"
    pods = OPENB_DIR / "openb_pod_list_default.csv"
    missing = [p.name for p in (nodes, pods) if not p.is_file()]
    assert not missing, f"{OPENB_DIR} lacks {', '.join(missing)} (see SOURCES.md there)"
    return nodes, pods


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def svc(tmp_path, clock) -> SchedulerService:
    return SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
