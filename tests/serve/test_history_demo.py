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
    at_risk: dict[str, float] = {}
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
    start = float(last["ts"]) - 3600 - 48 * 3600
    assert all(start <= at <= float(last["ts"]) - 3600 for at in at_risk.values())
    failed = {f.gpu.uuid for f in fleet.failures}
    said = "the board failed" if flagged in failed else "no failure of this board is recorded"
    assert f"what became of it: {said}" in text, text


def test_the_replay_flags_at_the_line_serve_uses():
    """The replay decides as ``gpuwarden serve`` does, at the model's line (here the setting's,
    set low so the first round holds GPUs between it and the decision engine's own default):
    every GPU the model scores at or above it in the first round is at-risk from that round."""
    from gpuwarden.alerts.base import RiskAssessment
    from gpuwarden.health import GpuState, use_at_risk_threshold
    from gpuwarden.serve.assessors import default_assessor

    store, _ = _history(21)
    end = float(store.gpus()["last_ts"].max())
    first = end - 12 * 3600
    lines: list[str] = []
    at_risk: dict[str, float] = {}
    use_at_risk_threshold(0.4)
    try:
        scored = [
            RiskAssessment.coerce(a) for a in default_assessor(lookback_s=4 * 3600)(store, first)
        ]
        run_history_loop_demo(
            store, hours=12, step_h=4, end=end, echo=lines.append, at_risk=at_risk
        )
    finally:
        use_at_risk_threshold(None)
        store.close()
    above = {a.gpu.uuid for a in scored if a.risk >= 0.4 and a.state is not GpuState.UNHEALTHY}
    assert "at-risk from 0.40" in "\n".join(lines)
    assert any(a.risk < 0.7 for a in scored if a.gpu.uuid in above), "no GPU between the lines"
    assert {u for u, at in at_risk.items() if at == first} >= above


def test_the_failing_gpu_is_narrated_and_every_other_flag_has_its_line():
    """Given the GPU that failed (``focus``), the replay narrates that GPU when it is flagged,
    even after another, and gives every other at-risk decision a line of its own."""
    store, _ = _history(21)
    last = last_catchable_failure(store)
    end = float(last["ts"]) - 3600
    plain: dict[str, float] = {}
    run_history_loop_demo(store, hours=96, step_h=4, end=end, echo=lambda _: None, at_risk=plain)
    # the first GPU flagged in the window is not the focus: the one flagged last is
    focus = max(plain, key=lambda u: (plain[u], u))
    lines: list[str] = []
    at_risk: dict[str, float] = {}
    flagged = run_history_loop_demo(
        store, hours=96, step_h=4, end=end, echo=lines.append, at_risk=at_risk, focus=focus
    )
    gpus = store.gpus().set_index("uuid")
    store.close()
    text = "\n".join(lines)
    assert len(plain) >= 2 and min(plain.values()) < plain[focus], plain
    assert flagged == focus and at_risk == plain
    for uuid in at_risk:
        slot = f"{gpus.loc[uuid, 'hostname']}/{gpus.loc[uuid, 'gpu']}"
        assert f"  {slot} ok -> at-risk, risk " in text, (slot, text)
    narrated = f"{gpus.loc[focus, 'hostname']}/{gpus.loc[focus, 'gpu']} is now at-risk"
    assert narrated in text and text.count("is now at-risk in the bundled scheduler") == 1
