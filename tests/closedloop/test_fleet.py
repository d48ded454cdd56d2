"""A scored fleet: the sudden share reaches the simulator, and rows stop at a life's failure."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwarden.closedloop.fleet import scored_fleet
from gpuwarden.sim import SUDDEN_KINDS


@pytest.fixture(scope="module", params=[0.0, 1.0], ids=["no-sudden", "all-sudden"])
def fleet(request):
    # 16 GPUs, one day scored after one day of warm-up, failures x400 so a few happen
    return scored_fleet(
        seed=101, gpus=16, days=1, warmup_days=1, accel=400, sudden_fraction=request.param
    )


def test_the_sudden_share_reaches_the_simulator(fleet):
    assert fleet.failures, "the accelerated fleet should fail at least once"
    sudden = [f.kind in SUDDEN_KINDS for f in fleet.failures]
    assert all(f.with_precursor != s for f, s in zip(fleet.failures, sudden, strict=True))
    assert all(sudden) if fleet.spec.sudden_fraction == 1.0 else not any(sudden)


def test_each_scoring_hour_holds_the_live_gpus_once(fleet):
    assert fleet.at.size == 24 and fleet.row_ptr.size == 25
    assert fleet.row_ptr[-1] == fleet.row_life.size == fleet.row_risk.size == fleet.row_link.size
    assert set(fleet.row_link) <= {"", "pcie_link_degraded", "nvlink_errors_growing"} | {
        "pcie_link_degraded, nvlink_errors_growing"
    }
    fail_ts = {f.uuid: f.ts for f in fleet.failures}
    for t, at in enumerate(fleet.at):
        lives = fleet.row_life[fleet.row_ptr[t] : fleet.row_ptr[t + 1]]
        assert np.unique(lives).size == lives.size
        assert len({fleet.life_slot[g] for g in lives}) == lives.size  # one board per slot
        for g in lives:  # no verdict on a board after its failure
            assert fail_ts.get(str(fleet.life_key[g]), np.inf) > at
    risk = fleet.row_risk
    assert np.isfinite(risk).all() and ((risk >= 0) & (risk <= 1)).all()


def test_benign_temperature_drift_reaches_the_simulator():
    """``--thermal-drift``: the same fleet with its temperatures drifting scores differently
    (the model reads the HBM-core spread), and says what it was simulated with."""
    still = scored_fleet(seed=101, gpus=16, days=1, warmup_days=1, accel=400, sudden_fraction=0)
    moving = scored_fleet(
        seed=101, gpus=16, days=1, warmup_days=1, accel=400, sudden_fraction=0, thermal_drift_c=2
    )
    assert still.spec.thermal_drift_c == 0 and moving.spec.thermal_drift_c == 2
    assert still.row_risk.size == moving.row_risk.size
    assert not np.array_equal(still.row_risk, moving.row_risk)
