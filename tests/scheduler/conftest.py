"""Fixtures for the scheduler tests: small clusters and the shared openb trace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwarden.scheduler import openb


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
