"""The report's facts from a real VictoriaMetrics 1.79 equal those from SQLite for the same
history: the known week written into both, with serve's hourly heartbeat verdicts, so the
facts' verdict read of state changes only (``read_verdicts(changes=True)``) runs on both, and a
GPU whose state changed before the period and not within it (its state comes from the verdict
held when the period opens)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from known_week import SINCE, UNTIL, fill, gid

from gpuwarden.health import AT_RISK_ACTION, GpuState, Verdict
from gpuwarden.reports import FactSources, build_facts
from gpuwarden.store.base import Store
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.store.victoriametrics import VictoriaMetricsStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))
from tsdb_servers import start_victoriametrics  # noqa: E402

pytestmark = pytest.mark.integration

H = 3600.0
NOW = UNTIL + H
#: gpu-b02/0 turns at risk an hour before the period and has no verdict in it
QUIET = Verdict(SINCE - H, gid("gpu-b02", 0), GpuState.AT_RISK, 0.75, since=SINCE - H,
                changed_from=GpuState.OK, reasons=("SBE rate rising",), action=AT_RISK_ACTION,
                threshold=0.7)  # fmt: skip


def heartbeats() -> list[Verdict]:
    """serve's hourly verdicts in the period for gpu-a01/1 (ok all week) and gpu-b02/1 (ok,
    then at risk from +150 h with the known week's change verdict, its risk rising an hour at a
    time): heartbeats that repeat the state in force."""
    out = []
    for k in range(168):
        ts = SINCE + k * H + 600.0
        out.append(Verdict(ts, gid("gpu-a01", 1), GpuState.OK, 0.1, threshold=0.7))
        risky = k >= 150  # the change itself is the known week's verdict at +150 h
        out.append(Verdict(ts, gid("gpu-b02", 1), GpuState.AT_RISK if risky else GpuState.OK,
                           0.77 + (k - 150) / 1000 if risky else 0.1,
                           reasons=("SBE rate rising",) if risky else (),
                           action=AT_RISK_ACTION if risky else "", threshold=0.7))  # fmt: skip
    return out


def load(store: Store) -> Store:
    fill(store)
    store.write_verdicts([QUIET, *heartbeats()])
    store.compact(NOW)
    return store


def facts_of(store: Store):
    return build_facts(store, SINCE, UNTIL, sources=FactSources(), now=NOW, compare=False)


def test_facts_from_victoriametrics_equal_sqlites_with_heartbeats(tmp_path) -> None:
    vm = start_victoriametrics(tmp_path / "vm")
    try:
        with SqliteStore(tmp_path / "week.db") as lite:
            want = facts_of(load(lite))
            every = lite.read_verdicts(start=SINCE, end=UNTIL)
        store = VictoriaMetricsStore(vm.url, clock=lambda: NOW, refresh_s=0.0)
        try:
            got = facts_of(load(store))
            changes = store.read_verdicts(start=SINCE, end=UNTIL, changes=True)
        finally:
            store.close()
    finally:
        vm.stop()
    assert len(every) >= 2 * 168 and len(changes) <= 8  # the heartbeats are left out
    assert gid("gpu-b02", 0).uuid not in set(changes["uuid"])  # no verdict in the period
    assert got.model_dump() == want.model_dump()
    at_risk = {(g.hostname, g.gpu): (g.state, g.risk) for g in want.risk.gpus}
    # the quiet GPU's state is the one held when the period opened; the beating one's risk is
    # its newest heartbeat's
    assert at_risk == {("gpu-b02", 0): ("at-risk", 0.75), ("gpu-b02", 1): ("at-risk", 0.787)}
