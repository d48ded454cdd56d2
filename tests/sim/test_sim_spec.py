"""What a fleet may be: FleetSpec's checks, and the calibration it defaults to."""

from __future__ import annotations

import pytest

from gpuwarden.errors import ConfigError
from gpuwarden.sim import PRECURSOR_KINDS, FleetSpec, calib


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"nodes": 0}, "nodes"),
        ({"gpus_per_node": 17}, "gpus_per_node"),
        ({"models": ("V100",)}, "V100"),
        ({"sudden_fraction": 1.5}, "sudden_fraction"),
        ({"accel": -1.0}, "accel"),
        ({"days": 0.0}, "days"),
        ({"kinds": ("meteor",)}, "meteor"),
        ({"step_s": 1.5}, "step_s"),
        ({"failure_rate_per_gpu_day": float("nan")}, "failure_rate"),
    ],
)
def test_spec_rejects_bad_values_naming_them(kwargs, named):
    with pytest.raises(ConfigError, match=named):
        FleetSpec(**kwargs)


def test_calibration_is_the_published_figures():
    assert calib.META_GPU_FAILURES_PER_GPU_DAY == pytest.approx(3.03e-4, rel=0.01)
    assert calib.INFINITEHBD_GPU_FAULTS_PER_GPU_DAY == pytest.approx(1.42e-4, rel=0.01)
    assert FleetSpec().failure_rate_per_gpu_day == 3e-4 and FleetSpec().sudden_fraction == 0.3
    for q in calib.REPAIR_QUANTILES_DAYS.values():
        assert list(q) == sorted(q)
    assert set(calib.PRECURSOR_MIX_COUNTS) == set(PRECURSOR_KINDS)
