import math

import numpy as np

from gpuwarden.counters import reset_count, step_increases, total_increase


def test_increase_across_reset_is_never_negative():
    # 10 errors, then the driver reloads (counter back to 0) and 3 more arrive
    series = [100, 105, 110, 0, 2, 3]
    assert total_increase(series) == 10 + 0 + 3
    assert np.nanmin(step_increases(series)) >= 0
    assert reset_count(series) == 1


def test_gaps_are_skipped_not_zero():
    series = [5, np.nan, np.nan, 9]
    inc = step_increases(series)
    assert math.isnan(inc[1]) and math.isnan(inc[2])
    assert inc[3] == 4


def test_no_readings_means_unknown_not_zero():
    assert math.isnan(total_increase([np.nan, np.nan]))
    assert math.isnan(total_increase([7]))
    assert total_increase([7, 7]) == 0
