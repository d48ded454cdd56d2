"""The report's spot section: the known week's store and a scheduler database whose gpu-b02 is a
spot node, one reclaim in the week and one before it, figures worked out by hand below; every
template sentence passes the claim checker, and a wrong spot figure is caught."""

from __future__ import annotations

import pytest
from known_week import SINCE, UNTIL, facts_of

from gpuwarden.planning.tco import load_prices
from gpuwarden.reports import FactSources
from gpuwarden.reports.build import checker_index
from gpuwarden.reports.claims import check
from gpuwarden.reports.pseudonym import Pseudonyms
from gpuwarden.reports.render import blocks, markdown
from gpuwarden.reports.templates import summary
from gpuwarden.reports.writer import Prose
from gpuwarden.scheduler.state import JobRow, NodeRow, SchedulerDB, TaskRow, checkpoint_reason

H = 3600.0
RECLAIM = SINCE + 50 * H


def spot_scheduler(path) -> str:
    """gpu-a01 owned (2 x H100-80GB), gpu-b02 spot (2 x A100-80GB). Jobs:

    - t1, interruptible, on both gpu-b02 GPUs from the week's start; it checkpoints at +48 h and
      a reclaim evicts it at +50 h (4 GPU-hours lost: 2 h x 2 GPUs); attempt 2 runs there again
      +52 .. +100 h: 100 + 96 = 196 spot GPU-hours;
    - j0, interruptible, on gpu-b02 GPU 0 the day before the week: not counted;
    - c1, critical, on gpu-a01 GPU 0 all week: 168 GPU-hours, none on spot;
    - i2, interruptible, on gpu-a01 GPU 1 +100 .. +120 h: 20 GPU-hours off spot.

    Interruptible GPU-hours 196 + 20 = 216, 90.7 % of them on spot.
    """
    db = SchedulerDB(path)
    for node, model, cost in (("gpu-a01", "H100-80GB", "owned"), ("gpu-b02", "A100-80GB", "spot")):
        gpus = [{"index": i, "uuid": "", "model": model, "memory_mib": 81920, "health": "ok",
                 "mode": "", "cost_class": cost} for i in (0, 1)]  # fmt: skip
        db.upsert_node(NodeRow(node, 64000, 512000, gpus, SINCE, 0))
    interruptible = {"interruptible": True, "checkpoint": True, "grace_period_s": 60}
    jobs = [("t1", interruptible), ("j0", interruptible), ("c1", {}), ("i2", interruptible)]
    for seq, (job_id, spec) in enumerate(jobs, 1):
        db.insert_job(JobRow(job_id, seq, "alice", job_id, spec, "succeeded", 2, None,
                             SINCE - 86400, SINCE - 86400, started_at=SINCE))  # fmt: skip
    tasks = [("t1", 1, "gpu-b02", [0, 1], SINCE, RECLAIM), ("t1", 2, "gpu-b02", [0, 1],
             SINCE + 52 * H, SINCE + 100 * H), ("j0", 1, "gpu-b02", [0], SINCE - 10 * H, SINCE),
             ("c1", 1, "gpu-a01", [0], SINCE, UNTIL), ("i2", 1, "gpu-a01", [1], SINCE + 100 * H,
             SINCE + 120 * H)]  # fmt: skip
    for n, (job_id, attempt, node, gpus, start, end) in enumerate(tasks):
        db.upsert_task(TaskRow(job_id, attempt, 0, node, gpus, "exited", 100 + n, 0, n, True,
                               start, end))  # fmt: skip
    why = "node gpu-b02 reclaimed (spot reclaim), 120 s notice"
    db.audit(SINCE - 5 * H, "agent", "reclaim", node="gpu-b02", reason=why)  # before the week
    db.audit(SINCE + 48 * H + 10, "agent", "checkpoint", job_id="t1", tenant="alice",
             reason=checkpoint_reason(1, SINCE + 48 * H))  # fmt: skip
    db.audit(RECLAIM, "admin", "reclaim", node="gpu-b02", reason=why)
    db.audit(RECLAIM, "admin", "preempt", job_id="t1", tenant="alice", reason=why)
    db.audit(SINCE + 60 * H, "scheduler", "preempt", job_id="c1", tenant="alice", reason="priority")
    db.close()
    return str(path)


