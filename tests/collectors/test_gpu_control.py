"""Power caps and clocks through the fake NVML: applied at task start, reverted at its end,
and NVML's refusals (NO_PERMISSION, NOT_SUPPORTED, INVALID_ARGUMENT) leave the GPU as it was."""

from __future__ import annotations

import pytest
from fake_nvml import FakeNvml, load_fixture

from gpuwarden.collectors.libnvml import GpuControl
from gpuwarden.errors import GpuControlRefused, InputError
from gpuwarden.scheduler.power import PowerGovernor, PowerPlan

CLOCKS = {"2619": [1980, 1755, 1590, 1410, 1200], "1593": [1200, 900]}


def _nvml(**extra) -> FakeNvml:
    fx = load_fixture("h100_hgx_8gpu.json")
    for dev in fx["devices"]:
        dev.update({"power_limit_constraints_mw": [200_000, 700_000],
                    "supported_clocks_mhz": CLOCKS, **extra})  # fmt: skip
    return FakeNvml(fx)


def test_apply_and_revert_at_task_end():
    nvml = _nvml()
    gov = PowerGovernor(GpuControl(nvml), {"inference": PowerPlan(cap_share=0.7, clock_cut=0.2)})
    before = nvml.devices[0]["enforced_power_limit_mw"]
    assert gov.apply(("j", 1, 0), [0, 1], "inference") == []
    assert nvml.devices[0]["power_limit_mw"] == 490_000  # 70% of the 700 W maximum
    assert nvml.devices[1]["app_clocks_mhz"] == {"mem": 2619, "sm": 1590}  # 1980 x 0.8 = 1584
    assert gov.apply(("train", 1, 0), [2], "training") == []  # no plan: untouched
    assert "app_clocks_mhz" not in nvml.devices[2]
    gov.settle([("train", 1, 0)])  # the inference task ended
    assert nvml.devices[0]["power_limit_mw"] == before
    assert "app_clocks_mhz" not in nvml.devices[1] and gov.applied() == {}


def test_a_shared_gpu_is_restored_after_its_last_task():
    nvml = _nvml()
    gov = PowerGovernor(GpuControl(nvml))
    gov.apply(("a", 1, 0), [3], "inference")
    gov.apply(("b", 1, 0), [3], "inference")
    gov.revert(("a", 1, 0))
    assert nvml.devices[3]["power_limit_mw"] == 490_000
    gov.revert(("b", 1, 0))
    assert nvml.devices[3]["power_limit_mw"] == nvml.devices[3]["enforced_power_limit_mw"]
    assert nvml.devices[3]["power_limit_mw"] != 490_000


@pytest.mark.parametrize("error", ["NO_PERMISSION", "NOT_SUPPORTED"])
def test_a_refusal_is_reported_and_the_task_runs_uncapped(error):
    nvml = _nvml(set_error=error)
    gov = PowerGovernor(GpuControl(nvml))
    refused = gov.apply(("j", 1, 0), [0], "inference")
    assert len(refused) == 1 and "GPU 0: set power limit 490 W" in refused[0]
    assert "power_limit_mw" not in nvml.devices[0]
    gov.revert(("j", 1, 0))  # nothing to restore, no error


def test_clocks_refused_puts_the_power_limit_back():
    fx = load_fixture("h100_hgx_8gpu.json")
    fx["devices"][0]["power_limit_constraints_mw"] = [200_000, 700_000]  # no clock table
    nvml = FakeNvml(fx)
    gov = PowerGovernor(GpuControl(nvml))
    refused = gov.apply(("j", 1, 0), [0], "inference")
    assert len(refused) == 1 and "clocks" in refused[0] and "Not Supported" in refused[0]
    assert nvml.devices[0]["power_limit_mw"] == nvml.devices[0]["enforced_power_limit_mw"]


