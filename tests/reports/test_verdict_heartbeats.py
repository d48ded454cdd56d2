"""The facts read only the verdicts that change a GPU's state (``read_verdicts(changes=True)``):
the known week with serve's hourly heartbeat verdicts added gives the facts it gives without
them, and a GPU at risk shows its newest heartbeat's risk and reasons."""

from __future__ import annotations

import shutil

import pandas as pd
from known_week import SINCE, UNTIL, facts_of, gid

from gpuwarden.health import AT_RISK_ACTION, GpuState, Verdict
from gpuwarden.reports import FactSources
from gpuwarden.reports._fleet import states_at
from gpuwarden.store import open_store

H = 3600.0


def with_heartbeats(week_url: str, tmp_path) -> str:
    """A copy of the known week's store with a verdict per GPU every hour of the week, each
    repeating the state in force (the at-risk GPU's risk rising 0.001 an hour)."""
    src = week_url.removeprefix("sqlite:///")
    dst = tmp_path / "heartbeats.db"
    shutil.copy(src, dst)
    url = f"sqlite:///{dst}"
    store = open_store(url)
    try:
        stored = store.read_verdicts()
        beats = []
        for host in ("gpu-a01", "gpu-b02"):
            for idx in (0, 1):
                g = gid(host, idx)
                hours = [SINCE + k * H + 600.0 for k in range(168)]
                probe = {"uuid": [g.uuid] * len(hours), "ts": hours}
                states = states_at(stored, pd.DataFrame(probe))
                for k, (ts, state) in enumerate(zip(hours, states, strict=True)):
                    at_risk = state == GpuState.AT_RISK
                    beats.append(Verdict(ts, g, GpuState(state), 0.7 + k / 1000 if at_risk else 0.1,
                                         reasons=("SBE rate rising",) if at_risk else (),
                                         action=AT_RISK_ACTION if at_risk else "",
                                         threshold=0.7))  # fmt: skip
        store.write_verdicts(beats)
    finally:
        store.close()
    return url


def test_heartbeats_change_no_fact_but_the_newest_risk(week, tmp_path):
    plain = facts_of(week[0], FactSources())
    beating_url = with_heartbeats(week[0], tmp_path)
    beating = facts_of(beating_url, FactSources())
    store = open_store(beating_url)
    try:
        every = store.read_verdicts(start=SINCE, end=UNTIL)
        changes = store.read_verdicts(start=SINCE, end=UNTIL, changes=True)
    finally:
        store.close()
    assert len(every) >= 4 * 168 and len(changes) <= 12  # the facts decode these few
    assert beating.availability == plain.availability
    assert beating.risk.daily == plain.risk.daily
    assert (beating.alerts.transitions, beating.alerts.to_at_risk) == (
        plain.alerts.transitions,
        plain.alerts.to_at_risk,
    )
    assert beating.failures == plain.failures
    (was,) = plain.risk.gpus
    (now,) = beating.risk.gpus
    assert (now.hostname, now.gpu, now.state) == (was.hostname, was.gpu, was.state)
    assert was.risk == 0.77 and now.risk == round(0.7 + 167 / 1000, 3)  # the last hour's
