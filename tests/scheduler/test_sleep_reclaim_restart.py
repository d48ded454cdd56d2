"""A restarted scheduler service remembers which nodes sleep and which a spot reclaim closed:
both live in its SQLite file (``sleep`` and ``reclaims``), and a new service over the same file
goes on from them. Each test stops one service and starts another on the file, as a restart does."""

from __future__ import annotations

import socket

from service_helpers import ADMIN, Clock, PlayAgent, submit

from gpuwarden.scheduler.service import SchedulerService
from gpuwarden.scheduler.sleep import SleepPolicy
from gpuwarden.scheduler.state import SchedulerDB
from gpuwarden.scheduler.wol import magic_packet

MON_0300 = 1_704_078_000.0  # Monday 2024-01-01 03:00 UTC
MON_1200 = MON_0300 + 9 * 3600
MAC = "02:00:00:00:00:02"
SLEEP = SleepPolicy(dry_run=False, headroom_gpus=0)


def register(svc: SchedulerService, node: str, *, mac: str | None = None, cost: str = "owned"):
    body = {"cpu_milli": 64000, "memory_mib": 262144, "cost_class": cost, "gpus": [
        {"index": i, "uuid": f"GPU-{node}-{i}", "model": "H100-80GB", "memory_mib": 81920}
        for i in range(2)]}  # fmt: skip
    if mac:
        body["mac"] = mac
    svc.register(node, body)


def states(svc: SchedulerService) -> dict[str, tuple[str, str]]:
    return {n["node"]: (n["state"], n["sleep"]) for n in svc.nodes()}


def test_a_restart_keeps_a_sleeping_node_asleep_not_lost_and_still_wakes_it(tmp_path):
    clock = Clock()
    clock.t = MON_1200
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock, sleep=SLEEP)
    a1, a2 = PlayAgent(svc, "n1"), PlayAgent(svc, "n2")
    register(svc, "n2", mac=MAC)
    busy = submit(svc, gpus_per_task=2)
    assert svc.db.job(busy).placement[0]["node"] == "n1"
    a1.sync()
    a2.sync()
    clock.t = MON_0300 + 86_400  # Tuesday 03:00: n2 idles in the window
    a1.sync()
    told = [a2.sync()]
    svc.tick()
    told.append(a2.sync())
    assert [o.get("sleep", False) for o in told].count(True) == 1
    assert states(svc)["n2"] == ("ok", "asleep")
    svc.db.close()

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(5)
        svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock, sleep=SLEEP,
                               wol_broadcast="127.0.0.1", wol_port=rx.getsockname()[1])  # fmt: skip
        a1.svc = svc
        assert states(svc)["n2"] == ("ok", "asleep")  # before any round
        clock.t += 2 * 3600  # 05:00: n2's agent has been silent for two hours, n1 syncs
        a1.sync()
        svc.tick()
        assert states(svc)["n2"] == ("ok", "asleep")  # still asleep, not lost, not awake
        assert not svc.scheduler.is_open("n2")
        job = submit(svc, gpus_per_task=2)  # n1 is full: the queue wakes n2
        assert svc.db.job(job).state == "queued"
        packet, _ = rx.recvfrom(1024)
        assert packet == magic_packet(MAC)
        assert states(svc)["n2"] == ("ok", "waking")
    svc.db.close()

    # restarted during the cold start: the wake-up and its deadline survive
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock, sleep=SLEEP)
    a1.svc = a2.svc = svc
    (row,) = svc.db.sleep_rows()
    assert row.state == "waking" and row.ready_at == clock.t + SLEEP.cold_start_s
    clock.t += SLEEP.cold_start_s
    a1.sync()
    svc.tick()
    a2.sync()
    assert svc.db.job(job).placement[0]["node"] == "n2"
    assert states(svc)["n2"] == ("ok", "awake") and svc.db.sleep_rows() == []
    svc.db.close()