def test_spot_facts_from_the_scheduler_database(week, tmp_path):
    f = facts_of(week[0], FactSources(scheduler_db=spot_scheduler(tmp_path / "s.db")))
    sp = f.spot
    assert sp is not None and not any(a.section == "spot" for a in f.absent)
    assert (sp.nodes, sp.gpus, sp.gpu_hours) == (1, 2, 196.0)
    assert (sp.interruptible_gpu_hours, sp.interruptible_on_spot_pct) == (216.0, 90.7)
    assert sp.critical_gpu_hours_on_spot == 0.0
    assert (sp.reclaims, sp.reclaimed_nodes, sp.jobs_evicted) == (1, ["gpu-b02"], 1)
    assert sp.gpu_hours_lost == 4.0
    a100 = load_prices()["A100"]
    on_demand, spot = 196 * a100.on_demand.value, 196 * a100.spot.value
    (m,) = sp.by_model
    assert (m.model, m.gpus, m.gpu_hours) == ("A100-80GB", 2, 196.0)
    assert m.on_demand_cost == pytest.approx(on_demand) and m.spot_cost == pytest.approx(spot)
    assert sp.saved == pytest.approx(on_demand - spot, abs=0.01)
    assert sp.saved_pct == round(100 * (1 - a100.spot.value / a100.on_demand.value), 1)


def test_every_spot_sentence_is_checked_and_a_wrong_figure_fails(week, tmp_path):
    f = facts_of(week[0], FactSources(scheduler_db=spot_scheduler(tmp_path / "s.db")))
    ix = checker_index(f)
    texts = [s.text for s in summary(f) if s.topic == "spot"]
    assert len(texts) == 3, texts
    assert "1 spot node with 2 GPUs held 196 GPU-hours, 90.7% of the interruptible" in texts[0]
    assert "4 GPU-hours of work since the last checkpoints was lost" in texts[2]
    for t in texts:
        assert check(t, ix) == {}, t
    for right, wrong in (("4 GPU-hours", "6 GPU-hours"), ("90.7%", "80.7%")):
        text = next(t for t in texts if right in t).replace(right, wrong)
        assert check(text, ix), text
    saved = texts[1]
    assert check(saved.replace(f"{f.spot.saved:,.0f}", f"{f.spot.saved * 2:,.0f}"), ix)
    md = markdown(blocks(f, Prose([], [], []), {}, "templates"))
    assert "## Spot capacity" in md and "| A100-80GB | 2 | 196 |" in md


def test_critical_work_on_spot_is_shown(week, tmp_path):
    path = spot_scheduler(tmp_path / "s.db")
    db = SchedulerDB(path)
    db.insert_job(JobRow("c2", 9, "bob", "c2", {}, "succeeded", 1, None, SINCE, SINCE))
    db.upsert_task(
        TaskRow("c2", 1, 0, "gpu-b02", [0], "exited", 9, 0, 9, True, SINCE, SINCE + 3 * H)
    )
    db.close()
    f = facts_of(week[0], FactSources(scheduler_db=path))
    assert f.spot is not None and f.spot.critical_gpu_hours_on_spot == 3.0
    (line,) = [s.text for s in summary(f) if "Critical" in s.text]
    assert check(line, checker_index(f)) == {}


def test_without_spot_nodes_the_section_is_left_out_and_says_why(week):
    f = facts_of(week[0], FactSources(scheduler_db=week[1]))
    assert f.spot is None
    (why,) = [a.why for a in f.absent if a.section == "spot"]
    assert "no spot node" in why


def test_a_reclaimed_node_the_store_never_saw_is_pseudonymised(week, tmp_path):
    path = spot_scheduler(tmp_path / "s.db")
    db = SchedulerDB(path)
    gpus = [{"index": 0, "model": "A100-80GB", "cost_class": "spot"}]
    db.upsert_node(NodeRow("spot-x9", 8000, 64000, gpus, SINCE, 0))
    db.audit(SINCE + 2 * H, "admin", "reclaim", node="spot-x9", reason="node spot-x9 reclaimed")
    db.close()
    f = facts_of(week[0], FactSources(scheduler_db=path))
    assert f.spot is not None and f.spot.reclaimed_nodes == ["gpu-b02", "spot-x9"]
    names = Pseudonyms.of(f)
    hidden = names.hide(f.model_dump_json())
    assert "spot-x9" not in hidden and "gpu-b02" not in hidden
    assert names.restore(names.hide("spot-x9 was reclaimed")) == "spot-x9 was reclaimed"
