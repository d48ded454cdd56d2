"""The claim checker against the known week: what it lets through and what it catches."""

from __future__ import annotations

import pytest

from gpuwarden.reports.build import checker_index
from gpuwarden.reports.claims import check, sentences
from gpuwarden.reports.recommend import recommend
from gpuwarden.reports.templates import summary


@pytest.fixture(scope="module")
def ix(facts):
    return checker_index(facts)


def errors(text: str, ix) -> list[str]:
    return [e.why for errs in check(text, ix).values() for e in errs]


def test_every_template_sentence_and_recommendation_passes(facts, ix):
    texts = [s.text for s in summary(facts)] + [r.text for r in recommend(facts)]
    assert len(texts) > 10
    for text in texts:
        assert errors(text, ix) == [], text


@pytest.mark.parametrize(
    "text",
    [
        "Fleet availability was 94.64% over the week.",
        "Fleet availability was 94.6%, about 95%.",  # rounding; "about" widens to 5 %
        "gpu-b02 was the least available node at 92.86%, with 24 h of downtime.",
        "gpu-b02 was down for one day.",  # 24 h as a day, "one" a pronoun-safe skip
        "gpuwarden flagged gpu-a01 GPU 0 30 h before it failed on 2025-11-27.",
        "gpuwarden flagged gpu-a01 GPU 0 1.25 days before it failed on 27 November.",
        "Two GPUs failed this week; one was missed.",
        "The GPUs used 246 kWh (0.25 MWh), about 98 kg of CO2.",
        "Tenant alice used 200 GPU-hours and bob 50 GPU-hours.",
        "Jobs waited 35 min at the median and 57.5 min at p95.",
        "Xid 79 (GPU has fallen off the bus) was logged once on gpu-a01 GPU 0.",
        "Failures rose from 0 to 2 against the previous week.",
        "Xids fell by 20% against the previous week, from 5 to 4.",
        "More than 90% of GPU-hours were up across the fleet.",
        "gpu-b02 GPU 1 (A100-80GB) is at risk with a risk score of 0.77.",
    ],
)
def test_supported_claims_pass(text, ix):
    assert errors(text, ix) == []


@pytest.mark.parametrize(
    ("text", "caught"),
    [
        ("Fleet availability was 96.2% over the week.", "96.2%"),  # a wrong number
        ("gpu-a01 had an availability of 92.86%.", "92.86%"),  # right number, wrong host
        ("gpu-c07 GPU 2 failed on 2025-11-27.", "gpu-c07"),  # an invented host
        ("gpu-a01 GPU 5 is at risk.", "gpu-a01 GPU 5"),  # an invented GPU on a real host
        ("GPU-deadbeef-0000-1111-2222-333344445555 failed.", "GPU-deadbeef"),  # an invented UUID
        ("gpu-a01 GPU 0 failed on 2025-11-26.", "2025-11-26"),  # a wrong date
        ("gpu-a01 GPU 0 failed on 26 November.", "26 November"),  # a wrong date, in words
        ("Three GPUs failed this week.", "Three"),  # a number spelled out
        ("gpuwarden flagged gpu-a01 GPU 0 two days before it failed.", "two days"),
        ("The GPUs used 2.46 MWh.", "2.46 MWh"),  # a unit slip: 2,460 kWh, not 246
        ("The H200 nodes were idle.", "H200"),  # a GPU model the fleet does not have
        ("Xid 77 was logged twice.", "Xid 77"),  # not in the facts nor NVIDIA's table
        ("Tenant bob used 200 GPU-hours.", "200 GPU-hours"),  # alice's number on bob
        ("Jobs waited 35 min at p95.", "35 min"),  # the median called p95
        # the verdict transitions' rise (0 to 4) on the failures, which rose by 2
        ("Failures rose by 4 against the previous week.", "4"),
    ],
)
def test_unsupported_claims_are_caught(text, caught, ix):
    found = errors(text, ix)
    assert any(caught in e for e in found), found


def test_error_names_what_the_facts_say(ix):
    (why,) = errors("gpu-a01 had an availability of 92.86%.", ix)
    assert "96.43%" in why and "gpu-a01" in why


def test_sentences_split_on_ends_and_lines_not_decimals():
    text = "Availability was 94.64%. gpu-b02 was worst.\n- [R1] Lower bob's quota."
    assert sentences(text) == [
        "Availability was 94.64%.",
        "gpu-b02 was worst.",
        "- [R1] Lower bob's quota.",
    ]


def test_a_large_fleets_template_sentences_pass_too(facts):
    """A thousands separator ended the number's clause ("The GPUs used 3,657.8 kWh." failed on
    "3"), and "no verdict in the two weeks before" had no fact: both are template text."""
    big = facts.model_copy(
        update={
            "energy": facts.energy.model_copy(update={"energy_kwh": 3657.8}),
            "failures": facts.failures.model_copy(update={"unwatched": 2}),
        }
    )
    ix = checker_index(big)
    texts = [s.text for s in summary(big)] + [r.text for r in recommend(big)]
    assert any("3,657.8 kWh" in t for t in texts) and any("two weeks before" in t for t in texts)
    for text in texts:
        assert errors(text, ix) == [], text
    assert errors("The GPUs used 3,906.4 kWh.", ix)  # and a wrong one is still caught
    assert errors("2 GPUs had no verdict in the three weeks before they failed.", ix)
