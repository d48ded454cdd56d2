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


def test_measured_energy_replaces_the_estimate_where_it_covers_the_gpu_hours():
    from gpuwarden.scheduler.billing import Measured

    rows = [BillRow("a", "all", "x", 2.0), BillRow("a", "half", "y", 2.0),
            BillRow("a", "none", "z", 2.0), BillRow("a", "half-unknown", "w", 2.0)]  # fmt: skip
    measured = {"all": Measured(0.5, 2.0), "half": Measured(0.2, 1.0),
                "half-unknown": Measured(0.2, 1.0)}  # fmt: skip
    watts = {"all": 700.0, "half": 700.0, "none": 700.0, "half-unknown": None}
    out = {r.job_id: r for r in energy(rows, watts, 400.0, measured)}
    assert (out["all"].kwh, out["all"].source) == (0.5, "measured")
    assert (out["half"].kwh, out["half"].source) == (pytest.approx(0.9), "partly measured")
    assert (out["none"].kwh, out["none"].source) == (1.4, "estimated")
    assert out["half-unknown"].kwh is None  # the unmeasured half has no known power
    assert out["all"].co2_kg == pytest.approx(0.2)


def test_measured_hours_cut_by_the_window_count_pro_rata():
    from gpuwarden.scheduler.billing import measured_energy

    rows = [("j", 0.0, 3600.0, 3.6e9, 3_600_000.0), ("j", 3600.0, 7200.0, 7.2e9, 3_600_000.0)]
    got = measured_energy(rows, 1800.0, None)
    assert got["j"].kwh == pytest.approx(0.5 + 2.0) and got["j"].gpu_hours == pytest.approx(1.5)
    assert measured_energy(rows, None, None)["j"].kwh == pytest.approx(3.0)


def _energy(gpus: int, mj: float, span: float) -> list[dict]:
    return [{"index": i, "util_pct": 90.0, "energy_mj": mj, "span_s": span} for i in range(gpus)]


def test_service_bills_measured_energy_of_the_gpus_a_job_held(tmp_path, clock):
    from gpuwarden.scheduler.service import SchedulerService
    from gpuwarden.scheduler.state import SchedulerDB

    svc = SchedulerService(SchedulerDB(tmp_path / "e.db"), clock=clock, grid_g_per_kwh=400.0)
    agent = PlayAgent(svc, "n1", gpus=3)
    job = submit(svc, gpus_per_task=2)
    agent.sync()
    agent.sync()  # running: billed from here
    held = svc.db.job(job).placement[0]["gpus"]
    for _ in range(60):  # an hour at 300 W per GPU; the third GPU is idle and nobody's
        clock.t += 60
        agent.usage = [g if g["index"] in held else {**g, "energy_mj": 3_000_000.0}
                       for g in _energy(3, 300 * 60 * 1000.0, 60.0)]  # fmt: skip
        agent.sync()
    agent.exit(agent.started[0], 0)
    agent.usage = None
    agent.sync()
    rows = svc.billing(ADMIN, 0, clock.t)
    (e,) = svc.billing_energy(rows, 0, clock.t)
    assert e.source == "measured"
    assert e.kwh == pytest.approx(0.6)  # 2 GPUs x 300 W x 1 h, not 2 x 700 W board power
    assert e.co2_kg == pytest.approx(0.24)
    half = svc.billing(ADMIN, 0, clock.t - 1800)  # the first half hour
    (before,) = svc.billing_energy(half, 0, clock.t - 1800)
    assert before.kwh == pytest.approx(0.3) and before.source == "measured"


def test_a_shared_gpus_energy_is_split_by_share(tmp_path, clock):
    from gpuwarden.scheduler.service import SchedulerService
    from gpuwarden.scheduler.state import SchedulerDB

    svc = SchedulerService(SchedulerDB(tmp_path / "e.db"), clock=clock)
    agent = PlayAgent(svc, "n1", gpus=1)
    quarter = submit(svc, gpu_milli=250)
    half = submit(svc, gpu_milli=500)
    agent.sync()
    agent.sync()
    for _ in range(10):
        clock.t += 60
        agent.usage = _energy(1, 3.6e8, 60.0)  # 0.1 kWh per sync
        agent.sync()
    rows = svc.billing(ADMIN, 0, clock.t)
    got = {e.job_id: e for e in svc.billing_energy(rows, 0, clock.t)}
    assert got[quarter].kwh == pytest.approx(0.25) and got[quarter].source == "measured"
    assert got[half].kwh == pytest.approx(0.5)
