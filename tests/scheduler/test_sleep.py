"""Idle-node sleep: the window, draining, headroom, dry run, waking for the queue, and a real
Wake-on-LAN magic packet received on a local UDP socket."""

from __future__ import annotations

import socket

import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import Job, NodeSpec, Scheduler
from gpuwarden.scheduler.sleep import NodeSleep, SleepController, SleepPolicy, SleepWindow
from gpuwarden.scheduler.wol import magic_packet, send_magic_packet

MON_0300 = 1_704_078_000.0  # Monday 2024-01-01 03:00 UTC
MON_1200 = MON_0300 + 9 * 3600
SAT_1200 = MON_1200 + 5 * 86_400


def test_window():
    w = SleepWindow()
    assert w.contains(MON_0300) and not w.contains(MON_1200) and w.contains(SAT_1200)
    assert not SleepWindow(weekends=False).contains(SAT_1200)
    wrap = SleepWindow.parse("22:00-06:00", weekends=False)
    assert wrap.contains(MON_0300) and not wrap.contains(MON_1200)
    assert SleepWindow(utc_offset_h=9).contains(MON_0300 - 9 * 3600)
    for bad in ("02:00", "2-6", "25:00-06:00", "02:00-02:00"):
        with pytest.raises(InputError, match="sleep window"):
            SleepWindow.parse(bad)
    with pytest.raises(InputError, match="below"):
        SleepPolicy(below=2)
    assert SleepPolicy.command("ipmitool chassis power soft") == (
        "ipmitool",
        "chassis",
        "power",
        "soft",
    )


def _cluster(n: int = 4) -> Scheduler:
    return Scheduler([NodeSpec.uniform(f"n{i}", 64_000, 262_144, 8, "A100-80GB") for i in range(n)])


def _util(s: Scheduler) -> dict[str, float]:
    c = s.cluster
    return {name: float((1000 - c.free[i]).sum()) / 8000 for i, name in enumerate(c.names)}


def test_idle_nodes_sleep_in_the_window_keeping_headroom_and_wake_after():
    s = _cluster()
    s.place(Job("busy", gpus_per_task=8))  # n? full: never drained
    slept: list[str] = []
    ctl = SleepController(s, SleepPolicy(dry_run=False, headroom_gpus=8), sleep=slept.append)
    assert ctl.step(MON_1200, _util(s)) == []  # outside the window: nothing
    acts = ctl.step(MON_0300, _util(s))
    assert [a.action for a in acts] == ["sleep", "sleep"]  # 3 idle nodes, one kept for headroom
    assert ctl.count(NodeSleep.ASLEEP) == 2 and sorted(slept) == sorted(a.node for a in acts)
    asleep = [a.node for a in acts]
    assert not any(s.is_open(n) for n in asleep)
    woke: list[str] = []
    ctl._wake = woke.append
    acts = ctl.step(MON_1200, _util(s))  # the window is over: everyone wakes, with a cold start
    assert sorted(woke) == sorted(asleep) and all(a.action == "wake" for a in acts)
    assert not any(s.is_open(n) for n in asleep)
    ctl.step(MON_1200 + 179, _util(s))
    assert not any(s.is_open(n) for n in asleep)
    ctl.step(MON_1200 + 180, _util(s))
    assert all(s.is_open(n) for n in asleep) and ctl.count(NodeSleep.AWAKE) == 4


def test_busy_nodes_drain_then_sleep_and_missing_utilisation_is_not_idle():
    s = _cluster(3)
    s.place(Job("small", gpu_milli=100))
    ctl = SleepController(s, SleepPolicy(dry_run=False, headroom_gpus=0))
    util = _util(s)
    node = s.placements["small"].tasks[0].node
    del util[next(n for n in util if n != node)]  # one node not measured: left alone
    ctl.step(MON_0300, util)
    assert ctl.state[node] is NodeSleep.DRAINING and not s.is_open(node)
    assert sum(st is NodeSleep.AWAKE for st in ctl.state.values()) == 1
    s.release("small")
    ctl.step(MON_0300 + 300, _util(s))
    assert ctl.state[node] is NodeSleep.ASLEEP


def test_dry_run_changes_nothing():
    s = _cluster()
    ctl = SleepController(s, SleepPolicy(headroom_gpus=0), sleep=lambda n: pytest.fail("slept"))
    acts = ctl.step(MON_0300, _util(s))
    assert len(acts) == 4 and all(s.is_open(n) for n in s.cluster.names)
    assert ctl.count(NodeSleep.AWAKE) == 4


def test_the_queue_wakes_what_it_needs_and_critical_work_reopens_draining_nodes():
    s = _cluster(4)
    s.place(Job("svc", priority="inference", gpu_milli=100))
    ctl = SleepController(s, SleepPolicy(dry_run=False, headroom_gpus=0))
    ctl.step(MON_0300, _util(s))
    assert ctl.count(NodeSleep.ASLEEP) == 3 and ctl.count(NodeSleep.DRAINING) == 1
    waiting = Job("serve", priority="inference", gpus_per_task=4)
    s.submit(waiting)
    assert not s.schedule()[0].placed
    acts = ctl.need(MON_0300 + 10, s.pending)
    assert [a.action for a in acts] == ["reopen"]  # still up: no cold start
    assert s.schedule()[0].placed
    s.submit(Job("train", gpus_per_task=8))
    s.submit(Job("train2", gpus_per_task=8))
    s.schedule()
    acts = ctl.need(MON_0300 + 20, s.pending)
    assert [a.action for a in acts] == ["wake", "wake"]  # one node per 8-GPU job
    assert ctl.need(MON_0300 + 30, s.pending) == []  # already coming
    assert ctl.step(MON_0300 + 60, _util(s)) == []  # no draining right after the queue woke nodes
    ctl.step(MON_0300 + 200, _util(s))
    assert [d.placed for d in s.schedule()] == [True, True]


