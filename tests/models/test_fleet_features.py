"""Thermal rises read against the whole fleet's at the same hour (``spread_rise_vs_fleet``,
``hbm_load_rise_vs_fleet``, ``core_load_rise_vs_fleet``)."""

from __future__ import annotations

import numpy as np
import pytest
from modelkit import T0, make_frame, no_events, no_failures

from gpuwarden.models.features import (
    FLEET_MIN_GPUS,
    LOAD_FIT_MIN_H,
    compute_features,
    fleet_stats,
    rows_at,
)
from gpuwarden.models.panel import panel_from_frames
from gpuwarden.models.simdata import concat_panels

DAYS = 8
SICK = 5


def _gpus(n: int) -> list[tuple[str, int, str]]:
    return [(f"node{g // 8:03d}", g % 8, f"GPU-{g}") for g in range(n)]


def _fleet(n: int, *, wander_c: float):
    """``n`` GPUs for 8 days; each board's HBM temperature moves by up to ``wander_c`` from day
    to day (benign drift), and GPU ``SICK``'s rises 2.5 C over the last day (a cold plate)."""

    def mem(ts: np.ndarray, g: int) -> np.ndarray:
        day = np.floor((ts - T0) / 86400.0)
        drift = wander_c * np.sin(1.7 * g + 2.3 * day)
        sick = np.where((g == SICK) & (ts >= T0 + (DAYS - 1) * 86400), 2.5, 0.0)
        return 62.0 + 0.05 * np.sin(g) + drift + sick

    frame = make_frame(DAYS * 24, _gpus(n), step_s=3600, values={"mem_temp_c": mem})
    return panel_from_frames([frame], no_events(), no_failures())


def _last(panel):
    meta, X = compute_features(panel, rows_at(panel, [panel.shape[0] - 1]))
    return X.set_index(meta["key"])["spread_rise_vs_fleet"]


def test_a_rise_stands_out_on_a_still_fleet_and_not_where_every_board_wanders():
    still = _last(_fleet(32, wander_c=0.0))
    wandering = _last(_fleet(32, wander_c=2.0))
    sick = [k for k in still.index if k.endswith(f"GPU-{SICK}")]
    assert still[sick].iloc[0] > 10  # 2.5 C against a floor of 0.1 C
    assert (still.drop(sick).abs() < 1).all()
    assert wandering[sick].iloc[0] < 2  # the same 2.5 C is the fleet's usual day
    # without the sick board the wandering fleet's rises are spread around 0, not all flagged
    assert wandering.drop(sick).abs().median() < 1


def test_too_few_gpus_leave_the_fleet_scale_unknown():
    z = _last(_fleet(FLEET_MIN_GPUS - 1, wander_c=0.0))
    assert z.isna().all()


def test_fleets_side_by_side_are_scaled_each_by_its_own():
    alone = _last(_fleet(32, wander_c=0.0))
    both = concat_panels([_fleet(32, wander_c=0.0), _fleet(32, wander_c=2.0)], ["a", "b"])
    z = _last(both)
    still = z[[k.startswith("a/") for k in z.index]]
    assert still.to_numpy() == pytest.approx(alone.to_numpy())


def _loaded_fleet(n: int, *, hotter_c: float, new_job_w: float):
    """``n`` GPUs for 8 days, power swinging with the day; temperatures follow power on a line.
    On the last day GPU ``SICK`` runs ``hotter_c`` hotter at the same power (a cold plate) and
    GPU 0 draws ``new_job_w`` more (a heavier job, as hot as its line says)."""

    def power(ts: np.ndarray, g: int) -> np.ndarray:
        last = ts >= T0 + (DAYS - 1) * 86400
        return (
            420.0
            + 120.0 * np.sin(2 * np.pi * ts / 86400 + g)
            + np.where(last & (g == 0), new_job_w, 0.0)
        )

    def temp(base: float):
        def f(ts: np.ndarray, g: int) -> np.ndarray:
            last = ts >= T0 + (DAYS - 1) * 86400
            return base + 0.05 * power(ts, g) + np.where(last & (g == SICK), hotter_c, 0.0)

        return f

    frame = make_frame(
        DAYS * 24,
        _gpus(n),
        step_s=3600,
        values={"power_w": power, "mem_temp_c": temp(40.0), "gpu_temp_c": temp(35.0)},
    )
    return panel_from_frames([frame], no_events(), no_failures())


