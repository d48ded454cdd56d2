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


def test_serve_warns_of_a_drifting_fleet_once_a_day_and_exports_the_figure(tmp_path, caplog):
    """A fleet whose HBM temperatures drift 4 C from day to day: serve's scorer logs the drift
    warning once a day (not every minute) and ``/metrics`` carries the figure."""
    import logging
    from dataclasses import replace

    from gpuwarden.models import _assess
    from gpuwarden.models.score import SPREAD_DRIFT_LIMIT_C
    from gpuwarden.models.simdata import fleet_spec
    from gpuwarden.serve.metrics import render
    from gpuwarden.serve.service import RiskService
    from gpuwarden.sim import Fleet

    spec = fleet_spec(nodes=2, days=9.0, accel=1.0, seed=5, start_ts=T0)
    fleet = Fleet(replace(spec, thermal_drift_hbm_c=4.0))
    store = SqliteStore(tmp_path / "drift.db")
    for chunk in fleet.chunks(progress=False):
        store.write_frame(chunk.samples)
    end = T0 + 9 * 86400
    _assess._drift.update(spread_drift_c=None, warned_at=None)
    caplog.set_level(logging.WARNING, logger="gpuwarden.models")

    def warned() -> int:
        return sum("from day to day" in r.getMessage() for r in caplog.records)

    for at, expected in ((end - 3600, 1), (end - 1800, 1), (end - 3600 + 86400, 2)):
        assess(store, at)
        assert warned() == expected, at
    assert _assess.spread_drift() > SPREAD_DRIFT_LIMIT_C
    service = RiskService(store, assess=default_assessor(), clock=lambda: end, verdicts=None)
    service.tick()
    text = render(service).decode()
    line = next(s for s in text.splitlines() if s.startswith("gpuwarden_fleet_spread_drift_c"))
    assert float(line.split()[1]) == pytest.approx(_assess.spread_drift())
    store.close()


def test_serve_warns_of_a_fleet_logging_more_errors_and_exports_its_level(tmp_path, caplog):
    """A fleet whose every error rate runs 100x the default simulator's: serve's scorer logs the
    error-level warning once a day, and ``/metrics`` carries the level and its limit, which
    the shipped rule GpuFleetErrorLevelHigh compares."""
    import logging

    from gpuwarden.models import _assess
    from gpuwarden.models.simdata import fleet_spec
    from gpuwarden.serve.metrics import render
    from gpuwarden.serve.service import RiskService
    from gpuwarden.sim import Fleet

    spec = fleet_spec(nodes=4, days=9.0, accel=1.0, seed=5, start_ts=T0).counters_scaled(100.0)
    store = SqliteStore(tmp_path / "loud.db")
    for chunk in Fleet(spec).chunks(progress=False):
        store.write_frame(chunk.samples)
    end = T0 + 9 * 86400
    _assess._drift.update(spread_drift_c=None, warned_at=None)
    caplog.set_level(logging.WARNING, logger="gpuwarden.models")
    for at in (end - 3600, end - 1800):
        assess(store, at)
    said = [r.getMessage() for r in caplog.records if "log more errors" in r.getMessage()]
    assert len(said) == 1, said
    level, limit = _assess.error_level()
    key = "pcie_replay_per_min_7d@0.75"  # the single-bit level of x100 is inside x40's noise
    assert level[key] > limit[key] > 0
    service = RiskService(store, assess=default_assessor(), clock=lambda: end, verdicts=None)
    service.tick()
    text = render(service).decode()

    def sample(name: str) -> float:
        prefix = f'{name}{{feature="pcie_replay_per_min_7d",quantile="0.75"}} '
        return float(next(s for s in text.splitlines() if s.startswith(prefix)).split()[-1])

    assert sample("gpuwarden_fleet_error_level") > sample("gpuwarden_fleet_error_level_limit")
    store.close()


def test_combined_reasons_say_each_xid_once():
    """The model says "1 double-bit ECC error in 24 h (Xid 48, ...): drain ..." and the
    hard-signal assessor "Xid 48 (Double-bit ECC error)" and "1 double-bit ECC error
    (ecc_dbe_volatile_total)": a person reads Xid 48 once. A code only the second names, and
    a reason that names none, stay."""
    from gpuwarden.serve.assessors import combine
    from gpuwarden.telemetry import GpuId

    gpu = GpuId("n1", 0, "GPU-1")
    model = RiskAssessment(gpu, T0, 0.2, reasons=(
        "1 double-bit ECC error in 24 h (Xid 48, Double-bit ECC error): Drain the GPU",
        "HBM 95 C, 12 C above the core",
    ))  # fmt: skip
    hard = RiskAssessment(gpu, T0, math.nan, hard_signal="Xid 94 (Contained ECC error)", reasons=(
        "Xid 94 (Contained ECC error)",
        "Xid 48 (Double-bit ECC error)",
        "1 double-bit ECC error (ecc_dbe_volatile_total)",
        "GPU requires a reset",
    ))  # fmt: skip
    merged = combine(lambda s, at: [model], lambda s, at: [hard])(None, T0)  # type: ignore[arg-type]
    assert merged[0].reasons == (
        *model.reasons,
        "Xid 94 (Contained ECC error)",
        "GPU requires a reset",
    )
    assert merged[0].hard_signal == "Xid 94 (Contained ECC error)" and merged[0].risk == 0.2
