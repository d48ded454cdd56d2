"""kWh and CO2 per job and tenant in billing; unknown power or grid intensity stays unknown."""

from __future__ import annotations

import pytest
from service_helpers import ADMIN, PlayAgent, submit

from gpuwarden.scheduler.billing import BillRow, energy, energy_totals


def test_energy_per_job_and_tenant():
    rows = [
        BillRow("a", "j1", "x", 2.0),
        BillRow("a", "j2", "y", 1.0),
        BillRow("b", "j3", "z", 4.0),
    ]
    out = energy(rows, {"j1": 700.0, "j2": 400.0, "j3": None}, 380.0)
    assert [(r.kwh, r.co2_kg) for r in out] == [(1.4, 0.532), (0.4, 0.152), (None, None)]
    assert energy_totals(out) == {
        "a": (pytest.approx(1.8), pytest.approx(0.684)),
        "b": (None, None),
    }
    no_grid = energy(rows[:1], {"j1": 700.0}, None)
    assert no_grid[0].kwh == 1.4 and no_grid[0].co2_kg is None


def test_service_bills_energy_from_the_nodes_gpu_model(tmp_path, clock):
    from gpuwarden.scheduler.service import SchedulerService
    from gpuwarden.scheduler.state import SchedulerDB

    svc = SchedulerService(SchedulerDB(tmp_path / "e.db"), clock=clock, grid_g_per_kwh=400.0)
    agent = PlayAgent(svc, "n1", gpus=2)
    job = submit(svc, gpus_per_task=2)
    agent.sync()  # ordered started
    agent.sync()  # reported running: billed from here
    clock.t += 3600
    agent.exit(agent.started[0], 0)
    agent.sync()
    rows = svc.billing(ADMIN, 0, clock.t)
    (e,) = svc.billing_energy(rows)
    assert rows[0].job_id == job and rows[0].gpu_hours == pytest.approx(2.0)
    assert e.kwh == pytest.approx(1.4) and e.co2_kg == pytest.approx(0.56)  # 2 H100 h x 700 W


def test_grid_setting_is_checked():
    from gpuwarden.config import grid_intensity as _grid
    from gpuwarden.errors import ConfigError

    assert _grid({"grid_intensity_g_per_kwh": ""}) is None
    assert _grid({"grid_intensity_g_per_kwh": "380"}) == 380.0
    for bad in ("lots", "-5"):
        with pytest.raises(ConfigError, match="grid_intensity_g_per_kwh"):
            _grid({"grid_intensity_g_per_kwh": bad})
