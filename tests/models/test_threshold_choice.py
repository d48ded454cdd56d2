"""The shipped threshold's rule (``make_default.choose_threshold``), on operating curves
written out by hand, in the shape ``gpuwarden evaluate``'s summary gives them."""

import pytest

from gpuwarden.models.make_default import (
    FAMILY_BUDGET,
    VALIDATION_BUDGET,
    choose_threshold,
    pooled_curve,
)


def summary(catchable: int, gpu_days: float, curve: dict[float, tuple[int, float]]) -> dict:
    """A fleet's summary: per threshold (catchable caught, false flags per 1,000 GPU-days)."""
    return {
        "catchable_by_mode": {"ALL with precursors": (catchable, 0)},
        "false_flag_gpu_days_30d": gpu_days,
        "operating_curve": [
            {
                "threshold": t,
                "catchable_share": caught / catchable if catchable else float("nan"),
                "false_flags_per_1000": ff,
                "recall_24h": 0.0,
            }
            for t, (caught, ff) in sorted(curve.items())
        ],
    }


def test_the_family_budget_can_refuse_a_threshold_the_default_fleet_allows():
    default = summary(100, 10_000, {0.5: (90, 0.4), 0.6: (88, 0.3), 0.7: (80, 0.1)})
    # pooled over the two members: 0.5 makes 1.5 per 1,000, 0.6 makes 0.9
    family = [
        summary(10, 1_000, {0.5: (9, 2.0), 0.6: (8, 1.0), 0.7: (5, 0.0)}),
        summary(10, 1_000, {0.5: (9, 1.0), 0.6: (8, 0.8), 0.7: (6, 0.0)}),
    ]
    choice = choose_threshold(default, family)
    assert choice["threshold"] == 0.6
    fam = {c["threshold"]: c for c in choice["family_curve"]}
    assert fam[0.5]["caught"] == 18 and fam[0.5]["false_flags_per_1000"] == pytest.approx(1.5)
    assert fam[0.6]["false_flags_per_1000"] <= FAMILY_BUDGET < fam[0.5]["false_flags_per_1000"]
    assert "2001" in choice["rule"] and f"<= {VALIDATION_BUDGET:g}" in choice["rule"]


def test_a_tie_goes_to_the_higher_threshold_and_no_threshold_in_budget_to_the_highest():
    default = summary(100, 10_000, {0.5: (90, 0.2), 0.6: (90, 0.1), 0.7: (70, 0.0)})
    family = [summary(10, 1_000, {0.5: (8, 0.0), 0.6: (8, 0.0), 0.7: (5, 0.0)})]
    assert choose_threshold(default, family)["threshold"] == 0.6
    noisy = [summary(10, 1_000, {0.5: (8, 9.0), 0.6: (8, 7.0), 0.7: (5, 3.0)})]
    assert choose_threshold(default, noisy)["threshold"] == 0.7


def test_pooled_false_flags_are_weighed_by_gpu_days():
    # a small fleet's high rate does not outvote a large quiet one
    big = summary(50, 9_000, {0.6: (40, 0.0)})
    small = summary(5, 1_000, {0.6: (4, 5.0)})
    (point,) = pooled_curve([big, small])
    assert point["false_flags_per_1000"] == pytest.approx(0.5)
    assert (point["catchable"], point["caught"]) == (55, 44)
    # a fleet with no catchable failure adds GPU-days, not catches
    empty = summary(0, 10_000, {0.6: (0, 0.0)})
    (point,) = pooled_curve([big, small, empty])
    assert (point["catchable"], point["caught"]) == (55, 44)
    assert point["false_flags_per_1000"] == pytest.approx(0.25)


def test_curves_at_other_thresholds_are_refused():
    a = summary(10, 100, {0.5: (5, 0.0)})
    b = summary(10, 100, {0.6: (5, 0.0)})
    with pytest.raises(ValueError, match="different thresholds"):
        pooled_curve([a, b])
    with pytest.raises(ValueError, match="no family"):
        choose_threshold(a, [])


def test_the_line_grid_is_the_curves_own_unless_asked_finer():
    from gpuwarden.models.evaluate import CURVE_THRESHOLDS
    from gpuwarden.models.make_default import line_grid, main

    assert line_grid(0.05) == CURVE_THRESHOLDS
    fine = line_grid(0.01)
    assert set(CURVE_THRESHOLDS) <= set(fine) and fine == tuple(sorted(fine))
    inside = [t for t in fine if 0.3 <= t <= 0.8]
    assert len(inside) == 51 and 0.57 in inside
    assert [t for t in fine if t < 0.3 or t > 0.8] == [
        t for t in CURVE_THRESHOLDS if t < 0.3 or t > 0.8
    ]
    for bad in (0.0, -0.01, 0.1):
        with pytest.raises(ValueError, match="line step"):
            line_grid(bad)
    with pytest.raises(SystemExit):
        main(["--line-step", "0.2"])
