"""The GPU page's risk history: a week backfilled in one call, then one call per new whole hour
(``_risk_history.RiskHistory``), kept up to date by the background scorer."""

from __future__ import annotations

import threading
import time

import numpy as np
import pandas as pd
import pytest
from known_fleet import END, SBE, hourly_risk, risk_at, uuid_of

from gpuwarden.dashboard import _risk_history, data
from gpuwarden.dashboard._background import BackgroundScores
from gpuwarden.dashboard._risk_history import FAILED, HOUR_S, KEEP_S, PENDING, READY, RiskHistory

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC
WEEK_H = int(KEEP_S / HOUR_S)  # 168


class FakeModel:
    """An hourly scorer over two GPUs whose risk is the hour's offset from T0 in thousandths;
    records each call's (start, end) and raises while ``fail`` is set."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, float]] = []
        self.fail = False

    def __call__(self, store: object, start: float, end: float) -> pd.DataFrame:
        self.calls.append((start, end))
        if self.fail:
            raise RuntimeError("model broke")
        hours = np.arange(start, end + 1.0, HOUR_S)
        return pd.DataFrame(
            {
                "uuid": np.repeat(["GPU-a", "GPU-b"], len(hours)),
                "at": np.tile(hours, 2),
                "risk": np.tile(0.5 + (hours - T0) / HOUR_S / 1000.0, 2),
            }
        )


def hours_held(history: RiskHistory) -> list[float]:
    return sorted(history.state().frame["ts"].unique())


def test_backfills_the_week_then_adds_each_new_hour(known_store):
    model = FakeModel()
    history = RiskHistory(model)
    assert history.state().status == PENDING and history.state().frame.empty

    history.update(known_store, T0 + 25 * 60)  # 00:25: the week up to 00:00, in one call
    assert model.calls == [(T0 - (WEEK_H - 1) * HOUR_S, T0)]
    state = history.state()
    assert (state.status, state.through_ts, state.error) == (READY, T0, "")
    assert len(state.frame) == 2 * WEEK_H and state.backfill_s >= 0
    assert list(state.frame.columns) == ["uuid", "ts", "risk"]
    assert state.frame["risk"].dtype == np.float32  # compact: no reasons, no states

    history.update(known_store, T0 + 50 * 60)  # the same hour: nothing to score
    assert len(model.calls) == 1

    history.update(known_store, T0 + 3 * HOUR_S + 1)  # three hours later: those three only
    assert model.calls[-1] == (T0 + HOUR_S, T0 + 3 * HOUR_S)
    held = hours_held(history)
    # a week back from 03:00, oldest hour dropped as each new one came
    assert held == [T0 + 3 * HOUR_S - h * HOUR_S for h in range(WEEK_H - 1, -1, -1)]
    mine = _risk_history.series(history.state().frame, "GPU-a", T0, T0 + 3 * HOUR_S)
    assert list(mine["ts"]) == [T0 + h * HOUR_S for h in range(4)]
    assert list(mine["risk"]) == [0.5, 0.501, 0.502, 0.503]


def test_a_gap_longer_than_the_week_backfills_the_week_again(known_store):
    model = FakeModel()
    history = RiskHistory(model)
    history.update(known_store, T0)
    history.update(known_store, T0 + 10 * 86400)
    assert model.calls[-1] == (T0 + 10 * 86400 - (WEEK_H - 1) * HOUR_S, T0 + 10 * 86400)
    held = hours_held(history)
    assert len(held) == WEEK_H and held[0] > T0 + 10 * 86400 - KEEP_S


def test_a_failed_hour_is_tried_again_when_the_next_completes(known_store):
    model = FakeModel()
    history = RiskHistory(model)
    model.fail = True
    history.update(known_store, T0 + 60)
    state = history.state()
    assert state.status == FAILED and "model broke" in state.error and state.frame.empty
    history.update(known_store, T0 + 1800)  # not again within the hour
    assert len(model.calls) == 1

    model.fail = False
    history.update(known_store, T0 + HOUR_S)
    assert history.state().status == READY and history.state().through_ts == T0 + HOUR_S

    model.fail = True  # a new hour fails: the week stays, with the error
    history.update(known_store, T0 + 2 * HOUR_S)
    state = history.state()
    assert (state.status, state.through_ts) == (READY, T0 + HOUR_S)
    assert "model broke" in state.error and len(state.frame) == 2 * WEEK_H

    model.fail = False  # the next hour brings both missing hours
    history.update(known_store, T0 + 3 * HOUR_S)
    assert model.calls[-1] == (T0 + 2 * HOUR_S, T0 + 3 * HOUR_S)
    assert history.state().error == "" and hours_held(history)[-1] == T0 + 3 * HOUR_S


def test_background_backfills_after_its_first_live_pass(known_url):
    """The live scores come first; the week's backfill follows in the same thread; the page
    sees it running meanwhile."""
    release = threading.Event()

    def slow_hourly(store, start, end):
        release.wait(30)
        return hourly_risk(store, start, end)

    def live(store, at):
        return pd.DataFrame({"uuid": [uuid_of(SBE)], "risk": [0.9]})

    bg = BackgroundScores(
        known_url, live, hourly=slow_hourly, every_s=3600, clock=lambda: END + 86400
    )
    try:
        first = bg.wait(30)
        assert first is not None and first.frame is not None  # before the backfill ends
        assert bg.history is not None
        deadline = time.monotonic() + 30
        while bg.history.state().status == PENDING and time.monotonic() < deadline:
            time.sleep(0.02)
        assert bg.history.state().status == _risk_history.RUNNING
        release.set()
        state = bg.history.wait(30)
        assert state.status == READY
        # the known store ends at 05:55 (END - STEP): the newest whole hour is 05:00
        assert state.through_ts == END - 3600
        sbe = _risk_history.series(state.frame, uuid_of(SBE), 0, END)
        hours = [END - 3600 * h for h in range(5, 0, -1)]  # 01:00 ... 05:00
        assert list(sbe["ts"]) == hours
        assert list(sbe["risk"]) == [risk_at(uuid_of(SBE), h) for h in hours]
    finally:
        release.set()
        bg.stop()


def test_a_failing_backfill_keeps_the_live_scores(known_url, caplog):
    def broken(store, start, end):
        raise RuntimeError("no history for you")

    def live(store, at):
        return pd.DataFrame({"uuid": [uuid_of(SBE)], "risk": [0.9]})

    bg = BackgroundScores(known_url, live, hourly=broken, every_s=0.05, clock=lambda: END)
    try:
        assert bg.history is not None
        state = bg.history.wait(30)
        assert state.status == FAILED and "no history for you" in state.error
        time.sleep(0.3)  # more live passes after the failure
        latest = bg.latest()
        assert latest is not None and latest.error == "" and list(latest.frame["risk"]) == [0.9]
        assert any("risk history" in r.message for r in caplog.records)
    finally:
        bg.stop()


@pytest.mark.parametrize("now_risk", [0.9, float("nan")])
def test_gpu_risk_series_ends_with_the_current_score(now_risk):
    held = pd.DataFrame({"ts": [T0 - 2 * HOUR_S, T0 - HOUR_S, T0], "risk": [0.1, 0.2, 0.3]})
    out = data.gpu_risk_series(held, T0 - HOUR_S, T0 + HOUR_S, now_ts=T0 + 600, now_risk=now_risk)
    if now_risk == now_risk:
        assert list(out["ts"]) == [T0 - HOUR_S, T0, T0 + 600]
        assert list(out["risk"]) == [0.2, 0.3, 0.9]
    else:  # no current score: only what is held
        assert list(out["risk"]) == [0.2, 0.3]
