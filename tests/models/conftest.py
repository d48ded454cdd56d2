"""Shared fixtures: small simulated fleets and a tiny model trained once per session.

Fleets are small and their failure rate high (accel) so a few weeks hold dozens of failures;
the model is trained on one seed and period and judged on another.
"""

from __future__ import annotations

import pytest
from modelkit import EVAL_SPEC, TRAIN_SPEC
from threadpoolctl import threadpool_limits

from gpuwarden.models.simdata import SimPanel, simulate_panel
from gpuwarden.models.train import TrainOptions, train_on_panel


@pytest.fixture(scope="session", autouse=True)
def _one_openmp_thread():
    # Small fits on a busy shared machine: OpenMP workers spin-waiting for a core make the
    # trees ten times slower than one thread does.
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="session")
def train_sim() -> SimPanel:
    return simulate_panel(TRAIN_SPEC)


@pytest.fixture(scope="session")
def eval_sim() -> SimPanel:
    return simulate_panel(EVAL_SPEC)


@pytest.fixture(scope="session")
def tiny_model(train_sim):
    return train_on_panel(train_sim.panel, options=TrainOptions(step_h=3))
