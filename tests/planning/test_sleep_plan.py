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