def test_hotter_at_the_same_power_counts_and_a_heavier_job_does_not():
    panel = _loaded_fleet(32, hotter_c=3.0, new_job_w=150.0)
    meta, X = compute_features(panel, rows_at(panel, [panel.shape[0] - 1]))
    X = X.set_index(meta["uuid"])
    for name in ("hbm_load_rise_vs_fleet", "core_load_rise_vs_fleet"):
        assert X.loc[f"GPU-{SICK}", name] > 10, name  # 3 C against a still fleet's 0.1 C floor
        assert abs(X.loc["GPU-0", name]) < 1, name  # 7.5 C warmer, as its line says
    # the plain week-on-week HBM rise cannot tell them apart: the heavier job reads hotter
    assert X.loc["GPU-0", "mem_temp_rise_c"] > X.loc[f"GPU-{SICK}", "mem_temp_rise_c"]


def test_temperature_at_the_same_power_is_unknown_without_power_or_two_days_before():
    """Missing is not zero: a GPU whose power is unread, or the whole fleet with under
    ``LOAD_FIT_MIN_H`` hours before the last day, gets NaN, not a rise of 0."""
    panel = _loaded_fleet(32, hotter_c=3.0, new_job_w=0.0)
    panel.gauge["power_w"][:, 1] = np.nan  # GPU 1's power is never read
    meta, X = compute_features(panel, rows_at(panel, [panel.shape[0] - 1]))
    X = X.set_index(meta["uuid"])
    assert np.isnan(X.loc["GPU-1", "hbm_load_rise_vs_fleet"])
    assert X.loc[f"GPU-{SICK}", "hbm_load_rise_vs_fleet"] > 10  # the others still read
    short = 24 + LOAD_FIT_MIN_H - 1  # one hour short of the fit's history
    meta, X = compute_features(panel, rows_at(panel, [short - 1]))
    assert X[["hbm_load_rise_vs_fleet", "core_load_rise_vs_fleet"]].isna().all().all()


def _sbe_fleet(n: int, *, benign_per_day: float, sick_per_day: float = 200.0, unread: int = 0):
    """``n`` GPUs for 8 days logging single-bit errors: every eighth board ``benign_per_day``
    (benign noise), GPU ``SICK`` ``sick_per_day``, the rest none; the last ``unread`` boards do
    not report the counter (NaN in every sample)."""

    def sbe(ts: np.ndarray, g: int) -> np.ndarray:
        per_day = sick_per_day if g == SICK else benign_per_day if g % 8 == 0 else 0.0
        if g >= n - unread:
            return np.full(ts.size, np.nan)
        return per_day * (ts - T0) / 86400.0

    values = {"ecc_sbe_volatile_total": sbe, "ecc_sbe_aggregate_total": sbe}
    frame = make_frame(DAYS * 24, _gpus(n), step_s=3600, values=values)
    return panel_from_frames([frame], no_events(), no_failures())


def _level(panel):
    meta, X = compute_features(panel, rows_at(panel, [panel.shape[0] - 1]))
    return X.set_index(meta["key"])[["sbe_fleet_level_7d", "sbe_vs_fleet_level_7d"]]


