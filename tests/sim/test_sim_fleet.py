"""The simulated fleet: determinism, NVML-like counters, failures and their precursors,
benign look-alikes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from gpuwarden.errors import ConfigError
from gpuwarden.sim import FAILURE_KINDS, FRAME_COLUMNS, SUDDEN_KINDS, Fleet, FleetSpec, calib
from gpuwarden.sim._chunk import NOT_SIMULATED
from gpuwarden.telemetry import (
    CLOCK_EVENT_SW_THERMAL,
    COUNTER_FIELDS,
    FIELD_NAMES,
    RESETTING_COUNTERS,
)

START = 1767225600.0
MIXED = FleetSpec(
    nodes=8, days=8, step_s=300, accel=150, seed=3, models=("H100-80GB", "A100-80GB", "H200")
)
HARDWARE_XIDS = {48, 63, 64, 74, 92, 94, 95}


@pytest.fixture(scope="module")
def mixed():
    fleet = Fleet(MIXED)
    return fleet, fleet.run(progress=False)


def _by_board(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(uuid=df["uuid"].astype(str)).sort_values(["uuid", "ts"], kind="stable")


# --- determinism ---------------------------------------------------------------------------
def test_same_seed_same_fleet_other_seed_other_fleet():
    spec = FleetSpec(nodes=2, days=1.5, step_s=300, accel=500, seed=4)
    a, b = Fleet(spec).run(progress=False), Fleet(spec).run(progress=False)
    pd.testing.assert_frame_equal(a.samples, b.samples)
    assert a.events == b.events and a.failures == b.failures and a.failures
    c = Fleet(FleetSpec(nodes=2, days=1.5, step_s=300, accel=500, seed=5)).run(progress=False)
    assert set(c.samples["uuid"].astype(str)).isdisjoint(a.samples["uuid"].astype(str))


def test_chunk_length_does_not_change_the_run():
    spec = FleetSpec(nodes=3, days=3, step_s=120, accel=300, seed=7)
    runs = []
    for chunk_s in (86400, 5 * 3600 + 120):
        fleet = Fleet(spec)
        parts = list(fleet.chunks(chunk_s=chunk_s, progress=False))
        runs.append(
            (
                pd.concat([p.samples for p in parts], ignore_index=True),
                [e for p in parts for e in p.events],
                fleet.failures,
            )
        )
    (a, ea, fa), (b, eb, fb) = runs
    assert (a["uuid"].astype(str) == b["uuid"].astype(str)).all()
    np.testing.assert_allclose(a[list(FIELD_NAMES)], b[list(FIELD_NAMES)], rtol=1e-12)
    assert ea == eb and fa == fb


def test_arrays_mode_counts_the_same_samples():
    spec = FleetSpec(nodes=2, days=1, step_s=300, accel=300, seed=2)
    with_frames = [c.n_samples for c in Fleet(spec).chunks(progress=False, chunk_s=7200)]
    arrays = list(Fleet(spec).chunks(progress=False, chunk_s=7200, frames=False))
    assert with_frames == [c.n_samples for c in arrays]
    assert all(c.samples is None and c.arrays["gpu_temp_c"].shape == c.alive.shape for c in arrays)


# --- the frame -----------------------------------------------------------------------------
def test_frame_layout_and_missing_fields(mixed):
    _, res = mixed
    df = res.samples
    assert tuple(df.columns) == FRAME_COLUMNS
    assert all(df[f].dtype == np.float64 for f in FIELD_NAMES)
    # Ampere and later remap rows instead of retiring pages: absent, never 0.
    for f in ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"):
        assert df[f].isna().all()
    # dcgm-exporter 4.x's extra default counters are not simulated: absent, never 0.
    assert df[sorted(NOT_SIMULATED)].isna().all().all()
    supported = [
        f for f in FIELD_NAMES if not f.startswith("retired_pages") and f not in NOT_SIMULATED
    ]
    assert not df[supported].isna().any().any()
    per_model = df.groupby("model", observed=True)[
        ["fb_total_mib", "power_limit_w", "pcie_link_gen_max", "pcie_link_width_max"]
    ].max()
    assert per_model.loc["A100-80GB"].tolist() == [81920, 400, 4, 16]
    assert per_model.loc["H100-80GB"].tolist() == [81559, 700, 5, 16]
    assert per_model.loc["H200"].tolist() == [143771, 700, 5, 16]
    assert ((df["ts"] - START) % MIXED.step_s == 0).all()
    busy = df[df["gpu_util_pct"] > 50]
    assert (busy["power_w"] > busy["power_limit_w"] * 0.3).mean() > 0.9
    assert (busy["mem_temp_c"] > df.loc[df["gpu_util_pct"] == 0, "mem_temp_c"].mean()).mean() > 0.8
    # DCGM's profiling ratios: within 0..1, below utilisation, the tensor pipes below the engine
    gr, tensor = df["gr_engine_active"], df["tensor_active"]
    assert gr.between(0, 1).all() and tensor.between(0, 1).all()
    assert (gr <= df["gpu_util_pct"] / 100 + 1e-6).all() and (tensor <= gr + 1e-6).all()
    assert gr[df["gpu_util_pct"] == 0].max() == 0 and gr[df["gpu_util_pct"] > 50].min() > 0.45


def test_counters_never_decrease_except_at_a_recorded_reset(mixed):
    fleet, res = mixed
    df = _by_board(res.samples)
    prev_ts = df.groupby("uuid")["ts"].shift()
    resets = pd.DataFrame([(r.hostname, r.ts) for r in res.resets], columns=["hostname", "ts"])
    assert len(resets) > 0
    for name in COUNTER_FIELDS:
        dropped = df[df.groupby("uuid")[name].diff() < 0]
        if name not in RESETTING_COUNTERS:
            assert dropped.empty, name
            continue
        for i, row in dropped.iterrows():
            node = resets[resets["hostname"] == row["hostname"]]["ts"]
            assert ((node > prev_ts[i]) & (node <= row["ts"])).any(), (name, row["hostname"])
    vol = df.groupby("uuid")["ecc_sbe_volatile_total"].diff()
    assert (vol < 0).any()  # resets really happen in this run


# --- failures ------------------------------------------------------------------------------
def test_failed_gpu_drops_out_and_returns_as_a_new_board(mixed):
    fleet, res = mixed
    df = res.samples.assign(uuid=res.samples["uuid"].astype(str))
    end = START + MIXED.days * 86400
    xids = {(e.gpu.uuid, e.code) for e in res.events if e.kind == "xid"}
    returned = 0
    assert len(res.failures) >= 10
    for f in res.failures:
        slot = df[(df["hostname"] == f.gpu.hostname) & (df["gpu"] == f.gpu.index)]
        assert not ((slot["uuid"] == f.gpu.uuid) & (slot["ts"] >= f.ts)).any()
        assert not ((slot["ts"] >= f.ts) & (slot["ts"] < f.ts + f.repair_s)).any()
        if f.xid is not None:
            assert (f.gpu.uuid, f.xid) in xids
        if f.ts + f.repair_s + 3600 < end:
            new = slot[slot["ts"] >= f.ts + f.repair_s].sort_values("ts")
            assert new["uuid"].iloc[0] != f.gpu.uuid
            first = new.iloc[0]
            assert first["ecc_dbe_aggregate_total"] == 0 and first["remapped_rows_correctable"] == 0
            assert first["energy_mj"] < first["power_limit_w"] * 3600 * 1000
            returned += 1
    assert returned >= 5


def test_run_failures_are_the_planned_ones(mixed):
    fleet, res = mixed
    assert res.failures == Fleet(MIXED).planned_failures()
    assert {f.kind for f in res.failures} <= set(FAILURE_KINDS)


def _rate(board: pd.DataFrame, col: str, lo: float, hi: float) -> float:
    part = board[(board["ts"] >= lo) & (board["ts"] < hi)]
    if len(part) < 2:
        return np.nan
    return float(part[col].diff().clip(lower=0).sum() / ((hi - lo) / 3600))


@pytest.mark.parametrize(
    ("kind", "col"),
    [
        ("hbm_degradation", "ecc_sbe_aggregate_total"),
        ("pcie_degradation", "pcie_replay_total"),
        ("nvlink_degradation", "nvlink_crc_flit_errors_total"),
        ("cooling_degradation", None),
    ],
)
def test_precursors_come_before_the_failure(kind, col):
    spec = FleetSpec(
        nodes=8, days=8, step_s=300, accel=300, seed=11, sudden_fraction=0, kinds=(kind,)
    )
    res = Fleet(spec).run(progress=False)
    df = _by_board(res.samples)
    checked = rising = 0
    lengths = []
    for f in res.failures:
        assert f.kind == kind and f.precursor_start_ts is not None
        lengths.append(f.ts - f.precursor_start_ts)
        if f.precursor_start_ts < START + 86400:
            continue
        board = df[df["uuid"] == f.gpu.uuid]
        ps, ts = f.precursor_start_ts, f.ts
        if board["ts"].iloc[0] > ps - 86400 + spec.step_s:
            continue  # a replacement board with no day of history before its precursor
        checked += 1
        if col is not None:  # the same GPU's rate: during the precursor vs the day before
            rising += _rate(board, col, ps, ts) > 2 * _rate(board, col, ps - 86400, ps) + 0.1
        else:  # HBM runs hot against the node's other GPUs
            node = df[(df["hostname"] == f.gpu.hostname) & (df["uuid"] != f.gpu.uuid)]
            rel = board.set_index("ts")["mem_temp_c"] - node.groupby("ts")["mem_temp_c"].median()
            late = rel[rel.index >= ts - 0.1 * (ts - ps)].mean()
            rising += late > rel[(rel.index >= ps - 86400) & (rel.index < ps)].mean() + 3
    assert checked >= 5
    assert rising >= 0.85 * checked
    assert max(lengths) > 8 * min(lengths)  # precursors vary a lot from one GPU to the next
    if kind == "pcie_degradation":
        narrowed = df[df["uuid"].isin([f.gpu.uuid for f in res.failures])]["pcie_link_width"]
        assert (narrowed < 16).any()
    if kind == "cooling_degradation":
        hot = res.samples["clock_event_reasons"].astype(int) & CLOCK_EVENT_SW_THERMAL
        assert hot.any() and res.samples["thermal_violation_us"].max() > 0


def test_sudden_failures_have_no_precursor():
    spec = FleetSpec(nodes=4, days=6, step_s=300, accel=400, seed=8, sudden_fraction=1.0)
    res = Fleet(spec).run(progress=False)
    assert len(res.failures) >= 8
    assert all(f.kind in SUDDEN_KINDS and f.precursor_start_ts is None for f in res.failures)
    failing = {f.gpu.uuid: f.ts for f in res.failures}
    for e in res.events:
        if e.gpu.uuid in failing and e.ts < failing[e.gpu.uuid]:
            assert e.code not in {48, 64, 74, 79, 94, 95}, e
    last = _by_board(res.samples).groupby("uuid").last()
    assert (last.loc[list(failing), "ecc_dbe_aggregate_total"] == 0).all()


def test_sudden_share_and_failure_rate_match_the_configuration():
    spec = FleetSpec(nodes=128, days=200, step_s=600, accel=10, seed=21)
    fleet = Fleet(spec)
    failures = fleet.planned_failures(START + 200 * 86400)
    # sudden_fraction of the draws are sudden kinds; of the rest, the HBM ones are sudden
    # (an uncorrectable burst, no SBE ramp) at hbm_sudden_fraction
    drawn_sudden = np.mean(
        [f.kind in SUDDEN_KINDS and f.kind != "hbm_uncorrectable" for f in failures]
    )
    assert 0.25 < drawn_sudden < 0.35
    hbm = [f.kind for f in failures if f.kind in ("hbm_degradation", "hbm_uncorrectable")]
    assert abs(np.mean([k == "hbm_uncorrectable" for k in hbm]) - 34 / 39) < 0.05
    hbm_share = calib.PRECURSOR_MIX_COUNTS["hbm_degradation"] / sum(
        calib.PRECURSOR_MIX_COUNTS.values()
    )
    want = spec.sudden_fraction + (1 - spec.sudden_fraction) * hbm_share * spec.hbm_sudden_fraction
    assert abs(np.mean([f.kind in SUDDEN_KINDS for f in failures]) - want) < 0.05
    assert all((f.precursor_start_ts is None) == (f.kind in SUDDEN_KINDS) for f in failures)
    look = set(fleet.benign)
    healthy = [u for u in {f.gpu.uuid for f in failures}]
    assert look.isdisjoint(healthy)
    # failures per GPU-day the slot was filled, against the configured rate x accel
    down = sum(min(f.repair_s, START + 200 * 86400 - f.ts) for f in failures) / 86400
    rate = len(failures) / (128 * 8 * 200 - down)
    assert 0.85 < rate / (spec.failure_rate_per_gpu_day * spec.accel) < 1.15
    assert np.median([f.repair_s for f in failures]) < 2 * 86400 < max(f.repair_s for f in failures)


# --- benign look-alikes --------------------------------------------------------------------
def test_lookalikes_raise_alarms_and_never_fail():
    spec = FleetSpec(nodes=8, days=8, step_s=300, accel=100, seed=13, lookalike_fraction=0.4)
    fleet = Fleet(spec)
    res = fleet.run(progress=False)
    benign = fleet.benign
    assert len(set(benign.values())) >= 4
    later = fleet.planned_failures(START + 400 * 86400)
    assert set(benign).isdisjoint(f.gpu.uuid for f in later)
    df = _by_board(res.samples)
    failed = {f.gpu.uuid for f in later if f.ts < START + 16 * 86400}
    last, first = df.groupby("uuid").last(), df.groupby("uuid").first()
    sbe = last["ecc_sbe_aggregate_total"] - first["ecc_sbe_aggregate_total"]
    plain = [u for u in sbe.index if u not in benign and u not in failed]
    high = [u for u, k in benign.items() if k == "sbe_stable" and u in sbe.index]
    assert high and np.median(sbe[high]) > np.percentile(sbe[plain], 90)
    spread = (df["mem_temp_c"] - df["gpu_temp_c"]).groupby(df["uuid"]).mean()
    hot = [u for u, k in benign.items() if k == "hot_mem" and u in spread.index]
    assert hot and spread[hot].min() > spread[plain].median() + 3
    app = {e.gpu.uuid for e in res.events if e.code in (13, 31, 43)}
    assert len(app - failed) >= 5  # application Xids land on healthy GPUs


def test_rack_heat_event_warms_the_whole_rack():
    spec = FleetSpec(
        nodes=8, nodes_per_rack=2, days=6, step_s=300, seed=6, heat_events_per_rack_day=0.4
    )
    fleet = Fleet(spec)
    df = fleet.run(progress=False).samples
    # Temperature less what the board's own power explains: what is left is the air.
    theta = calib.MODELS["H100-80GB"].theta_gpu_c_per_w
    resid = df.assign(r=df["gpu_temp_c"] - theta * df["power_w"])
    air = resid.pivot_table(index="ts", columns="rack", values="r", observed=True)
    checked = 0
    for h in fleet.heat_events:
        if (
            h.amp_c <= 4
            or h.end_ts - h.start_ts < 5400
            or any(
                o != h and o.end_ts > h.start_ts - 6 * 3600 and o.start_ts < h.end_ts
                for o in fleet.heat_events
            )
        ):
            continue  # too weak, too short, or another event in the way
        gap = air[h.rack] - air.drop(columns=h.rack).median(axis=1)
        during = gap[(gap.index >= h.start_ts + 1800) & (gap.index < h.end_ts - 1800)]
        before = gap[(gap.index >= h.start_ts - 6 * 3600) & (gap.index < h.start_ts)]
        if len(during) and len(before):
            assert during.median() - before.median() > h.amp_c / 2
            checked += 1
    assert checked >= 2


# --- HBM failures without a corrected precursor (Calchas) ------------------------------------
def test_without_sudden_hbm_failures_the_fleet_is_the_one_drawn_before():
    # the sudden-HBM draw has its own stream: at 0 every board, failure and kind is as before
    spec = FleetSpec(nodes=32, days=60, step_s=600, accel=20, seed=4)
    old = Fleet(replace(spec, hbm_sudden_fraction=0.0)).planned_failures()
    new = Fleet(spec).planned_failures()
    assert len(old) == len(new) > 20
    for a, b in zip(old, new, strict=True):
        assert (a.ts, a.gpu) == (b.ts, b.gpu)
        if a.kind != b.kind:
            assert (a.kind, b.kind) == ("hbm_degradation", "hbm_uncorrectable")
            assert b.precursor_start_ts is None
    assert {f.kind for f in old} >= {"hbm_degradation"}
    assert "hbm_uncorrectable" not in {f.kind for f in old}


def test_sudden_hbm_failures_end_in_an_uncorrectable_burst_with_no_sbe_before():
    spec = FleetSpec(nodes=8, days=10, step_s=300, accel=300, seed=12, kinds=("hbm_uncorrectable",))
    res = Fleet(spec).run(progress=False)
    assert len(res.failures) >= 10
    df = _by_board(res.samples)
    ends = set()
    for f in res.failures:
        assert f.kind == "hbm_uncorrectable" and f.precursor_start_ts is None
        board = df[df["uuid"] == f.gpu.uuid].sort_values("ts")
        if len(board) < 3:
            continue
        last, before = board.iloc[-1], board.iloc[:-1]
        assert last["ecc_dbe_aggregate_total"] >= 1 + before["ecc_dbe_aggregate_total"].max()
        assert before["ecc_dbe_aggregate_total"].max() == 0  # nothing uncorrectable before
        n = board["ecc_dbe_aggregate_total"].iloc[-1]
        remapped = (
            last["remapped_rows_uncorrectable"] - board["remapped_rows_uncorrectable"].iloc[0]
        )
        assert remapped == min(n, 8)
        assert (last["remapped_rows_failure"] == 1) == (n > 8)
        ends.add(f.xid)
        assert f.xid == 64 if n > 8 else f.xid in (48, 95)
    assert ends >= {48, 95}


def test_sudden_hbm_failures_have_no_corrected_ramp():
    on = FleetSpec(nodes=16, days=10, step_s=600, accel=200, seed=14, kinds=("hbm_uncorrectable",))
    off = replace(on, kinds=("hbm_degradation",))
    growth = {}
    for name, spec in (("sudden", on), ("ramp", off)):
        res = Fleet(spec).run(progress=False)
        df = _by_board(res.samples)
        rises = []
        for f in res.failures:
            board = df[(df["uuid"] == f.gpu.uuid) & (df["ts"] >= f.ts - 86400)]
            if len(board) > 10:
                col = board["ecc_sbe_aggregate_total"]
                rises.append(col.iloc[-1] - col.iloc[0])
        growth[name] = np.median(rises)
    assert growth["sudden"] < 5 < growth["ramp"]


# --- benign temperature drift (wave 14) ------------------------------------------------------
def _temps(spec: FleetSpec, chunk_s: float = 86400) -> dict[str, np.ndarray]:
    parts = list(Fleet(spec).chunks(chunk_s=chunk_s, progress=False, frames=False))
    return {
        name: np.concatenate([np.where(p.alive, p.arrays[name], np.nan) for p in parts])
        for name in ("gpu_temp_c", "mem_temp_c", "power_w")
    }


def test_thermal_drift_moves_only_temperatures_by_the_drawn_amounts():
    spec = FleetSpec(nodes=8, days=12, step_s=600, seed=3)
    base = _temps(spec)
    # the core apart, per GPU: the HBM stays where it was
    core = _temps(replace(spec, thermal_drift_core_c=1.5))
    np.testing.assert_array_equal(core["power_w"], base["power_w"])
    np.testing.assert_array_equal(core["mem_temp_c"], base["mem_temp_c"])
    moved = core["gpu_temp_c"] - base["gpu_temp_c"]
    daily = np.nanmean(moved.reshape(12, -1, moved.shape[1]), axis=1)  # (day, GPU)
    # knots every 24 h joined linearly: a day's mean is the mean of two knots, sd 1.5 / sqrt(2)
    assert 0.85 < np.nanstd(daily) < 1.3
    assert abs(np.nanmean(daily)) < 0.3
    # per node, on both: the HBM-core spread hardly moves, and GPUs of a node move together
    node = _temps(replace(spec, thermal_drift_node_c=1.5))

    def days(a: np.ndarray) -> np.ndarray:  # (day, GPU) means: integer rounding averages out
        return np.nanmean(a.reshape(12, -1, a.shape[1]), axis=1)

    d_core = days(node["gpu_temp_c"] - base["gpu_temp_c"])
    d_mem = days(node["mem_temp_c"] - base["mem_temp_c"])
    assert np.nanstd(d_core) > 0.8 and np.nanstd(d_mem - d_core) < 0.15
    within_node = np.nanstd(d_core.reshape(12, 8, -1), axis=2)
    assert np.nanmean(within_node) < 0.15
    # a longer period moves slower: day-to-day change is smaller
    slow = _temps(replace(spec, thermal_drift_core_c=1.5, thermal_drift_period_h=96))
    fast_moves = np.diff(days(core["gpu_temp_c"] - base["gpu_temp_c"]), axis=0)
    slow_moves = np.diff(days(slow["gpu_temp_c"] - base["gpu_temp_c"]), axis=0)
    assert np.nanstd(slow_moves) < 0.6 * np.nanstd(fast_moves)


def test_thermal_drift_does_not_depend_on_the_chunk_length():
    spec = FleetSpec(
        nodes=2,
        days=3,
        step_s=300,
        seed=9,
        thermal_drift_hbm_c=1.0,
        thermal_drift_node_c=0.7,
        thermal_drift_period_h=7.5,
    )
    a, b = _temps(spec), _temps(spec, chunk_s=5 * 3600 + 300)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def test_thermal_drift_knobs_are_checked():
    with pytest.raises(ConfigError, match="thermal_drift_core_c"):
        FleetSpec(thermal_drift_core_c=-1.0)
    with pytest.raises(ConfigError, match="thermal_drift_period_h"):
        FleetSpec(thermal_drift_period_h=0.0)