def test_magic_packet_over_udp():
    pkt = magic_packet("00:11:22:aa:BB:cc")
    assert len(pkt) == 102 and pkt[:6] == b"\xff" * 6 and pkt[6:12] == bytes.fromhex("001122aabbcc")
    assert magic_packet("00-11-22-aa-bb-cc") == pkt == magic_packet("001122aabbcc")
    for bad in ("00:11:22:33:44", "zz:11:22:33:44:55", "00:11-22:33:44:55"):
        with pytest.raises(InputError, match="not a MAC"):
            magic_packet(bad)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(5)
        sent = send_magic_packet("00:11:22:aa:bb:cc", host="127.0.0.1", port=rx.getsockname()[1])
        got, _ = rx.recvfrom(1024)
    assert got == sent == pkt


def test_the_service_sleeps_an_idle_node_keeps_it_and_wakes_it_for_the_queue(tmp_path):
    """Inside the service: the sleep order rides on the agent's sync answer, a sleeping node's
    silence does not make it lost, and waiting work wakes it with a real magic packet."""
    from service_helpers import Clock, PlayAgent, submit

    from gpuwarden.scheduler.service import SchedulerService
    from gpuwarden.scheduler.state import SchedulerDB

    clock = Clock()
    clock.t = MON_1200  # registered and busy outside the window
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(5)
        svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock,
                               sleep=SleepPolicy(dry_run=False, headroom_gpus=0),
                               wol_broadcast="127.0.0.1", wol_port=rx.getsockname()[1])  # fmt: skip
        a1, a2 = PlayAgent(svc, "n1", gpus=2), PlayAgent(svc, "n2", gpus=2)
        svc.register("n2", {"cpu_milli": 64000, "memory_mib": 262144, "mac": "02:00:00:00:00:02",
                            "gpus": [{"index": i, "uuid": f"GPU-n2-{i}", "model": "H100-80GB",
                                      "memory_mib": 81920} for i in range(2)]})  # fmt: skip
        busy = submit(svc, gpus_per_task=2)
        assert svc.db.job(busy).placement[0]["node"] == "n1"
        a1.sync()
        a2.sync()
        clock.t = MON_0300 + 86_400  # Tuesday 03:00
        told = [a2.sync()]
        a1.sync()
        svc.tick()
        told += [a2.sync(), a2.sync()]
        assert [o.get("sleep", False) for o in told].count(True) == 1  # told once
        assert "sleep" not in a1.sync()  # n1 holds work
        clock.t += 3600  # n2's agent is silent for an hour: asleep, not lost
        a1.sync()
        svc.tick()
        assert {n["node"]: n["state"] for n in svc.nodes()}["n2"] == "ok"
        job = submit(svc, gpus_per_task=2)
        assert svc.db.job(job).state == "queued"
        packet, _ = rx.recvfrom(1024)  # the queue woke n2
        assert packet == magic_packet("02:00:00:00:00:02")
        clock.t += 120  # still booting: silent, and not lost
        svc.tick()
        assert {n["node"]: n["state"] for n in svc.nodes()}["n2"] == "ok"
        clock.t += 60  # cold start over: the node takes the job, and its agent is back
        a1.sync()
        svc.tick()
        a2.sync()
        assert svc.db.job(job).state == "running"
        assert svc.db.job(job).placement[0]["node"] == "n2"


def test_the_agent_runs_its_sleep_command_when_told(tmp_path):
    """A real service answers a sync with the sleep order; the agent runs its command."""
    from service_helpers import AGENT_SECRET, agent_token

    from gpuwarden.scheduler._auth import TokenBook
    from gpuwarden.scheduler.agent import Agent, Inventory
    from gpuwarden.scheduler.api import SchedulerServer
    from gpuwarden.scheduler.service import SchedulerService
    from gpuwarden.scheduler.state import SchedulerDB

    db = SchedulerDB(tmp_path / "s.db")
    svc = SchedulerService(db, clock=lambda: MON_0300,
                           sleep=SleepPolicy(dry_run=False, headroom_gpus=0))  # fmt: skip
    server = SchedulerServer(svc, TokenBook({}, admin="admin-token-0", agent=AGENT_SECRET))
    server.start(port=0)
    marker = tmp_path / "slept"
    inv = Inventory(8000, 16384, ({"index": 0, "uuid": "GPU-0", "model": "H100-80GB",
                                   "memory_mib": 81920},))  # fmt: skip
    agent = Agent("n1", server.url, tmp_path / "w", inv, token=agent_token("n1"),
                  mac="02:00:00:00:00:01", sleep_command=("touch", str(marker)))  # fmt: skip
    try:
        for _ in range(3):
            agent.step()
        assert marker.exists()
        assert svc.db.node("n1").gpus[0]["mac"] == "02:00:00:00:00:01"
    finally:
        agent.close()
        server.stop()
        db.close()
