"""The idle-sleep plan from a store's hourly rollup: which nodes sleep in the window, what
it saves, the headroom kept awake, and when they are woken."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuwarden.planning.energy import PowerModel
from gpuwarden.planning.sleep_plan import sleep_plan, wake_time
from gpuwarden.scheduler.sleep import SleepPolicy, SleepWindow

MON_0000 = 1_704_067_200.0  # Monday 2024-01-01 00:00 UTC


def hourly(util: dict[str, float], *, hours: int = 24, gpus: int = 8, watts: float = 100.0):
    """One Monday of hourly rows: each node's GPUs at ``util[node]`` % and ``watts`` each."""
    rows = []
    for node, u in util.items():
        for h in range(hours):
            for g in range(gpus):
                rows.append({"ts": MON_0000 + h * 3600, "hostname": node, "uuid": f"{node}-{g}",
                             "gpu_util_pct": u, "power_w": watts})  # fmt: skip
    return pd.DataFrame(rows)


def test_calm_nodes_sleep_in_the_window_and_busy_ones_do_not():
    power = PowerModel()
    plan = sleep_plan(hourly({"busy": 90.0, "calm": 5.0}), SleepPolicy(headroom_gpus=0), power)
    assert plan.window_hours == 4  # 02:00-06:00 on a Monday
    nodes = plan.nodes.set_index("hostname")
    assert nodes.loc["calm", "hours_asleep"] == 4 and nodes.loc["busy", "hours_asleep"] == 0
    # 4 hours x (8 GPUs x 100 W measured + 250 W base - 10 W asleep)
    assert plan.kwh_saved == pytest.approx(4 * (800 + power.base_w - power.sleep_w) / 1000)
    assert plan.kwh_total == pytest.approx(2 * 24 * 800 / 1000)
    assert nodes.loc["calm", "wake_at"] == "05:57" and nodes.loc["busy", "wake_at"] == ""
    assert nodes.loc["calm", "window_util_pct"] == pytest.approx(5.0)
    assert plan.hours["nodes_asleep"].max() == 1


def test_headroom_keeps_the_busiest_calm_nodes_awake_and_missing_is_not_idle():
    frame = hourly({"a": 1.0, "b": 2.0, "c": 3.0})
    frame.loc[frame["hostname"] == "a", "power_w"] = np.nan  # a: power not measured
    plan = sleep_plan(frame, SleepPolicy(headroom_gpus=8))
    asleep = plan.nodes.set_index("hostname")["hours_asleep"].to_dict()
    assert asleep == {"a": 0, "b": 4, "c": 0}  # c keeps 8 GPUs of headroom; a is unknown


def test_no_window_hour_saves_nothing_and_the_wake_time_wraps():
    plan = sleep_plan(hourly({"x": 0.0}, hours=2), SleepPolicy())  # 00:00-02:00 only
    assert plan.window_hours == 0 and plan.kwh_saved == 0.0
    late = SleepPolicy(window=SleepWindow("22:00", "00:02"), cold_start_s=300)
    assert wake_time(late) == "23:57"


def _replayed(nh: pd.DataFrame, policy: SleepPolicy) -> np.ndarray:
    """The policy replayed the plain way, node by node and hour by hour: the calmest first,
    the busiest calm nodes kept awake until the headroom is met."""
    asleep = np.zeros(len(nh), dtype=bool)
    for ts, rows in nh.groupby("ts", sort=True):
        if not policy.window.contains(float(ts)):
            continue
        measured = rows["util"].notna() & rows["power_w"].notna()
        calm = rows[(rows["util"] < policy.below) & measured]
        calm = calm.sort_values(["util", "hostname"])
        kept = 0
        for i in calm.index[::-1]:
            if kept >= policy.headroom_gpus:
                asleep[nh.index.get_loc(i)] = True
            else:
                kept += int(calm.at[i, "gpus"])
    return asleep