def test_a_sleep_order_not_yet_sent_survives_a_restart(tmp_path):
    clock = Clock()
    clock.t = MON_0300 - 3600 - 30  # Monday 01:59:30, before the window
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock, sleep=SLEEP)
    a1, a2 = PlayAgent(svc, "n1"), PlayAgent(svc, "n2")
    submit(svc, gpus_per_task=2)
    a1.sync()
    a2.sync()
    clock.t += 30
    svc.tick()  # the idle node is put to sleep; its agent has not synced since
    assert [r.order_pending for r in svc.db.sleep_rows()] == [True]
    svc.db.close()
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock, sleep=SLEEP)
    a1.svc = a2.svc = svc
    asleep = [n for n, (_, s) in states(svc).items() if s == "asleep"]
    assert len(asleep) == 1
    agent = a1 if asleep == ["n1"] else a2
    assert agent.sync().get("sleep") is True  # told after the restart, once
    assert "sleep" not in agent.sync()
    assert [r.order_pending for r in svc.db.sleep_rows()] == [False]
    svc.db.close()


def test_a_restart_with_sleep_off_says_which_nodes_it_leaves_asleep(tmp_path, caplog):
    clock = Clock()
    clock.t = MON_0300 - 3600
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock, sleep=SLEEP)
    PlayAgent(svc, "n1")
    clock.t = MON_0300
    svc.tick()
    assert [r.state for r in svc.db.sleep_rows()] == ["asleep"]
    svc.db.close()
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    assert "none of them is woken (n1)" in caplog.text
    assert svc.scheduler.is_open("n1")  # no policy keeps it closed; nothing wakes it either
    svc.db.close()


def test_a_restart_keeps_a_reclaimed_node_closed_until_its_replacement_registers(tmp_path):
    clock = Clock()
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    PlayAgent(svc, "own")
    register(svc, "sp", cost="spot")
    deadline = clock.t + 120
    svc.reclaim(ADMIN, "sp", deadline, "spot reclaim")
    svc.db.close()

    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    nodes = {n["node"]: n for n in svc.nodes()}
    assert nodes["sp"]["reclaim_deadline"] == deadline and nodes["sp"]["cost_class"] == "spot"
    assert nodes["own"]["reclaim_deadline"] is None and nodes["own"]["sleep"] == "off"
    assert not svc.scheduler.is_open("sp")
    jobs = [submit(svc, priority="training", interruptible=True, gpus_per_task=2)
            for _ in range(2)]  # fmt: skip
    placed = [svc.db.job(j).placement for j in jobs]
    assert [p[0]["node"] for p in placed if p] == ["own"]  # the second waits: sp is closed
    register(svc, "sp", cost="spot")  # the replacement instance
    assert svc.scheduler.is_open("sp") and svc.db.reclaims() == []
    assert svc.db.job(jobs[1]).placement[0]["node"] == "sp"
    svc.db.close()
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock)
    assert svc.scheduler.is_open("sp")
    svc.db.close()


def test_a_restarted_agent_forwards_the_notice_its_last_run_could_not(tmp_path):
    """The notice came while the service was away; the agent restarted before it could send
    it. The new agent reads the notice file again and the service gets the deadline."""
    import json

    from service_helpers import AGENT_SECRET, agent_token

    from gpuwarden.scheduler._auth import TokenBook
    from gpuwarden.scheduler.agent import Agent, Inventory
    from gpuwarden.scheduler.api import SchedulerServer
    from gpuwarden.scheduler.spot import NoticeFile

    inv = Inventory(8000, 16384, ({"index": 0, "uuid": "GPU-0", "model": "H100-80GB",
                                   "memory_mib": 81920},))  # fmt: skip
    notice = tmp_path / "notice.json"
    deadline = 4_000_000_000.0
    notice.write_text(json.dumps({"deadline": deadline, "reason": "rebalance"}))
    with socket.socket() as s:  # a port nothing listens on: the service is away
        s.bind(("127.0.0.1", 0))
        away = f"http://127.0.0.1:{s.getsockname()[1]}"
    first = Agent("n1", away, tmp_path / "w", inv, token=agent_token("n1"), cost_class="spot",
                  notice=NoticeFile(notice, "n1"))  # fmt: skip
    first.step()
    assert first._pending_notice is not None  # read, not sent
    first.close()

    db = SchedulerDB(tmp_path / "s.db")
    server = SchedulerServer(SchedulerService(db), TokenBook({}, admin="adm-token-0",
                                                             agent=AGENT_SECRET)).start(port=0)  # fmt: skip
    again = Agent("n1", server.url, tmp_path / "w", inv, token=agent_token("n1"),
                  cost_class="spot", notice=NoticeFile(notice, "n1"))  # fmt: skip
    try:
        again.step()  # registers
        again.step()  # forwards the notice
        (row,) = db.reclaims()
        assert row.node == "n1" and row.deadline == deadline and "rebalance" in row.reason
    finally:
        again.close()
        server.stop()
        db.close()


