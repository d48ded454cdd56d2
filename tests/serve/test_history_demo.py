"""The demo's risk loop over stored history, with the shipped model: the GPU it flags is one the
simulator was degrading, and the bundled scheduler moves the critical job off it."""

import pytest

from gpuwarden.models.simdata import fleet_spec
from gpuwarden.serve.history_demo import run_history_loop_demo
from gpuwarden.sim import Fleet
from gpuwarden.store.sqlite import SqliteStore

T0 = 1_767_225_600.0  # 2026-01-01


@pytest.fixture(scope="module")
def history():
    fleet = Fleet(fleet_spec(nodes=4, days=14.0, accel=150.0, seed=21, start_ts=T0))
    store = SqliteStore(":memory:")
    for chunk in fleet.chunks(progress=False):
        store.write_frame(chunk.samples)
        store.write_events(chunk.events)
    store.write_failures(fleet.failures)
    store.compact(T0 + 14 * 86400)
    yield store, fleet
    store.close()


def test_flags_a_degrading_gpu_and_moves_its_job(history):
    store, fleet = history
    lines: list[str] = []
    flagged = run_history_loop_demo(store, hours=96, step_h=4, echo=lines.append)
    text = "\n".join(lines)
    assert flagged is not None, text
    degrading = {f.gpu.uuid for f in fleet.failures if f.precursor_start_ts is not None}
    assert flagged in degrading, text
    assert "told to checkpoint and leave" in text
    assert "is now at-risk in the bundled scheduler" in text