def test_an_error_rate_stands_out_on_a_quiet_fleet_and_not_on_a_noisy_one():
    """Wave 24: another fleet's benign noise may be forty times this simulator's; the same
    200 single-bit errors a day read against the fleet's level, not on their own."""
    quiet = _level(_sbe_fleet(32, benign_per_day=2.0))
    noisy = _level(_sbe_fleet(32, benign_per_day=300.0))
    sick = next(k for k in quiet.index if k.endswith(f"GPU-{SICK}"))
    assert noisy["sbe_fleet_level_7d"].iloc[0] > quiet["sbe_fleet_level_7d"].iloc[0] + 3
    assert quiet.loc[sick, "sbe_vs_fleet_level_7d"] > 3  # log(201 / 3)
    assert noisy.loc[sick, "sbe_vs_fleet_level_7d"] < 0.5
    # one level per fleet and hour: every GPU reads the same
    assert quiet["sbe_fleet_level_7d"].nunique() == 1


def test_the_fleet_level_leaves_unread_counters_out_and_needs_enough_gpus():
    small = _level(_sbe_fleet(FLEET_MIN_GPUS - 1, benign_per_day=2.0))
    assert small.isna().all().all()
    # 20 boards that do not report the counter are not 20 boards with no errors: the level is
    # the read boards' (a fifth of which log errors), not pulled down by the unread ones
    part = _level(_sbe_fleet(40, benign_per_day=300.0, unread=20))
    read = _level(_sbe_fleet(20, benign_per_day=300.0))
    assert part["sbe_fleet_level_7d"].iloc[0] == pytest.approx(read["sbe_fleet_level_7d"].iloc[0])
    unread = [k for k in part.index if int(k.rsplit("-", 1)[1]) >= 20]
    assert part.loc[unread, "sbe_vs_fleet_level_7d"].isna().all()


def test_a_shard_reads_its_gpus_against_the_whole_fleets_level():
    """``fleet_stats`` of the whole fleet, passed to a shard's ``compute_features``, gives its
    GPUs the levels one process gives them, also in a shard too small to read a level of its
    own; a time the table lacks has no level (NaN), not the shard's."""
    panel = _sbe_fleet(40, benign_per_day=300.0)
    last = panel.shape[0] - 1
    everyone = rows_at(panel, [last - 1, last])
    levels = fleet_stats(panel, everyone)
    assert list(levels.index) == [float(panel.hours[t] + 3600) for t in (last - 1, last)]
    _, whole = compute_features(panel, everyone)
    shard = everyone[everyone[:, 1] < FLEET_MIN_GPUS - 1]  # 15 GPUs at each of the two hours
    mine = np.isin(np.arange(len(everyone)), np.flatnonzero(everyone[:, 1] < FLEET_MIN_GPUS - 1))
    names = ["sbe_fleet_level_7d", "sbe_vs_fleet_level_7d", "pcie_vs_fleet_level_7d"]
    _, alone = compute_features(panel, shard)
    assert alone[names[:2]].isna().all().all()
    _, shared = compute_features(panel, shard, fleet=levels)
    assert np.allclose(shared[names], whole.loc[mine, names], equal_nan=True)
    assert shared["sbe_fleet_level_7d"].notna().all()
    _, late = compute_features(panel, shard, fleet=levels.iloc[:1])
    assert late["sbe_fleet_level_7d"].isna().sum() == len(shard) // 2


def test_a_shard_reads_its_thermal_rises_against_the_whole_fleets():
    """The same for the rises against the fleet's (median and scale of the whole fleet)."""
    panel = _fleet(32, wander_c=1.0)
    everyone = rows_at(panel, [panel.shape[0] - 1])
    _, whole = compute_features(panel, everyone)
    mine = everyone[:, 1] < FLEET_MIN_GPUS - 1  # GPU SICK among them
    name = "spread_rise_vs_fleet"
    _, alone = compute_features(panel, everyone[mine])
    assert alone[name].isna().all()  # too few GPUs for a scale of their own
    _, shared = compute_features(panel, everyone[mine], fleet=fleet_stats(panel, everyone))
    assert np.allclose(shared[name], whole.loc[mine, name], equal_nan=True)
    assert shared[name].notna().all() and int(shared[name].to_numpy().argmax()) == SICK
