"""The serve tests also use the fake Slack, Kubernetes and InfluxDB 2 servers of tests/alerts,
tests/scheduler_hooks and tests/store: put those folders on the import path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from serve_helpers import Clock

TESTS = Path(__file__).resolve().parents[1]
for helper_dir in ("alerts", "scheduler_hooks", "store"):
    if str(TESTS / helper_dir) not in sys.path:
        sys.path.insert(0, str(TESTS / helper_dir))


@pytest.fixture
def clock() -> Clock:
    return Clock()
