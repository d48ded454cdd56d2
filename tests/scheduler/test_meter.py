"""Measured GPU utilisation and energy: the agent's meter over the fake NVML, the service's
usage window, and the sleep controller judging nodes by it (allocated-but-idle is not calm)."""

from __future__ import annotations

import pytest
from service_helpers import ADMIN, AGENT_SECRET, Clock, PlayAgent, agent_token, submit
from test_agent_tasks import _fake_nvml

from gpuwarden.errors import CollectorUnavailable
from gpuwarden.scheduler.meter import GpuMeter, open_meter
from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.sleep import SleepPolicy
from gpuwarden.scheduler.state import SchedulerDB

MON_0300 = 1_704_078_000.0  # Monday 2024-01-01 03:00 UTC: inside the default sleep window


class Tick:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _meter(fixture: str = "h100_hgx_8gpu.json"):
    fake, tick = _fake_nvml()(fixture), Tick()
    return fake, tick, GpuMeter(fake, clock=tick)


def test_utilisation_is_the_mean_and_energy_the_counter_increase():
    fake, tick, meter = _meter()
    dev = fake.devices[0]
    dev["per_step"] = {}
    dev["utilization_pct"]["gpu"], dev["total_energy_mj"] = 10, 5_000_000
    meter.sample()
    tick.t += 1
    dev["utilization_pct"]["gpu"], dev["total_energy_mj"] = 50, 5_700_000
    meter.sample()
    got = meter.report()[0]
    assert got == {"index": 0, "util_pct": 30.0, "energy_mj": 700_000.0, "span_s": 1.0}
    meter.acknowledged()
    assert meter.report()[0] == {"index": 0}  # nothing measured since: absent, not zero
    tick.t += 2
    dev["total_energy_mj"] = 300_000  # the driver reloaded: the counter restarted at 0
    meter.sample()
    assert meter.report()[0]["energy_mj"] == 300_000.0
    assert meter.report()[0]["span_s"] == 2.0


def test_power_is_integrated_where_the_energy_counter_is_not_offered():
    fake, tick, meter = _meter()
    fake.devices[1]["total_energy_mj"] = "NOT_SUPPORTED"
    fake.devices[1]["power_usage_mw"] = 200_000
    meter.sample()
    tick.t += 2
    fake.devices[1]["power_usage_mw"] = 300_000
    meter.sample()
    assert meter.report()[1]["energy_mj"] == pytest.approx(500_000.0)  # (200+300)/2 W x 2 s
    fake.devices[2].update(total_energy_mj="NOT_SUPPORTED", power_usage_mw="NOT_SUPPORTED",
                           utilization_pct="NOT_SUPPORTED")  # fmt: skip
    meter.acknowledged()
    for _ in range(3):
        tick.t += 1
        meter.sample()
    assert meter.report()[2] == {"index": 2}  # neither offered: missing, never 0


def test_a_gpu_needing_a_reset_is_skipped_and_its_counter_covers_the_gap(caplog):
    fake, tick, meter = _meter("h100_lost_4gpu.json")  # GPU 3 needs a reset in steps 1 and 2
    for _ in range(4):
        meter.sample()
        fake.advance()
        tick.t += 1
    got = {g["index"]: g for g in meter.report()}
    assert "GPU 3 not measured" in caplog.text
    assert got[0]["span_s"] == 3.0 and got[3]["span_s"] == 3.0  # one counter step spans the gap
    assert got[3]["energy_mj"] > 0


def test_no_nvml_means_no_meter():
    import pynvml

    fake = _fake_nvml()("h100_hgx_8gpu.json", init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(CollectorUnavailable):
        GpuMeter(fake)
    assert open_meter(fake) is None


def _service(tmp_path, clock):
    return SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock,
                            sleep=SleepPolicy(dry_run=False, headroom_gpus=0))  # fmt: skip


def _idle(gpus: int, pct: float = 2.0) -> list[dict]:
    return [{"index": i, "util_pct": pct} for i in range(gpus)]


