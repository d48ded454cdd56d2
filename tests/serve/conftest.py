"""The serve tests also use the fake Slack and Kubernetes servers of tests/alerts and
tests/scheduler_hooks: put those folders on the import path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from serve_helpers import Clock

TESTS = Path(__file__).resolve().parents[1]
for helper_dir in ("alerts", "scheduler_hooks"):
    if str(TESTS / helper_dir) not in sys.path:
        sys.path.insert(0, str(TESTS / helper_dir))


@pytest.fixture
def clock() -> Clock:
    return Clock()
