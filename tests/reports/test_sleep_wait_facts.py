"""The report's sleep plan and measured queue wait per GPU model: the known week's store and a
scheduler database of placed jobs, figures worked out by hand, every template sentence and
recommendation passing the claim checker, and a wrong kWh caught."""

from __future__ import annotations

from known_week import SINCE, UNTIL, facts_of

from gpuwarden.reports import FACTS_VERSION, FactSources, build_facts
from gpuwarden.reports.build import checker_index
from gpuwarden.reports.claims import check
from gpuwarden.reports.recommend import recommend
from gpuwarden.reports.templates import summary
from gpuwarden.scheduler.sleep import SleepPolicy
from gpuwarden.scheduler.state import JobRow, NodeRow, SchedulerDB
from gpuwarden.store import open_store

H = 3600.0


def placed_jobs(path) -> str:
    """Ten one-GPU jobs on the H100 node, submitted in the known week, waiting 10, 20, .. 100
    min; one submitted before the week (not counted)."""
    db = SchedulerDB(path)
    gpus = [{"index": i, "model": "H100-80GB"} for i in (0, 1)]
    db.upsert_node(NodeRow("gpu-a01", 64000, 1 << 18, gpus, None, 0))
    spec = {"tasks": 1, "gpus_per_task": 1}
    for k in range(11):
        sub = SINCE + (k - 1) * 10 * H
        start = sub + 60.0 * (10 * k if k else 5)
        db.insert_job(JobRow(f"j{k}", k + 1, "ml", "train", spec, "succeeded", 0, None, sub,
                             sub, start, start + H, placement=[{"node": "gpu-a01"}]))  # fmt: skip
    db.close()
    return str(path)


def test_sleep_and_waits_from_store_and_scheduler(week, tmp_path):
    # gpu-b02 (2 x A100, 20 % busy, 2 x 250 W) sleeps every window hour under a 25 % threshold
    # with no headroom: 4 h x 5 nights + 48 weekend hours = 68 h; each saves its GPUs' draw plus
    # the 250 W base less 10 W asleep, except the 4 h of Wednesday's window when GPU 1 was
    # silent: 64 x 0.74 + 4 x 0.49 = 49.32 kWh
    policy = SleepPolicy(below=0.25, headroom_gpus=0)
    db = placed_jobs(tmp_path / "sched.db")
    f = facts_of(week[0], FactSources(scheduler_db=db, sleep_policy=policy))
    assert f.version == FACTS_VERSION == 4
    z = f.sleep
    assert z is not None
    assert (z.window_hours, z.nodes, z.nodes_sleeping, z.node_hours_asleep) == (68, 2, 1, 68)
    assert abs(z.kwh_saved - 49.32) < 0.05 and z.kwh_saved_per_week == z.kwh_saved
    assert [n.hostname for n in z.by_node] == ["gpu-b02"] and z.wake_at == "05:57"
    # waits 10..100 min: p50 55 min, p90 91 min (linear interpolation)
    (w,) = f.queue_wait_by_model or []
    assert (w.model, w.jobs, w.still_waiting) == ("H100-80GB", 10, 0)
    assert (w.wait_p50_min, w.wait_p90_min) == (55, 91)
    ix = checker_index(f)
    texts = [s.text for s in summary(f)] + [r.text for r in recommend(f)]
    assert any("49.3 kWh a week" in t for t in texts)
    assert any("H100-80GB jobs waited 55 min at the median and 91 min at p90" in t for t in texts)
    for t in texts:
        assert check(t, ix) == {}, t
    (rec,) = [r for r in recommend(f) if r.kind == "sleep"]
    assert "sleep.kwh_saved_per_week = 49.3" in rec.cites
    wrong = rec.text.replace("49.3 kWh", "93 kWh")
    assert check(wrong, ix), wrong


def test_default_policy_keeps_headroom_and_absent_sections_say_why(week):
    # the guideline's policy keeps 8 GPUs awake: the known week's 4 GPUs all stay awake
    f = facts_of(week[0], FactSources())
    assert f.sleep is not None and f.sleep.nodes_sleeping == 0 and f.sleep.kwh_saved == 0
    assert f.queue_wait_by_model is None
    assert any(a.section == "scheduler" for a in f.absent)
    ix = checker_index(f)
    (line,) = [s.text for s in summary(f) if s.topic == "sleep"]
    assert "no node would have slept" in line and check(line, ix) == {}
    assert not [r for r in recommend(f) if r.kind == "sleep"]
    # the known week's scheduler database: its jobs allow any GPU model, and say so
    g = facts_of(week[0], FactSources(scheduler_db=week[1]))
    assert g.queue_wait_by_model is not None  # the known week's jobs count under "any"
    assert all(check(s.text, checker_index(g)) == {} for s in summary(g))


def test_queue_wait_absent_outside_the_jobs(week, tmp_path):
    db = placed_jobs(tmp_path / "sched.db")
    store = open_store(week[0])
    try:
        f = build_facts(store, SINCE - 7 * 86400, SINCE - 6 * 86400,
                        sources=FactSources(scheduler_db=db), now=UNTIL, compare=False)  # fmt: skip
    finally:
        store.close()
    assert f.queue_wait_by_model is None
    assert any(a.section == "queue wait by model" and "no GPU job" in a.why for a in f.absent)


def test_jobs_still_waiting_give_lower_bounds(week, tmp_path):
    db = SchedulerDB(tmp_path / "sched.db")
    gpus = [{"index": 0, "model": "A100-80GB"}]
    db.upsert_node(NodeRow("gpu-b02", 64000, 1 << 18, gpus, None, 0))
    spec = {"tasks": 1, "gpus_per_task": 1, "gpu_models": ["A100-80GB"]}
    for k, (sub, start) in enumerate(((UNTIL - 4 * H, UNTIL - 3 * H), (UNTIL - 2 * H, None))):
        db.insert_job(JobRow(f"w{k}", k + 1, "ml", "train", spec, "queued" if start is None
                             else "succeeded", 0, None, sub, sub, start))  # fmt: skip
    db.close()
    f = facts_of(week[0], FactSources(scheduler_db=str(tmp_path / "sched.db")))
    # waits 60 min (started) and 120 min so far (still queued at the period's end)
    (w,) = f.queue_wait_by_model or []
    assert (w.model, w.jobs, w.still_waiting, w.wait_p50_min, w.wait_p90_min) == (
        "A100-80GB",
        2,
        1,
        90,
        114,
    )
    (line,) = [s.text for s in summary(f) if "A100-80GB jobs" in s.text]
    assert "at least 90 min at the median" in line and "1 still waiting" in line
    assert check(line, checker_index(f)) == {}
    assert check(line.replace("1 still waiting", "3 still waiting"), checker_index(f))


def test_the_prompt_carries_the_twenty_nodes_that_save_most(facts):
    import json

    from gpuwarden.reports.model import SleepNode
    from gpuwarden.reports.writer import prompt_facts

    assert facts.sleep is not None
    many = [SleepNode(hostname=f"n{i}", gpus=8, hours_asleep=68, window_util_pct=3.0,
                      kwh_saved=500.0 - i) for i in range(300)]  # fmt: skip
    big = facts.model_copy(update={"sleep": facts.sleep.model_copy(update={"by_node": many})})
    nodes = json.loads(prompt_facts(big))["sleep"]["by_node"]
    assert [n["hostname"] for n in nodes] == [f"n{i}" for i in range(20)]
