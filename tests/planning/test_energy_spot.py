"""The spot simulation, the sleep replay on the vendored openb trace, power-cap advice, and the
``gpuwarden energy`` / ``gpuwarden spot`` commands through click's runner."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.closedloop.spot import SpotScenario, compare, render, simulate
from gpuwarden.closedloop.workload import WorkloadSpec
from gpuwarden.errors import InputError
from gpuwarden.planning.energy import PowerModel, advise, clock_cut_effect, replay_sleep
from gpuwarden.scheduler import openb
from gpuwarden.scheduler.sleep import SleepPolicy

OPENB = Path(__file__).resolve().parents[1] / "data" / "openb"
SMALL = SpotScenario(
    owned_nodes=4, spot_nodes=4, days=10, workload=WorkloadSpec(training_median_h=4)
)


def test_spot_saves_on_the_spot_part_and_reclaims_cost_work():
    base = simulate(SMALL, seed=3, spot=False)
    calm = simulate(replace(SMALL, monthly_interruption=0.0), seed=3, spot=True)
    assert calm.reclaims == 0 and calm.lost_gpu_h == 0
    assert calm.cost_gpu_h == pytest.approx(base.cost_gpu_h * (1 - 0.65 / 2))  # half the fleet
    rough = replace(SMALL, monthly_interruption=0.95, checkpoint_write_s=1e9)
    hit = [simulate(rough, seed=s, spot=True) for s in range(1, 4)]
    assert sum(r.reclaims for r in hit) > 0 and sum(r.lost_gpu_h for r in hit) > 0
    kept = [simulate(replace(rough, checkpoint_write_s=60), seed=s, spot=True) for s in range(1, 4)]
    assert sum(r.lost_gpu_h for r in kept) == 0 and sum(r.saved_at_notice for r in kept) > 0
    # a reclaimed node is down for a while: less spot capacity billed than the calm run's
    assert max(r.cost_gpu_h for r in hit) < calm.cost_gpu_h


def test_compare_and_render():
    rows = compare(SMALL, ["none", "5-10%"], [1, 2])
    assert [(r.bucket, r.checkpoint_at_notice) for r in rows] == [
        ("none", True), ("5-10%", True), ("5-10%", False)]  # fmt: skip
    assert rows[0].lost_gpu_h == 0 and 25 < rows[0].cost_saved_pct < 35
    text = render(rows, SMALL, 2)
    assert "| 5-10% | no |" in text and "cost saved vs all on demand" in text
    # the "none" row's longer completion is said to be the placement's, not reclaims'
    assert "none: no reclaims at all; its job completion time is what spot-first" in text
    with pytest.raises(InputError, match="unknown bucket"):
        compare(SMALL, ["sometimes"], [1])
    with pytest.raises(InputError, match="monthly_interruption"):
        SpotScenario(monthly_interruption=1.0)


def test_sleep_replay_on_the_openb_trace_saves_energy_at_a_bounded_wait():
    nodes = openb.load_nodes(OPENB / "openb_node_list_gpu_node.csv")
    pods = openb.load_pods(OPENB / "openb_pod_list_default.csv")
    on = replay_sleep(nodes, pods, None, days=1.5)
    slept = replay_sleep(nodes, pods, SleepPolicy(dry_run=False), days=1.5)
    assert on.never_started == slept.never_started == 0
    assert len(on.waits_s) == len(slept.waits_s) > 100
    assert slept.kwh < 0.95 * on.kwh and slept.asleep_node_h > 0 and slept.sleeps > 0
    assert on.series.shape == slept.series.shape and on.series[:, 2].max() == 0
    assert slept.series[:, 2].max() > 0 and slept.series[:, 1].min() < on.series[:, 1].min()
    assert float(np.max(on.waits_s)) == 0.0  # always on: the trace fits at every moment
    assert float(np.percentile(slept.critical_waits_s, 90)) <= 180.0 + 300.0
    with pytest.raises(InputError, match="dry-run"):
        replay_sleep(nodes, pods, SleepPolicy(), days=1)
    # asleep draws sleep_w: a higher one saves less
    hot = replay_sleep(nodes, pods, SleepPolicy(dry_run=False), days=1.5,
                       power=PowerModel(sleep_w=200.0))  # fmt: skip
    assert slept.kwh < hot.kwh < on.kwh


def test_advice_follows_the_class_and_the_measurements():
    saved, slow = clock_cut_effect(0.2, memory_bound=True)
    assert saved == pytest.approx(0.39, abs=0.01) and slow == pytest.approx(0.05)
    assert clock_cut_effect(0.2, memory_bound=False)[1] == pytest.approx(0.25)
    inf = advise("inference", [250, 260, float("nan")], [40, 45], 700)
    assert inf.cap_w is not None and 0.3 * 700 <= inf.cap_w < 260 and inf.slowdown_pct == 5
    train = advise("training", [650, 690], [97, 99], 700)
    assert train.cap_w is None and "compute-bound" in train.why
    with pytest.raises(InputError, match="no power"):
        advise("dev", [float("nan")], [1], 700)
    with pytest.raises(InputError, match="clock cut"):
        clock_cut_effect(1.2, memory_bound=True)


def test_energy_and_spot_commands(tmp_path):
    runner = CliRunner()
    csv = tmp_path / "s.csv"
    csv.write_text("job_class,power_w,util_pct,board_w\ninference,240,40,700\n"
                   "inference,260,45,700\ntraining,680,98,700\n")  # fmt: skip
    r = runner.invoke(main, ["energy", "advise", str(csv)])
    assert r.exit_code == 0, r.output
    assert "| inference | 2 | 250 |" in r.output and "| training | 1 | 680 |" in r.output
    bad = tmp_path / "bad.csv"
    bad.write_text("job_class,power_w\nx,1\n")
    r = runner.invoke(main, ["energy", "advise", str(bad)])
    assert r.exit_code != 0 and "needs the columns" in r.output
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(5)
        r = runner.invoke(main, ["energy", "wake", "00:11:22:33:44:55", "--broadcast",
                                 "127.0.0.1", "--port", str(rx.getsockname()[1])])  # fmt: skip
        assert r.exit_code == 0, r.output
        assert rx.recvfrom(1024)[0][6:12] == bytes.fromhex("001122334455")
    r = runner.invoke(main, ["energy", "wake", "nope"])
    assert r.exit_code != 0 and "not a MAC address" in r.output
    r = runner.invoke(main, ["spot", "simulate", "--owned", "2", "--spot-nodes", "2", "--days", "3",
                             "--bucket", "5-10%", "--seeds", "1"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "| 5-10% | yes |" in r.output and "means over 1 seed\n" in r.output
    r = runner.invoke(
        main, ["spot", "simulate", "--bucket", "often", "--seeds", "1", "--days", "1"]
    )
    assert r.exit_code != 0 and "unknown bucket" in r.output
    r = runner.invoke(main, ["energy", "sleep-replay", "--nodes",
                             str(OPENB / "openb_node_list_gpu_node.csv"), "--pods",
                             str(OPENB / "openb_pod_list_default.csv"), "--days", "0.5",
                             "--plot", str(tmp_path / "sleep.png")])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "| always on |" in r.output and "| sleep |" in r.output
    # the table names the pods it was given, not the default trace it might have been
    assert "\nopenb_pod_list_default.csv, 0.5 days;" in r.output, r.output
    assert (tmp_path / "sleep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = runner.invoke(main, ["energy", "sleep-replay", "--window", "2-6", "--days", "0.1",
                             "--nodes", str(OPENB / "openb_node_list_gpu_node.csv"),
                             "--pods", str(OPENB / "openb_pod_list_default.csv")])  # fmt: skip
    assert r.exit_code != 0 and "sleep window" in r.output


def test_sleep_replay_without_a_trace_names_the_ways_to_give_one(tmp_path, monkeypatch):
    """An installed package has no ../shared/data beside it: the error says which options and
    which setting give the trace, not only that a path inside site-packages is missing."""
    monkeypatch.setenv("GPUWARDEN_SHARED_DATA", str(tmp_path))
    r = CliRunner().invoke(main, ["energy", "sleep-replay", "--days", "0.1"])
    assert r.exit_code != 0
    assert "no openb trace 'default'" in r.output and "--nodes, --pods" in r.output, r.output
    assert "GPUWARDEN_SHARED_DATA" in r.output