def test_nvml_refuses_values_out_of_range():
    control = GpuControl(_nvml())
    assert control.power_limit_range_w(0) == (200.0, 700.0)
    with pytest.raises(GpuControlRefused, match="GPU 0: set power limit 900 W"):
        control.set_power_limit_w(0, 900)
    with pytest.raises(GpuControlRefused, match="set application clocks 2619,1000 MHz"):
        control.set_app_clocks_mhz(0, 2619, 1000)
    control.set_app_clocks_mhz(0, 1593, 900)
    assert control.app_clocks_mhz(0) == (1593, 900)
    control.reset_app_clocks(0)
    assert control.app_clocks_mhz(0) == (2619, 1980)


def test_plan_is_checked():
    with pytest.raises(InputError, match="cap_share"):
        PowerPlan(cap_share=1.5)
    with pytest.raises(InputError, match="clock_cut"):
        PowerPlan(clock_cut=1.0)


def test_the_agent_caps_an_inference_task_and_restores_the_gpu_when_it_ends(tmp_path):
    """A real service and agent: the start order carries the job's class, the agent caps the
    GPU it starts the task on, and restores it once the task has exited."""
    import time

    import httpx

    from gpuwarden.scheduler._auth import TokenBook, node_token
    from gpuwarden.scheduler.agent import Agent, Inventory
    from gpuwarden.scheduler.api import SchedulerServer
    from gpuwarden.scheduler.service import SchedulerService
    from gpuwarden.scheduler.state import SchedulerDB

    nvml = _nvml()
    secret, admin = "the-agents-master-secret", "admin-token-0"
    db = SchedulerDB(tmp_path / "s.db")
    server = SchedulerServer(SchedulerService(db), TokenBook({}, admin=admin, agent=secret))
    server.start(port=0)
    inv = Inventory(8000, 16384, tuple({"index": i, "uuid": f"GPU-{i}", "model": "H100-80GB",
                                        "memory_mib": 81920} for i in range(2)))  # fmt: skip
    agent = Agent("n1", server.url, tmp_path / "w", inv, token=node_token(secret, "n1"),
                  power=PowerGovernor(GpuControl(nvml)))  # fmt: skip
    try:
        agent.step()
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {admin}"}) as h:
            r = h.post("/v1/jobs", json={"name": "serve", "command": ["sleep", "1"],
                                         "priority": "inference", "tenant": "t"})  # fmt: skip
            assert r.status_code in (200, 201), r.text
        agent.step()
        capped = [i for i, d in enumerate(nvml.devices) if d.get("power_limit_mw") == 490_000]
        assert len(capped) == 1 and nvml.devices[capped[0]]["app_clocks_mhz"]["sm"] == 1590
        deadline = time.monotonic() + 20
        while nvml.devices[capped[0]].get("power_limit_mw") == 490_000:
            assert time.monotonic() < deadline, "the cap was never reverted"
            time.sleep(0.2)
            agent.step()
        assert "app_clocks_mhz" not in nvml.devices[capped[0]]
    finally:
        agent.close()
        server.stop()
        db.close()


def test_the_inference_plan_on_the_real_h200_tables():
    """The H200 recorded on a real GPU (tests/data/nvml/h200_vm_1gpu_idle.json): its own power
    range (200-700 W) and clock table (memory 3201 or 2201 MHz; graphics 345-1980 MHz in 15 MHz
    steps)."""
    nvml = FakeNvml("h200_vm_1gpu_idle.json")
    table = nvml.devices[0]["supported_clocks_mhz"]
    assert sorted(table) == ["2201", "3201"]
    assert nvml.devices[0]["power_limit_constraints_mw"] == [200_000, 700_000]
    gov = PowerGovernor(GpuControl(nvml))
    assert gov.apply(("j", 1, 0), [0], "inference") == []
    assert nvml.devices[0]["power_limit_mw"] == 490_000
    sm = nvml.devices[0]["app_clocks_mhz"]["sm"]
    assert sm == 1590  # of the clocks this GPU offers, the nearest to 1980 MHz x 0.8 = 1584
    gov.revert(("j", 1, 0))
    assert nvml.devices[0]["power_limit_mw"] == 700_000 and "app_clocks_mhz" not in nvml.devices[0]
