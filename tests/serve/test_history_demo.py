"""The demo's risk loop over stored history, with the shipped model: the GPU it flags is one the
simulator was degrading (on all but at most one of ``SEEDS``), and the bundled scheduler moves
the critical job off it."""

from gpuwarden.models.simdata import fleet_spec
from gpuwarden.serve.history_demo import last_catchable_failure, run_history_loop_demo
from gpuwarden.sim import Fleet
from gpuwarden.store.sqlite import SqliteStore

T0 = 1_767_225_600.0  # 2026-01-01


#: Fleets of 32 GPUs. On seed 21 (the only one until wave 24) the shipped model's first flag is
#: a healthy board: a single-bit burst of 96 a day with a row remap, loud against a quiet fleet.
#: On 22-26 it is a degrading GPU each time.
SEEDS = (21, 22, 23)


def _history(seed: int):
    fleet = Fleet(fleet_spec(nodes=4, days=14.0, accel=150.0, seed=seed, start_ts=T0))
    store = SqliteStore(":memory:")
    for chunk in fleet.chunks(progress=False):
        store.write_frame(chunk.samples)
        store.write_events(chunk.events)
    store.write_failures(fleet.failures)
    store.compact(T0 + 14 * 86400)
    return store, fleet


def test_flags_a_degrading_gpu_and_moves_its_job():
    right = 0
    for seed in SEEDS:
        store, fleet = _history(seed)
        lines: list[str] = []
        flagged = run_history_loop_demo(store, hours=96, step_h=4, echo=lines.append)
        store.close()
        text = "\n".join(lines)
        assert flagged is not None, text
        assert "told to checkpoint and leave" in text
        assert "is now at-risk in the bundled scheduler" in text
        right += flagged in {f.gpu.uuid for f in fleet.failures if f.precursor_start_ts}
    assert right >= len(SEEDS) - 1, right


def test_the_window_before_the_last_catchable_failure_and_what_became_of_the_flag():
    store, fleet = _history(21)
    last = last_catchable_failure(store)
    catchable = [
        f for f in fleet.failures if f.precursor_start_ts and f.ts - f.precursor_start_ts >= 86400
    ]
    assert last is not None and catchable
    newest = max(catchable, key=lambda f: f.ts)
    assert (last["uuid"], float(last["ts"])) == (newest.gpu.uuid, newest.ts)
    lines: list[str] = []
    at_risk: set[str] = set()
    flagged = run_history_loop_demo(
        store, hours=48, step_h=4, end=float(last["ts"]) - 3600, echo=lines.append, at_risk=at_risk
    )
    text = "\n".join(lines)
    store.close()
    assert "replaying the 48 h to " in text and "replaying the last" not in text
    if flagged is None:
        assert "the model flagged no GPU in this window" in text
        return
    assert flagged in at_risk
    failed = {f.gpu.uuid for f in fleet.failures}
    said = "the board failed" if flagged in failed else "no failure of this board is recorded"
    assert f"what became of it: {said}" in text, text
