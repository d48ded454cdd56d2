"""The rollup series a scoring read selects on VictoriaMetrics hold what scoring reads: the
health series exactly its fields besides use and draw, so no field is decoded for nothing but
the two of the report's four that scoring does not read."""

from __future__ import annotations

from gpuwarden.models import _hourly
from gpuwarden.store import _prom_rollups


def test_the_health_series_holds_what_scoring_reads_and_nothing_else() -> None:
    read = set(_hourly.ROLLUP_FIELDS)
    assert set(_prom_rollups.HEALTH) == read - set(_prom_rollups.USAGE)
    decoded = len(_prom_rollups.HEALTH) + len(_prom_rollups.USAGE)
    assert decoded - len(read) == len(set(_prom_rollups.USAGE) - read) == 2