def test_allocated_but_idle_is_not_calm_and_busy_unallocated_is_not_idle(tmp_path):
    clock = Clock()
    clock.t = MON_0300 - 3660  # 01:59: place work outside the window
    svc = _service(tmp_path, clock)
    a1, a2, a3 = (PlayAgent(svc, f"n{i}", gpus=2) for i in (1, 2, 3))
    job = submit(svc, gpus_per_task=2)
    held = svc.db.job(job).placement[0]["node"]
    agents = {"n1": a1, "n2": a2, "n3": a3}
    others = sorted(set(agents) - {held})
    agents[held].usage = _idle(2)  # allocated, measured idle: jobs are on it
    agents[others[0]].usage = _idle(2, pct=90.0)  # nothing allocated, but busy (outside work)
    agents[others[1]].usage = None  # no NVML: judged by allocation
    for a in agents.values():
        a.sync()
    clock.t = MON_0300 - 3600  # 02:00: the window opens
    orders = {n: a.sync() for n, a in agents.items()}
    svc.tick()
    orders = {n: {**orders[n], **a.sync()} for n, a in agents.items()}
    asleep = {n for n, o in orders.items() if o.get("sleep")}
    assert asleep == {others[1]}
    acts = {a.node: a for a in svc._nodes.sleep.ctl.log}  # type: ignore[union-attr]
    assert set(acts) == {others[1]}
    assert "by allocation, not measured" in acts[others[1]].reason
    rows = {n["node"]: n for n in svc.nodes()}
    assert rows[held]["utilisation_from"] == "measured"
    assert rows[held]["gpus"][0]["util_pct"] == pytest.approx(2.0)
    assert rows[others[1]]["utilisation_from"] == "allocation"
    assert rows[others[1]]["gpus"][0]["util_pct"] is None


def test_a_node_sleeps_once_its_mean_over_the_window_is_below_the_threshold(tmp_path):
    clock = Clock()
    clock.t = MON_0300 - 3660  # 01:59, outside the window
    svc = _service(tmp_path, clock)
    a1 = PlayAgent(svc, "n1", gpus=2)
    a1.usage = _idle(2, pct=50.0)  # nothing allocated, but measured busy: stays up
    a1.sync()
    clock.t += 60
    assert a1.sync().get("sleep") is None
    assert svc.nodes()[0]["utilisation_from"] == "measured"
    a1.usage = _idle(2, pct=2.0)
    told = []
    for _ in range(4):  # window mean at the 4th: (2 x 50 + 4 x 2) / 6 = 18%, below 20%
        clock.t += 30
        told.append(a1.sync().get("sleep", False))
    assert told == [False, False, False, True]
    reason = svc._nodes.sleep.ctl.log[-1].reason  # type: ignore[union-attr]
    assert "measured 18%" in reason


def test_a_gpu_that_stops_reporting_makes_the_node_unmeasured(tmp_path):
    clock = Clock()
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    a1 = PlayAgent(svc, "n1", gpus=2)
    a1.usage = [{"index": 0, "util_pct": 1.0}, {"index": 1}]  # GPU 1: no utilisation
    a1.sync()
    row = svc.nodes()[0]
    assert row["utilisation_from"] == "allocation"
    assert [g["util_pct"] for g in row["gpus"]] == [1.0, None]
    clock.t += 601  # the window has passed: the old samples no longer count
    a1.usage = None
    a1.sync()
    assert svc.nodes()[0]["gpus"][0]["util_pct"] is None


def test_a_real_agent_sends_its_measurements_through_http(tmp_path):
    """The real agent over the fake NVML, syncing with the real service over HTTP, running a
    real task: the node is measured, and the job's kWh comes from the GPU's energy counter."""
    import time

    from gpuwarden.scheduler._auth import TokenBook
    from gpuwarden.scheduler.agent import Agent, Inventory
    from gpuwarden.scheduler.api import SchedulerServer

    db = SchedulerDB(tmp_path / "s.db")
    svc = SchedulerService(db)
    server = SchedulerServer(svc, TokenBook({}, admin="admin-token-0", agent=AGENT_SECRET))
    server.start(port=0)
    fake = _fake_nvml()("a100_vm_1gpu.json")
    dev = fake.devices[0]
    dev["utilization_pct"]["gpu"] = 40
    dev["per_step"] = {"total_energy_mj": 5_000_000}  # 5 kJ between two agent steps
    inv = Inventory(8000, 16384, ({"index": 0, "uuid": "GPU-0", "model": "A100-80GB",
                                   "memory_mib": 81920},))  # fmt: skip
    agent = Agent("n1", server.url, tmp_path / "w", inv, token=agent_token("n1"),
                  meter=GpuMeter(fake))  # fmt: skip
    try:
        job = submit(svc, command=["sleep", "5"], gpus_per_task=1)
        for _ in range(6):
            agent.step()
            fake.advance()
            time.sleep(0.05)
        row = svc.nodes()[0]
        assert row["utilisation_from"] == "measured"
        assert row["gpus"][0]["util_pct"] == pytest.approx(40.0)
        bill = svc.billing(ADMIN, 0, time.time() + 1)
        (e,) = svc.billing_energy(bill, 0, time.time() + 1)
        stored = sum(r[3] for r in svc.db.energy_rows([job]))
        assert stored > 0 and stored % 5_000_000 == 0  # whole steps of the counter, this GPU's
        assert e.source in ("measured", "partly measured") and e.kwh is not None
        assert e.kwh >= stored / 3.6e9 - 1e-6  # kWh is rounded to 6 places
    finally:
        agent.close()
        server.stop()
        db.close()
