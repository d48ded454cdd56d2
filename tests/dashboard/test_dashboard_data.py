"""The dashboard's numbers, from a store with known contents (tests/dashboard/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from known_fleet import (
    DBE,
    EARLY,
    END,
    LOST,
    MISSING,
    RELOAD,
    REMAP,
    SBE,
    START,
    STEP,
    SWAPPED,
    UNHEALTHY,
    gpu_id,
    uuid_of,
    write_known,
)

from gpuwarden.dashboard import _signals, data
from gpuwarden.dashboard._reads import read_window, resolution_for
from gpuwarden.health import GpuState, Reason, Verdict, describe
from gpuwarden.store import window
from gpuwarden.store.sqlite import SqliteStore

AS_OF = END - STEP  # the newest sample


def states_of(store: SqliteStore, **kw) -> pd.DataFrame:
    return data.fleet_states(store, AS_OF, stale_s=900.0, **kw)


def by_slot(states: pd.DataFrame) -> dict[tuple[str, int], pd.Series]:
    return {(r.hostname, int(r.gpu)): r for r in states.itertuples()}


def test_snapshot_of_an_old_store_looks_at_its_newest_sample(known_store):
    snap = data.snapshot(known_store, now=END + 86400)
    assert snap is not None
    assert (snap.as_of, snap.newest_ts, snap.step_s, snap.stale_s) == (AS_OF, AS_OF, 300.0, 900.0)
    assert snap.gpus == 16 and not snap.live
    live = data.snapshot(known_store, now=AS_OF + 60)
    assert live is not None and live.live and live.as_of == AS_OF + 60


def test_snapshot_of_an_empty_store_is_none(tmp_path: Path):
    with SqliteStore(tmp_path / "empty.db") as store:
        assert data.snapshot(store, now=END) is None
        assert data.fleet_states(store, END, stale_s=60).empty


@pytest.mark.parametrize("compact", [False, True], ids=["raw", "rollups"])
def test_states_from_hard_signals(tmp_path: Path, compact: bool):
    with SqliteStore.from_url(write_known(tmp_path / "k.db", compact=compact)) as store:
        states = states_of(store)
    assert data.state_counts(states) == {"ok": 11, "at-risk": 0, "unhealthy": 4, "missing": 1}
    assert list(states.columns) == data.STATE_COLUMNS
    rows = by_slot(states)
    assert {s for s, r in rows.items() if r.state == "unhealthy"} == UNHEALTHY
    assert rows[MISSING].state == "missing"
    # worst first: the four unhealthy GPUs, then the missing one
    assert list(states["state"][:5]) == ["unhealthy"] * 4 + ["missing"]
    assert states["risk"].isna().all()  # no model: risk unknown, never 0

    dbe = rows[DBE]
    assert "double-bit ECC error" in dbe.reasons and dbe.action == describe(48).action
    assert dbe.flagged_ts == END - 12 * STEP  # raw samples after the rollups: exact time
    lost = rows[LOST]
    assert "Xid 79" in lost.reasons and "GPU lost" in lost.reasons
    assert lost.action == describe(79).action
    assert lost.flagged_ts == END - 2 * 3600
    remap = rows[REMAP]
    assert "row remapping failed" in remap.reasons and remap.action == describe(64).action
    assert rows[MISSING].reasons.startswith("no sample since 2026-01-01 04:55 UTC")


def test_hard_signals_respect_resets_boards_and_the_window(known_store):
    rows = by_slot(states_of(known_store))
    # a driver reload drops the volatile DBE count from 2 to 0: not a new error
    assert rows[RELOAD].state == "ok"
    # the old board in this slot had Xid 48; the new board is another GPU
    assert rows[SWAPPED].state == "ok" and rows[SWAPPED].uuid == uuid_of(SWAPPED, "b")
    # an application Xid does not count against the GPU; neither do 120 SBEs an hour
    assert rows[SBE].state == "ok"
    short = by_slot(states_of(known_store, window_s=3 * 3600))
    assert short[EARLY].state == "ok" and short[DBE].state == "unhealthy"


def _verdict(slot, state, risk, ts=AS_OF - 600, **kw) -> Verdict:
    return Verdict(ts, gpu_id(slot), GpuState(state), risk, since=ts - 3600, threshold=0.65, **kw)


def test_stored_verdicts_are_the_states(known_store):
    """With verdicts stored, the states are serve's, not the dashboard's own reading: an
    at-risk GPU with its reasons and action; missing wins over a stale verdict unless it is
    unhealthy; a GPU with no verdict has an unknown risk."""
    why = (Reason("SBE rate rising", {"sbe_per_day_24h": 120.0}),)
    known_store.write_verdicts(
        [
            _verdict(SBE, "ok", 0.2, ts=AS_OF - 7200),  # older: replaced by the next one
            _verdict(SBE, "at-risk", 0.91, reasons=why, action="Drain within a day"),
            _verdict(DBE, "unhealthy", float("nan"), cause="hard-signal", reasons=("x",)),
            _verdict(LOST, "unhealthy", 0.3, cause="hard-signal"),
            _verdict(MISSING, "at-risk", 0.95),
            _verdict(RELOAD, "ok", 0.2),
            _verdict(REMAP, "unhealthy", 0.5, ts=AS_OF - 2 * 86400),  # outside the 24 h window
        ]
    )
    states = states_of(known_store)
    rows = by_slot(states)
    assert data.state_counts(states) == {"ok": 12, "at-risk": 1, "unhealthy": 2, "missing": 1}
    assert rows[SBE].state == "at-risk" and rows[SBE].risk == 0.91
    assert rows[SBE].reasons == "SBE rate rising" and rows[SBE].action == "Drain within a day"
    assert rows[SBE].flagged_ts == AS_OF - 600 - 3600  # since when it is at risk
    assert rows[LOST].state == "unhealthy"  # stopped reporting, but unhealthy stays
    assert rows[MISSING].state == "missing" and "no sample since" in rows[MISSING].reasons
    assert rows[RELOAD].state == "ok" and rows[RELOAD].risk == 0.2
    assert rows[REMAP].state == "ok" and np.isnan(rows[REMAP].risk)  # no verdict in the window
    assert list(data.flagged(states)["state"]) == ["unhealthy"] * 2 + ["at-risk"]


def test_the_risk_series_is_the_stored_scores(known_store):
    known_store.write_verdicts(
        [_verdict(SBE, "ok", r, ts=END - h * 3600) for h, r in ((3, 0.2), (2, 0.5), (1, 0.8))]
        + [_verdict(SBE, "unhealthy", float("nan"), ts=END - 1800, cause="hard-signal")]
    )
    series = data.risk_series(known_store, uuid_of(SBE), END - 3 * 3600, END)
    assert list(series["ts"]) == [END - 3 * 3600, END - 7200, END - 3600]  # NaN left out
    assert list(series["risk"]) == [0.2, 0.5, 0.8] and set(series["threshold"]) == {0.65}
    assert data.risk_series(known_store, uuid_of(DBE), START, END).empty


def test_the_backfill_command_covers_the_week_on_whole_hours():
    cmd = data.backfill_command("sqlite:////data/g.db", 1_767_247_000.0)
    assert cmd == (
        "gpuwarden score --store sqlite:////data/g.db --start 1766638800 --end 1767243600 "
        "--step 1h --into sqlite:////data/g.db"
    )


def test_fleet_now_averages_each_reporting_gpus_last_sample(known_store):
    now = data.fleet_now(known_store, AS_OF, stale_s=900.0)
    assert now["reporting"] == 14
    assert now["util_pct"] == pytest.approx((13 * 50 + 90) / 14)
    assert now["power_w"] == pytest.approx(14 * 300)


def test_fleet_series(known_store):
    series = data.fleet_series(known_store, AS_OF - 3600, AS_OF + 1, gpus=16, step_s=300)
    assert len(series) == 13
    last = series.iloc[-1]
    assert last["reporting"] == 14 and last["power_kw"] == pytest.approx(4.2)
    first = series.iloc[0]  # LOST still reported an hour ago; MISSING too
    assert first["reporting"] == 15


def test_gpu_series_is_reset_aware_and_has_the_limits(known_store):
    series = data.gpu_series(known_store, uuid_of(SBE), AS_OF - 6 * 3600, AS_OF + 1, step_s=300)
    assert list(series.columns) == ["ts", *data.GPU_SERIES_COLUMNS]
    sbe = series["sbe_per_h"].dropna()
    # 10 errors every 5 minutes: 120/h; at the driver reload the count restarts from 0, so
    # that step counts 0 (what the counter saw since), never a negative rate
    assert len(sbe) == len(series) - 1 and (sbe == 120.0).sum() == 70 and sbe.min() == 0
    assert series["sbe_errors"].sum() == 10 * 70
    assert series["spread_c"].iloc[-1] == 20.0 and series["spread_c"].iloc[0] == 5.0
    assert (series["pcie_limit_per_min"] == 0.96 * 16).all()
    assert (series["pcie_replay_per_min"].dropna() == 0).all()


def test_gpu_series_of_an_unknown_gpu_is_empty(known_store):
    assert data.gpu_series(known_store, "GPU-nope", AS_OF - 3600, AS_OF).empty


def test_recent_events(known_store):
    events = data.recent_events(known_store, AS_OF - 86400, AS_OF + 1)
    assert list(events["ts"]) == sorted(events["ts"], reverse=True)
    by_kind = {
        (k, None if pd.isna(c) else int(c)): f
        for k, c, f in zip(events["kind"], events["code"], events["fatal"], strict=True)
    }
    assert by_kind == {
        ("xid", 79): True,
        ("gpu_lost", None): True,
        ("xid", 48): True,
        ("xid", 13): False,
    }
    assert set(events.loc[events["code"] == 13, "cls"]) == {"application"}
    one = data.recent_events(known_store, AS_OF - 86400, AS_OF + 1, uuid=uuid_of(LOST))
    assert len(one) == 2


def test_heatmap_cells_are_grouped_by_rack(known_store):
    cells = data.heatmap_frame(states_of(known_store))
    assert len(cells) == 16
    assert list(cells.drop_duplicates("hostname")["rack"]) == [
        "rack00",
        "rack00",
        "rack01",
        "rack01",
    ]
    assert list(cells.drop_duplicates("hostname")["node_order"]) == [0, 1, 0, 1]


def test_read_window_mixes_rollups_and_newer_raw_samples(tmp_path: Path):
    with SqliteStore.from_url(write_known(tmp_path / "k.db", compact=True)) as store:
        frame = read_window(
            store, END - 6 * 3600, END, ["gpu_temp_c"], uuids=[uuid_of(SBE)], resolution_s=300
        )
    # one row per 5 minutes from rollups and from bucketed raw samples alike, no duplicates
    assert frame["ts"].is_unique and len(frame) == 72
    assert np.allclose(np.diff(frame["ts"]), 300)


class CountingStore:
    """A store that counts the raw and rolled-up rows it hands out."""

    def __init__(self, store: SqliteStore) -> None:
        self.store, self.rows = store, 0

    def read_samples(self, **kw):
        frame = self.store.read_samples(**kw)
        self.rows += len(frame)
        return frame

    def read_window(self, **kw):
        return window.read_window(self, **kw)  # the store's stitching, over the counted reads

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_hard_signals_read_the_raw_tail_only_where_counters_moved(tmp_path: Path):
    # rolled up but for the last 2 h, where the DBE (last hour) and the remap failure happen
    with SqliteStore.from_url(write_known(tmp_path / "k.db", compact=True)) as store:
        uuids = list(store.gpus()["uuid"])
        full, probed = CountingStore(store), CountingStore(store)
        # a probe as long as the tail is a full read of it
        every_row = _signals.hard_signals(full, END - 86400, AS_OF, uuids, probe_s=86400)
        changed = _signals.hard_signals(probed, END - 86400, AS_OF, uuids, probe_s=900)
    pd.testing.assert_frame_equal(changed, every_row)
    by_uuid = changed.set_index("uuid")
    assert by_uuid.loc[uuid_of(DBE), "hard_ts"] == END - 12 * STEP  # still exact in the tail
    assert by_uuid.loc[uuid_of(REMAP), "hard_ts"] == END - 6 * STEP
    assert probed.rows < full.rows / 2, (probed.rows, full.rows)


def test_a_sampled_raw_tail_reads_a_few_windows_of_it(tmp_path: Path):
    fields = ["gpu_util_pct", "power_w"]
    with SqliteStore.from_url(write_known(tmp_path / "k.db", compact=True)) as store:
        full, sampled = CountingStore(store), CountingStore(store)
        every_row = read_window(full, END - 6 * 3600, END, fields, resolution_s=3600)
        few = read_window(
            sampled, END - 6 * 3600, END, fields, resolution_s=3600, tail_every_s=900,
            tail_width_s=300,
        )  # fmt: skip
    # the same buckets and GPUs; the known fleet's gauges are flat, so the same means
    pd.testing.assert_frame_equal(few, every_row)
    assert sampled.rows < full.rows / 2, (sampled.rows, full.rows)


def test_resolution_keeps_reads_small():
    assert resolution_for(86400, gpus=1, step_s=60) is None
    assert resolution_for(86400, gpus=1024, step_s=15) == 3600
    assert resolution_for(6 * 3600, gpus=512, step_s=60) == 300


def test_heatmap_groups_nodes_without_a_rack():
    states = pd.DataFrame(
        {
            "rack": [""] * 20,
            "hostname": [f"n{i:02d}" for i in range(10) for _ in range(2)],
            "gpu": [0, 1] * 10,
            "uuid": [f"u{i}" for i in range(20)],
            "model": "H100-80GB",
            "state": "ok",
            "risk": np.nan,
            "reasons": "",
        }
    )
    cells = data.heatmap_frame(states)
    assert cells.groupby("rack")["hostname"].nunique().to_dict() == {"no rack 1": 8, "no rack 2": 2}


def test_risk_bands_never_hide_a_state():
    assert data.risk_band("unhealthy", 0.01) == "unhealthy"
    assert data.risk_band("missing", 0.99) == "missing"
    assert data.risk_band("ok", float("nan")) == "not scored"
    assert (
        data.risk_band("ok", 0.1) == "< 0.3" and data.risk_band("ok", 0.6) == ">= 0.5, not at risk"
    )
    # at-risk is serve's decision at its line (the shipped model's is 0.50), and stays while the
    # risk is between the hysteresis bounds: the map shows the state, not a fixed 0.7 line
    assert data.risk_band("at-risk", 0.55) == data.risk_band("at-risk", 0.9) == "at risk"
    assert data.risk_band("at-risk", float("nan")) == "at risk"  # an Alertmanager alert's


def test_the_gpu_pages_line_is_the_verdicts_then_serves(monkeypatch, tmp_path):
    import json

    from gpuwarden.dashboard import _gpu_page
    from gpuwarden.health import use_at_risk_threshold
    from gpuwarden.models.artifact import CARD_FILE, DEFAULT_DIR

    shipped = json.loads((DEFAULT_DIR / CARD_FILE).read_text())["threshold"]
    none = pd.DataFrame({"ts": [], "risk": [], "threshold": []})
    assert _gpu_page._line(none) == data.model_line() == shipped < 0.7
    stored = pd.DataFrame({"ts": [1.0, 2.0], "risk": [0.4, 0.6], "threshold": [0.7, 0.65]})
    assert _gpu_page._line(stored) == 0.65
    use_at_risk_threshold(0.8)
    try:
        assert data.model_line() == 0.8
    finally:
        use_at_risk_threshold(None)
    (tmp_path / CARD_FILE).write_text(json.dumps({"threshold": 0.42}))
    monkeypatch.setenv("GPUWARDEN_MODEL", str(tmp_path))
    assert data.model_line() == 0.42


def test_ages_read_as_people_write_them():
    from gpuwarden.dashboard._context import fmt_age

    assert [fmt_age(s) for s in (30, 600, 86400, 9000, 7 * 86400, 2.5 * 86400)] == [
        "30 s", "10 min", "24 h", "2.5 h", "7 days", "2.5 days",
    ]  # fmt: skip


def test_a_gpus_recorded_failures_newest_first(tmp_path):
    from gpuwarden.store.sqlite import SqliteStore
    from gpuwarden.telemetry import Failure, GpuId

    store = SqliteStore(tmp_path / "s.db")
    a, b = GpuId("n1", 0, "GPU-a"), GpuId("n1", 1, "GPU-b")
    assert data.gpu_failures(store, "GPU-a").empty
    store.write_failures(
        [Failure(100.0, a, "hbm_ue"), Failure(900.0, a, "gsp_timeout"), Failure(500.0, b, "x")]
    )
    got = data.gpu_failures(store, "GPU-a")
    assert list(got["ts"]) == [900.0, 100.0] and list(got["kind"]) == ["gsp_timeout", "hbm_ue"]


def test_a_missing_board_with_a_recorded_failure_is_one_to_replace(tmp_path):
    """A failed board showed "check the node is up and its collector runs" and nothing else."""
    from gpuwarden.store.sqlite import SqliteStore
    from gpuwarden.telemetry import Batch, Failure, GpuId, Sample

    store = SqliteStore(tmp_path / "s.db")
    ok, dead, quiet = GpuId("n1", 0, "GPU-ok"), GpuId("n1", 1, "GPU-dead"), GpuId("n1", 2, "GPU-q")
    for k in range(10):
        ts = 1_767_225_600.0 + 60 * k
        up = (ok,) if k > 3 else (ok, dead, quiet)
        store.write_batch(Batch(ts, tuple(Sample(ts, g, {"gpu_temp_c": 50.0}) for g in up)))
    store.write_failures([Failure(1_767_225_600.0 + 200, dead, "hbm_uncorrectable")])
    states = data.fleet_states(store, 1_767_225_600.0 + 540, stale_s=180).set_index("uuid")
    assert states.loc["GPU-dead", "state"] == "missing"
    assert states.loc["GPU-dead", "reasons"].startswith(
        "failed 2026-01-01 00:03 UTC (hbm_uncorrectable); no sample since"
    )
    assert states.loc["GPU-dead", "action"] == _signals.FAILED_ACTION
    assert states.loc["GPU-q", "action"] == _signals.MISSING_ACTION  # no failure: check the node