def test_the_reclaim_command_closes_the_node_and_a_tenant_may_not(tmp_path):
    """``gpuwarden reclaim`` through click's runner against the real service over HTTP."""
    import time

    from click.testing import CliRunner

    from gpuwarden.cli import main
    from gpuwarden.scheduler._auth import TokenBook
    from gpuwarden.scheduler.api import SchedulerServer

    db = SchedulerDB(tmp_path / "s.db")
    svc = SchedulerService(db)
    register(svc, "sp", cost="spot")
    server = SchedulerServer(svc, TokenBook({"a": "token-of-a"}, admin="adm-token-0")).start(port=0)
    try:

        def run(token: str, *args: str):
            env = {"GPUWARDEN_SCHEDULER_URL": server.url, "GPUWARDEN_SCHEDULER_TOKEN": token}
            return CliRunner().invoke(main, ["reclaim", *args], env=env)

        r = run("token-of-a", "sp", "--in", "120")
        assert r.exit_code == 1 and db.reclaims() == []
        before = time.time()
        r = run("adm-token-0", "sp", "--in", "120", "--reason", "spot interruption")
        assert r.exit_code == 0, r.output
        assert "sp: reclaimed; 0 jobs" in r.output
        (row,) = db.reclaims()
        assert before + 120 <= row.deadline <= time.time() + 120
        assert "spot interruption" in row.reason and not svc.scheduler.is_open("sp")
        r = run("adm-token-0", "nowhere")
        assert r.exit_code == 1 and "no node 'nowhere'" in r.output
    finally:
        server.stop()
        db.close()


def test_a_restart_keeps_the_queues_hold_on_draining(tmp_path):
    # the queue woke a node: for min_awake_s no node is drained, after a restart too (the
    # restarted service would otherwise put the node it had just woken back to sleep)
    clock = Clock()
    clock.t = MON_0300 - 3600 - 30  # Monday 01:59:30, before the window
    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock, sleep=SLEEP)
    agents = {n: PlayAgent(svc, n) for n in ("n1", "n2")}
    submit(svc, gpus_per_task=2)
    for a in agents.values():
        a.sync()
    clock.t += 30
    svc.tick()  # 02:00: the idle node is put to sleep
    (asleep,) = [n for n, (_, s) in states(svc).items() if s == "asleep"]
    agents[asleep].sync()
    job = submit(svc, gpus_per_task=2)  # the other node is full: the queue wakes it
    assert states(svc)[asleep] == ("ok", "waking")
    held = svc.db.sleep_hold()
    assert held == clock.t + SLEEP.min_awake_s
    clock.t += SLEEP.cold_start_s
    for a in agents.values():
        a.sync()
    svc.tick()
    agents[asleep].sync()
    assert svc.db.job(job).placement[0]["node"] == asleep
    (key,) = [k for k in agents[asleep].tasks if k[0] == job]
    agents[asleep].exit(key, 0)
    agents[asleep].sync()
    svc.tick()
    assert states(svc)[asleep] == ("ok", "awake") and svc.db.job(job).state == "succeeded"
    svc.db.close()

    svc = SchedulerService(SchedulerDB(tmp_path / "s.db"), clock=clock, sleep=SLEEP)
    for a in agents.values():
        a.svc = svc
        a.sync()
    svc.tick()  # idle in the window, but within the hold
    assert states(svc)[asleep] == ("ok", "awake")
    clock.t = held + 1
    for a in agents.values():
        a.sync()
    svc.tick()
    assert states(svc)[asleep][1] in ("draining", "asleep")
    svc.db.close()