@pytest.mark.parametrize("seed", range(6))
def test_every_hour_is_replayed_as_node_by_node(seed):
    """Nodes of 1-8 GPUs, utilisations on a coarse grid (ties between nodes), some hours
    unmeasured, a headroom from none to more than the calm GPUs: the plan sleeps exactly the
    node-hours the plain replay does."""
    from gpuwarden.planning.sleep_plan import node_hours

    rng = np.random.default_rng(seed)
    rows = []
    for n in range(40):
        node, gpus = f"n{rng.integers(0, 99):02d}x{n}", int(rng.integers(1, 9))
        for h in range(30):
            util = float(rng.choice([0.0, 5.0, 10.0, 20.0, 60.0]))
            for g in range(gpus):
                gone = rng.random() < 0.05
                rows.append({"ts": MON_0000 + h * 3600, "hostname": node, "uuid": f"{node}-{g}",
                             "gpu_util_pct": np.nan if gone else util,
                             "power_w": np.nan if gone and rng.random() < 0.5 else 300.0})  # fmt: skip
    frame = pd.DataFrame(rows).sample(frac=1.0, random_state=seed)
    policy = SleepPolicy(
        window=SleepWindow("01:00", "05:00", weekends=False), below=0.15,
        headroom_gpus=int(rng.choice([0, 1, 8, 30, 400])),
    )  # fmt: skip
    plan = sleep_plan(frame, policy)
    want = _replayed(node_hours(frame), policy)
    got = plan.nodes.set_index("hostname")["hours_asleep"]
    nh = node_hours(frame).assign(asleep=want)
    assert got.sort_index().tolist() == nh.groupby("hostname")["asleep"].sum().sort_index().tolist()
    assert plan.hours["nodes_asleep"].tolist() == nh.groupby("ts")["asleep"].sum().tolist()
    assert plan.window_hours == 8  # 01:00-05:00 on the Monday and the Tuesday


def test_a_nodes_gpus_are_its_distinct_gpus_in_the_hour():
    """Counted as ``nunique`` counts them: a GPU read twice in an hour once, a row without
    a GPU not at all."""
    from gpuwarden.planning.sleep_plan import node_hours

    frame = hourly({"a": 5.0, "b": 50.0}, hours=3, gpus=4)
    frame = pd.concat([frame, frame.iloc[:5]], ignore_index=True)  # read twice
    frame.loc[len(frame)] = {"ts": MON_0000, "hostname": "b", "uuid": None, "gpu_util_pct": 1.0,
                             "power_w": 1.0}  # fmt: skip
    frame.loc[len(frame)] = {"ts": MON_0000 + 7200, "hostname": "c", "uuid": None,
                             "gpu_util_pct": 1.0, "power_w": 1.0}  # fmt: skip
    got = node_hours(frame).set_index(["hostname", "ts"])["gpus"]
    want = frame.groupby(["hostname", "ts"])["uuid"].nunique()
    assert got.tolist() == want.tolist() and got.index.equals(want.index)
    assert got.loc[("c", MON_0000 + 7200)] == 0


def test_a_tie_breaks_the_same_way_when_a_store_keeps_fewer_digits():
    """Two calm nodes at the same mean utilisation and headroom for one of them: the tie goes
    by hostname (the later one stays awake), also when a store hands back one node's mean a
    few units off in the 13th digit, as VictoriaMetrics' decimal rollups do."""
    exact = hourly({"n1": 10.0 / 3.0, "n2": 10.0 / 3.0})
    noisy = exact.copy()
    noisy.loc[noisy["hostname"] == "n1", "gpu_util_pct"] += 3e-11  # n1 now "busier"
    for frame in (exact, noisy):
        plan = sleep_plan(frame, SleepPolicy(headroom_gpus=8))
        asleep = plan.nodes.set_index("hostname")["hours_asleep"].to_dict()
        assert asleep == {"n1": 4, "n2": 0}
