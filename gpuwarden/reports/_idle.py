"""The idle-node sleep plan and the measured queue wait per GPU model, for the report.

Both reuse the planners: ``planning.sleep_plan`` replays the scheduler's sleep policy over the
period's hourly rollup (what the dashboard's Energy page shows), and
``planning.queuewait.measured_waits`` measures the waits of the jobs submitted in the period
(what ``gpuwarden plan queue-wait`` prints), so the report says what they say.
"""

from __future__ import annotations

import math

import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.planning.demand import records_from_scheduler
from gpuwarden.planning.energy import PowerModel
from gpuwarden.planning.queuewait import measured_waits
from gpuwarden.planning.sleep_plan import sleep_plan, wake_time
from gpuwarden.reports.model import Absent, IdleSleep, ModelWait, SleepNode
from gpuwarden.scheduler.sleep import SleepPolicy

WEEK_S = 7 * 86400.0


def idle_sleep(
    hourly: pd.DataFrame, since: float, until: float, policy: SleepPolicy
) -> tuple[IdleSleep | None, Absent | None]:
    """The sleep section for ``[since, until)``, or why it is absent."""
    power = PowerModel()
    plan = sleep_plan(hourly, policy, power)
    if plan.window_hours == 0:
        return None, Absent(section="sleep", why="no hour of the period with readings falls in "
                            "the sleep window")  # fmt: skip
    w = policy.window
    window = f"{w.start}-{w.end}{' and weekends' if w.weekends else ''}"
    sleepers = plan.nodes[plan.nodes["hours_asleep"] > 0]
    return IdleSleep(
        window=window,
        utc_offset_h=w.utc_offset_h,
        below_util_pct=round(100.0 * policy.below, 1),
        headroom_gpus=policy.headroom_gpus,
        window_hours=plan.window_hours,
        node_base_w=power.base_w,
        node_sleep_w=power.sleep_w,
        nodes=len(plan.nodes),
        nodes_sleeping=len(sleepers),
        node_hours_asleep=int(sleepers["hours_asleep"].sum()),
        gpu_kwh=round(plan.kwh_total, 1),
        kwh_saved=round(plan.kwh_saved, 1),
        kwh_saved_per_week=round(plan.kwh_saved * WEEK_S / (until - since), 1),
        wake_at=wake_time(policy),
        by_node=[
            SleepNode(
                hostname=str(n.hostname),
                gpus=int(n.gpus),
                hours_asleep=int(n.hours_asleep),
                window_util_pct=None
                if math.isnan(n.window_util_pct)
                else round(n.window_util_pct, 1),
                kwh_saved=round(float(n.kwh_saved), 1),
            )
            for n in sleepers.itertuples()
        ],
    ), None


def queue_waits(
    scheduler_db: str, since: float, until: float
) -> tuple[list[ModelWait] | None, Absent | None]:
    """The measured wait per GPU model of the jobs submitted in ``[since, until)``."""
    try:
        stats = measured_waits(records_from_scheduler(scheduler_db), since_s=since, until_s=until)
    except InputError as exc:
        return None, Absent(section="queue wait by model", why=str(exc))
    if not stats:
        return None, Absent(section="queue wait by model", why="no GPU job was submitted to the "
                            "scheduler in this period")  # fmt: skip
    return [
        ModelWait(
            model=s.gpu_model,
            jobs=s.jobs,
            wait_p50_min=round(60 * s.p50_h, 1),
            wait_p90_min=round(60 * s.p90_h, 1),
            still_waiting=s.waiting,
        )  # fmt: skip
        for s in stats.values()
    ], None
