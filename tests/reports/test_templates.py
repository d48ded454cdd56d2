"""The template text reads as English for every count: "1 GPU", "1 Xid was", "2 GPUs were"."""

from __future__ import annotations

import re

import pytest

from gpuwarden.reports.build import checker_index
from gpuwarden.reports.claims import check
from gpuwarden.reports.llm import Usage
from gpuwarden.reports.model import Change, GpuRef
from gpuwarden.reports.recommend import recommend
from gpuwarden.reports.render import blocks, markdown
from gpuwarden.reports.slack import summary_blocks
from gpuwarden.reports.templates import change_size, change_unit, summary
from gpuwarden.reports.writer import template_prose
from gpuwarden.wording import counted, plural

#: a count of exactly one followed by a plural noun or verb ("1 GPUs", "1 were")
ONE_PLURAL = re.compile(
    r"(?<![\d.,])1 (?:[A-Z][\w-]* )?(?:GPUs|nodes|times|Xids|jobs|preemptions|state transitions|"
    r"weeks|failures|GPU-hours|hours|LLM calls|tokens|parts|unsupported claims|are|were)\b"
)


def test_plural_and_counted():
    assert [counted(n, "GPU") for n in (0, 1, 1.0, 1.5, 2, 10_000)] == [
        "0 GPUs", "1 GPU", "1 GPU", "1.5 GPUs", "2 GPUs", "10,000 GPUs",
    ]  # fmt: skip
    assert (plural(1, "was", "were"), plural(3, "was", "were")) == ("was", "were")
    assert counted(1, "H100 GPU") == "1 H100 GPU" and counted(2, "GPU-hour") == "2 GPU-hours"
    assert [change_unit(1, u) for u in ("failures", "GPU-hours", "%", "kWh", "min")] == [
        "1 failure", "1 GPU-hour", "1%", "1 kWh", "1 min",
    ]  # fmt: skip
    assert change_unit(2, "Xids") == "2 Xids"
    assert [counted(2, w) for w in ("journal entry", "day", "key", "policy")] == [
        "2 journal entries", "2 days", "2 keys", "2 policies",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def ones(facts):
    """The known week with every count the templates write set to one."""
    inv, fl, al, x, s = facts.inventory, facts.failures, facts.alerts, facts.xids, facts.scheduler
    assert s is not None and x.by_code and facts.utilisation is not None
    top = x.by_code[0].model_copy(update={"count": 1, "gpus": 1})
    g = facts.risk.gpus[0]
    ref = GpuRef(hostname=g.hostname, gpu=g.gpu, uuid=g.uuid, model=g.model)
    one = {
        "inventory": inv.model_copy(update={"gpus": 1, "nodes": 1, "added": [ref],
                                            "missing": [ref]}),
        # two missed: one near the line and one quiet, one recommendation each
        "failures": fl.model_copy(update={"failures": 1, "caught": 1, "missed": 2,
                                          "missed_near": 1}),
        "risk": facts.risk.model_copy(update={"at_risk_gpus": 1, "unhealthy_gpus": 1}),
        "alerts": al.model_copy(update={"transitions": 1, "to_at_risk": 1, "retags_ok": 1,
                                        "retags_failed": 1}),
        "xids": x.model_copy(update={"xids": 1, "by_code": [top, *x.by_code[1:]]}),
        "scheduler": s.model_copy(update={"jobs_started": 1, "preemptions": 1, "gpu_hours": 1.0}),
        "utilisation": facts.utilisation.model_copy(update={"idle_gpus": 1}),
        "changes": [Change(metric="failures", unit="failures", before=2, after=1,
                           change_pct=-50.0)],
    }  # fmt: skip
    return facts.model_copy(update=one)


def test_template_text_agrees_with_counts_of_one(ones):
    texts = [s.text for s in summary(ones)] + [r.text for r in recommend(ones)]
    md = markdown(blocks(ones, template_prose(ones, recommend(ones)), {}, "templates"))
    slack, _ = summary_blocks(ones, template_prose(ones, recommend(ones)))
    for text in [*texts, md, slack]:
        assert not ONE_PLURAL.search(text), ONE_PLURAL.search(text)
    joined = " ".join(texts)
    for phrase in (
        "The fleet has 1 GPU on 1 node",
        "1 GPU was added",
        "1 is missing",
        "1 GPU failed",
        "Now 1 GPU is at risk and 1 is unhealthy",
        "made 1 state transition:",
        "re-tagged nodes 1 time and failed 1 time",
        "1 Xid was logged",
        "1 time on 1 GPU",
        "1 job started",
        "1 preemption.",
        "allocated 1 GPU-hour,",
        "Against the previous period, failures from 2 to 1 (-50%)",
        "1 GPU idled under 5% utilisation on average: give it",
        "Of those missed, 1 came near the at-risk line",
        "1 missed failure came near the at-risk line before failing: review its telemetry",
        "1 missed failure showed little before failing (a risk under half the line "
        "throughout): no line or retraining on this telemetry would have flagged it;",
    ):
        assert phrase in joined, phrase
    assert "1 GPU on 1 node;" in md and "1 preemption;" in md
    # the hard signals in words, not the facts' keys ("fatal_xid 2")
    assert "Hard signals: fatal Xid 2 times." in md, md
    ix = checker_index(ones)
    for text in texts:
        assert check(text, ix) == {}, text


def test_the_cost_line_never_counts_tokens_it_was_not_given():
    u = Usage()
    u.add(type("U", (), {"prompt_tokens": 1500, "completion_tokens": 220})())
    assert u.describe() == "1,720 tokens (1,500 prompt, 220 completion) in 1 LLM call"
    u.failed()
    u.add(None)
    assert u.describe() == (
        "1,720 tokens (1,500 prompt, 220 completion) in 3 LLM calls; 1 answer came without "
        "token counts (not included)"
    )
    none = Usage()
    none.add(None)
    assert none.describe() == "1 LLM call; the server did not report tokens"
    assert none.total_tokens is None


def test_a_large_fleets_figures_never_print_in_exponent_form(facts):
    """A week of 10,000 GPUs: 1,680,000 GPU-hours and over a million kWh, written in full with
    thousands separated in the tables, the code-written lines and the Slack summary (``:g`` once
    wrote them 1.68e+06)."""
    s = facts.scheduler
    assert s is not None and s.by_tenant and facts.energy is not None
    tenants = [t.model_copy(update={"gpu_hours": 1_234_567.0}) for t in s.by_tenant]
    big = facts.model_copy(
        update={
            "energy": facts.energy.model_copy(
                update={"energy_kwh": 1_176_000.5, "gpu_hours_measured": 1_680_000.0}
            ),
            "scheduler": s.model_copy(
                update={
                    "gpu_hours": 1_512_000.0,
                    "capacity_gpu_hours": 1_680_000.0,
                    "by_tenant": tenants,
                }
            ),  # fmt: skip
        }
    )
    prose = template_prose(big, recommend(big))
    md = markdown(blocks(big, prose, {}, "templates"))
    text, slack = summary_blocks(big, prose)
    exponent = re.compile(r"\d[eE][+-]\d")
    for written in (md, text, str(slack)):
        assert not exponent.search(written), exponent.search(written)
    assert "1,176,000.5 kWh over 1,680,000 GPU-hours" in md
    assert "1,512,000 of 1,680,000 GPU-hours allocated" in md
    assert "| 1,234,567 |" in md


def test_an_empty_store_reads_as_one(facts):
    """A report on a store with no telemetry said "The fleet has 0 GPUs on 0 nodes ()"."""
    none = facts.model_copy(
        update={
            "inventory": facts.inventory.model_copy(
                update={
                    "gpus": 0,
                    "nodes": 0,
                    "gpus_by_model": {},
                    "added": [],
                    "replaced": [],
                    "missing": [],
                }
            )
        }  # fmt: skip
    )
    text = " ".join(s.text for s in summary(none))
    assert "()" not in text and "The store holds no GPU for this period" in text, text


def test_a_percentage_moves_in_points_a_count_in_percent(ones):
    """Availability from 96.2% to 98.7% moved 2.5 points, not "+2.6%" (its relative change)."""
    moved = [
        Change(metric="fleet availability", unit="%", before=96.2, after=98.7, change_pct=2.6),
        Change(metric="failures", unit="failures", before=2, after=1, change_pct=-50.0),
        Change(metric="fleet GPU utilisation", unit="%", before=50.0, after=49.0, change_pct=-2.0),
        Change(metric="energy", unit="kWh", before=10.0, after=11.0, change_pct=10.0),
    ]
    # at the facts' own decimals, as the summary and the availability tables show them
    shown = Change(metric="fleet availability", unit="%", before=94.73, after=98.66, change_pct=4.1)
    assert change_size(shown) == "+3.93 percentage points"
    assert change_unit(98.66, "%") == "98.66%"
    avail = ones.availability.model_copy(update={"fleet_availability_pct": 98.7})
    util = ones.utilisation.model_copy(update={"fleet_gpu_util_pct": 49.0})
    f = ones.model_copy(update={"changes": moved, "availability": avail, "utilisation": util})
    said = " ".join(s.text for s in summary(f) if s.topic == "changes")
    assert "fleet availability from 96.2% to 98.7% (+2.5 percentage points)" in said
    assert "failures from 2 to 1 (-50%)" in said
    assert "fleet GPU utilisation from 50% to 49% (-1 percentage point)" in said
    assert check(said, checker_index(f)) == {}, said  # the claims checker reads the points
    md = markdown(blocks(f, template_prose(f, recommend(f)), {}, "templates"))
    assert "+2.5 percentage points" in md and "-50%" in md and "change %" not in md
    # two decimals where the facts hold two: the summary, the tables and the changes agree
    avail = ones.availability.model_copy(update={"fleet_availability_pct": 98.66})
    f = ones.model_copy(update={"changes": [shown], "availability": avail})
    said = " ".join(s.text for s in summary(f) if s.topic in ("changes", "availability"))
    assert "was 98.66%" in said and "from 94.73% to 98.66% (+3.93 percentage points)" in said
    assert check(said, checker_index(f)) == {}, said
