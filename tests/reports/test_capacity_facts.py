"""The report's capacity section: the planner's forecast and should_scale per GPU model from a
scheduler database with weeks of jobs, the same as ``gpuwarden plan`` says on that database;
absent with a reason on a short history; a wrong "add N GPUs" from the LLM is caught."""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
from click.testing import CliRunner
from fake_llm import Reply
from known_week import SINCE, UNTIL

from gpuwarden.cli import main
from gpuwarden.reports import FACTS_VERSION, FactSources, build_facts
from gpuwarden.reports._capacity import MIN_HISTORY_HOURS
from gpuwarden.reports.build import checker_index, prose_for
from gpuwarden.reports.claims import check
from gpuwarden.reports.recommend import recommend
from gpuwarden.reports.render import blocks, markdown
from gpuwarden.reports.templates import summary
from gpuwarden.reports.writer import TEMPLATE, template_prose
from gpuwarden.scheduler.state import JobRow, NodeRow, SchedulerDB
from gpuwarden.store import open_store
from gpuwarden.wording import counted

H100, A100 = "H100-80GB", "A100-80GB"  # the known week's store has two GPUs of each
HOUR = 3600.0


def busy_scheduler(path, end: float, weeks: int = 3) -> str:
    """Jobs of the last ``weeks`` weeks before ``end``: on the H100 node a daily wave of
    4-GPU jobs (more than its 2 GPUs: the plan adds), on the A100 node one quarter-GPU share
    at a time (the plan releases)."""
    rng = np.random.default_rng(7)
    db = SchedulerDB(path)
    for node, model in (("gpu-a01", H100), ("gpu-b02", A100)):
        gpus = [{"index": i, "model": model} for i in (0, 1)]
        db.upsert_node(NodeRow(node, 64000, 1 << 18, gpus, None, 0))
    start = (end // HOUR) * HOUR - weeks * 168 * HOUR
    seq = 0
    for hour in range(weeks * 168):
        t = start + hour * HOUR
        busy = 1 + (8 <= (hour % 24) < 20) + (hour // 24 % 7 < 5)
        jobs = [("gpu-a01", {"tasks": 1, "gpus_per_task": 4, "gpu_milli": 1000})] * busy
        jobs += [("gpu-b02", {"tasks": 1, "gpus_per_task": 1, "gpu_milli": 250})]
        for node, spec in jobs:
            seq += 1
            sub = t + float(rng.uniform(0, 600))
            db.insert_job(JobRow(f"j{seq}", seq, "ml", "train", spec, "succeeded", 0, None, sub,
                                 sub, sub + 120, sub + HOUR, placement=[{"node": node}]))  # fmt: skip
    db.close()
    return str(path)


def facts_now(store_url: str, db: str):
    store = open_store(store_url)
    try:
        now = time.time()
        return build_facts(store, SINCE, UNTIL, sources=FactSources(scheduler_db=db), now=now), now
    finally:
        store.close()


@pytest.fixture(scope="module")
def planned(week, tmp_path_factory):
    """(facts, scheduler db, when the facts were built): the known week with a scheduler
    database of three busy weeks up to now."""
    db = busy_scheduler(tmp_path_factory.mktemp("sched") / "s.db", time.time())
    f, now = facts_now(week[0], db)
    return f, db, now


def plan_cli(*args: str):
    r = CliRunner().invoke(main, ["plan", *args])
    assert r.exit_code == 0, r.output
    return r.output


def test_capacity_facts_match_plan_should_scale(planned, week):
    f, db, built = planned
    c = f.capacity
    assert f.version == FACTS_VERSION == 4
    assert c is not None and "capacity" not in {a.section for a in f.absent}
    assert c.buffer == 1.3 and c.history_hours >= 3 * 168 - 1
    by = {m.model: m for m in c.by_model}
    assert set(by) == {H100, A100}
    assert (by[H100].action, by[A100].action) == ("add", "release")
    assert by[H100].gpus == 2 and by[A100].gpus == 2
    for _ in range(2):  # both must read the same whole hours: again if the hour turned between
        current = [f"--current={m}={by[m].gpus}" for m in by]
        scale = plan_cli("should-scale", "--db", db, *current)
        fc = plan_cli("forecast", "--db", db, "--hours", "168", "--no-progress")
        if math.floor(time.time() / HOUR) == math.floor(built / HOUR):
            break
        f, built = facts_now(week[0], db)
        by = {m.model: m for m in f.capacity.by_model}
    for model, m in by.items():
        if m.action == "add":
            when = "now" if m.in_weeks == 0 else f"in {counted(m.in_weeks, 'week')}"
            said = f"{model}: add {counted(m.change_gpus, 'GPU')} {when}: {m.reason}"
        else:
            said = f"{model}: release {counted(m.change_gpus, 'GPU')}: {m.reason}"
        assert f"-> {said}" in scale
        row = re.search(
            rf"^{re.escape(model)}\s+\S+\s+\S+\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$", fc, re.M
        )
        assert row, fc
        printed = [float(x) for x in row.groups()]
        ours = [
            m.forecast_mean_gpus,
            m.forecast_peak_gpus,
            m.forecast_low_gpus,
            m.forecast_high_gpus,
        ]
        assert ours == pytest.approx(printed, abs=0.051)
    # the H100 demand (4-GPU jobs, one to three at a time) is far above its two GPUs
    assert by[H100].forecast_mean_gpus > 4 and by[H100].change_gpus > 2
    assert by[H100].forecast_low_gpus <= by[H100].forecast_mean_gpus <= by[H100].forecast_high_gpus


def test_break_even_against_measured_utilisation(planned):
    f, _, _ = planned
    by = {m.model: m for m in f.capacity.by_model}
    from gpuwarden.planning.tco import load_prices

    prices = load_prices()
    assert by[H100].break_even_own_pct == round(100 * prices["H100"].break_even("own"), 1)
    assert by[A100].gpu_util_pct == 20.0 and by[H100].gpu_util_pct == 80.0
    recs = recommend(f)
    tco = [r for r in recs if r.kind == "tco"]
    assert [A100 in r.text for r in tco] == [True]  # 20 % is under the A100's break-even


def test_scaling_advice_cites_the_capacity_facts(planned):
    f, _, _ = planned
    recs = recommend(f)
    up = [r for r in recs if r.kind == "scale-up"]
    down = [r for r in recs if r.kind == "scale-down"]
    h100 = next(m for m in f.capacity.by_model if m.model == H100)
    assert len(up) == 1 and up[0].text.startswith(f"Add {h100.change_gpus} {H100} GPUs")
    assert f"capacity.by_model[{H100}].change_gpus = {h100.change_gpus}" in up[0].cites
    assert "capacity.buffer = 1.3" in up[0].cites
    assert len(down) == 1 and down[0].text.startswith(f"Release 1 {A100} GPU:")
    assert not any("scheduler.queue_wait_p95_min" in c for r in up + down for c in r.cites)


def test_templates_and_recommendations_pass_the_checker_and_render(planned):
    f, _, _ = planned
    ix = checker_index(f)
    texts = [s.text for s in summary(f) if s.topic == "capacity"] + [r.text for r in recommend(f)]
    assert len(texts) >= 4
    for text in texts:
        assert check(text, ix) == {}, text
    md = markdown(blocks(f, template_prose(f, recommend(f)), {}, "templates"))
    assert "## Capacity plan" in md and "| H100-80GB | 2 |" in md


def test_a_wrong_add_count_is_caught(planned):
    f, _, _ = planned
    ix = checker_index(f)
    h100 = next(m for m in f.capacity.by_model if m.model == H100)
    right = f"Add {h100.change_gpus} {H100} GPUs now."
    wrong_n = h100.change_gpus + 7
    wrong = f"Add {wrong_n} {H100} GPUs now."
    assert check(right, ix) == {}
    assert check(wrong, ix)
    assert check(f"{H100}: the plan says to add {wrong_n} GPUs.", ix)
    assert check(f"Release 5 {A100} GPUs.", ix)  # the plan releases 1
    assert check(f"Add {h100.change_gpus} {A100} GPUs now.", ix)  # the right count, wrong model
    assert check(f"The forecast wants 999 {H100} GPUs next week.", ix)
    short = re.search(r"\d{4}-\d{2}-\d{2}", h100.reason).group()  # the first short week
    assert check(f"{H100} runs short in the week of {short}.", ix) == {}
    assert check(f"{A100} runs short in the week of {short}.", ix)


def test_the_llm_path_catches_a_wrong_add_count(planned, llm):
    f, _, _ = planned
    h100 = next(m for m in f.capacity.by_model if m.model == H100)
    bad = (f"SUMMARY:\nThe fleet has 4 GPUs. {H100}: add {h100.change_gpus + 7} GPUs now.\n"
           "RECOMMENDATIONS:\n")  # fmt: skip
    llm.script = [Reply(bad), Reply(bad)]
    cfg = {"llm_base_url": llm.base_url, "llm_model": "m", "llm_timeout_s": 5.0, "llm_retries": 0}
    prose, _ = prose_for(f, cfg, environ={})
    assert f"{h100.change_gpus + 7} GPUs" in "\n".join(prose.first_errors)
    assert not any(f"add {h100.change_gpus + 7}" in p.text for p in prose.summary)
    assert any(p.origin == TEMPLATE for p in prose.summary)


def test_too_short_a_history_leaves_capacity_out_and_says_why(facts):
    # the known week's scheduler holds one week of jobs, built at the week's end
    assert facts.capacity is None
    (why,) = [a.why for a in facts.absent if a.section == "capacity"]
    assert f"the forecast needs {MIN_HISTORY_HOURS}" in why and "holds 170 hours" in why
    assert not any(r.cites and "capacity." in r.cites[0] for r in recommend(facts))


def test_no_scheduler_database_no_capacity(week):
    store = open_store(week[0])
    try:
        f = build_facts(store, SINCE, UNTIL, now=UNTIL + HOUR)
    finally:
        store.close()
    assert f.capacity is None
    assert any(a.section == "capacity" and "scheduler_db" in a.why for a in f.absent)


def test_without_statsmodels_capacity_is_absent_and_says_how_to_install(planned, week, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "statsmodels" else real(name, *a),
    )
    _, db, _ = planned
    f, _ = facts_now(week[0], db)
    assert f.capacity is None
    (why,) = [a.why for a in f.absent if a.section == "capacity"]
    assert "statsmodels" in why and "gpuwarden[planning]" in why
