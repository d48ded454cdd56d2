"""The model as serve's scorer: records serve can read, one per scored GPU."""

import math

import pytest

from gpuwarden.alerts.base import RiskAssessment
from gpuwarden.models import assess, score_store
from gpuwarden.models._assess import _model
from gpuwarden.serve.assessors import default_assessor, model_assessor
from gpuwarden.store.sqlite import SqliteStore

T0 = 1_767_225_600.0  # 2026-01-01


@pytest.fixture(scope="module")
def demo_store():
    """A week of a 2-node fleet degrading fast, in a compacted SQLite store."""
    from gpuwarden.models.simdata import fleet_spec
    from gpuwarden.sim import Fleet

    fleet = Fleet(fleet_spec(nodes=2, days=7.0, accel=150.0, seed=5, start_ts=T0))
    store = SqliteStore(":memory:")
    for chunk in fleet.chunks(progress=False):
        store.write_frame(chunk.samples)
        store.write_events(chunk.events)
    store.write_failures(fleet.failures)
    end = T0 + 7 * 86400
    store.compact(end)
    return store, end


def test_serve_finds_the_model_and_reads_its_records(demo_store):
    store, at = demo_store
    assert model_assessor() is assess
    found = [RiskAssessment.coerce(a) for a in assess(store, at)]
    scored = score_store(store, _model(None), at=at)
    assert len(found) == len(scored) > 0
    by_uuid = {a.gpu.uuid: a for a in found}
    for row in scored.itertuples(index=False):
        a = by_uuid[row.uuid]
        assert a.gpu.hostname == row.hostname and a.gpu.index == row.gpu
        assert (math.isnan(a.risk) and math.isnan(row.risk)) or a.risk == row.risk
    # combined with the hard-signal assessor, every scored GPU still has the model's risk
    combined = {a.gpu.uuid: a for a in map(RiskAssessment.coerce, default_assessor()(store, at))}
    for uuid, a in by_uuid.items():
        if not math.isnan(a.risk):
            assert combined[uuid].risk >= a.risk
