"""The LLM path through the real openai client against a local server speaking the protocol:
checked prose, one retry with the errors, template fallback, errors and timeouts, tokens,
secrets and pseudonyms."""

from __future__ import annotations

import pytest
from fake_llm import FakeLLM, Hang, Reply, Status

from gpuwarden.errors import ConfigError
from gpuwarden.reports.build import prose_for
from gpuwarden.reports.llm import ENV_API_KEY, llm_config
from gpuwarden.reports.pseudonym import Pseudonyms
from gpuwarden.reports.writer import LLM, TEMPLATE

RECS = """RECOMMENDATIONS:
[R1] Lower the quota of bob: bob used only 14.9% of its 2-GPU quota.
[R2] Move work off gpu-b02 GPU 1, which is at risk.
[R3] A100-80GB GPUs averaged 20% utilisation; move work onto them.
[R4] Investigate gpu-b02: 92.86% available and 24 h of GPU downtime.
[R5] One failure came without a flag; review its telemetry."""

GOOD = f"""SUMMARY:
Fleet availability was 94.64% this week, with 36 h of GPU downtime. gpu-b02 was the least \
available node at 92.86%. Two GPUs failed: gpuwarden flagged gpu-a01 GPU 0 30 h before it failed \
on 2025-11-27 and missed gpu-b02 GPU 0. The GPUs used 246 kWh, about 98 kg of CO2. Tenant alice \
used 200 GPU-hours and bob 50 GPU-hours.
{RECS}"""

WRONG_NUMBER = "Fleet availability was 97.5% this week."
WRONG_DATE = "gpuwarden flagged gpu-a01 GPU 0 30 h before it failed on 2025-11-26."
INVENTED_GPU = "gpu-c07 GPU 3 is unhealthy and should be drained."
BAD = f"SUMMARY:\n{WRONG_NUMBER} {WRONG_DATE} {INVENTED_GPU} The GPUs used 246 kWh.\n{RECS}"
KEY = "sk-test-Very-Secret-Key-0123456789"


def cfg(llm, **over):
    return {"llm_base_url": llm.base_url, "llm_model": "test-model", "llm_timeout_s": 5.0,
            "llm_retries": 2, **over}  # fmt: skip


def test_checked_llm_prose_streams_and_counts_tokens(facts, llm):
    llm.script = [Reply(GOOD, prompt_tokens=1500, completion_tokens=220)]
    prose, config = prose_for(facts, cfg(llm), environ={ENV_API_KEY: KEY})
    assert prose.source == LLM and config.model == "test-model"
    assert all(p.origin == LLM for p in prose.summary) and len(prose.summary) == 5
    assert all(p.origin == LLM for _, p in prose.recommendations)
    assert (prose.usage.calls, prose.usage.total_tokens) == (1, 1720)
    (request,) = llm.requests
    assert request["body"]["stream"] is True
    assert request["body"]["stream_options"] == {"include_usage": True}


def test_each_kind_of_bad_claim_is_caught_retried_once_then_replaced(facts, llm):
    llm.script = [Reply(BAD), Reply(BAD)]
    prose, _ = prose_for(facts, cfg(llm), environ={})
    first = "\n".join(prose.first_errors)
    assert "97.5%" in first  # the wrong number
    assert "2025-11-26" in first  # the wrong date
    assert "gpu-c07" in first  # the invented GPU
    assert len(llm.requests) == 2  # one retry, no more
    retry = llm.requests[1]["body"]["messages"][-1]["content"]
    assert "97.5%" in retry and "gpu-c07" in retry and "2025-11-26" in retry
    texts = {p.text: p.origin for p in prose.summary}
    assert WRONG_NUMBER not in texts and WRONG_DATE not in texts and INVENTED_GPU not in texts
    assert texts["The GPUs used 246 kWh."] == LLM
    assert texts["Fleet availability was 94.64%, with 36 h of GPU downtime."] == TEMPLATE
    assert any(o == TEMPLATE and "failed" in t for t, o in texts.items())
    assert any(o == TEMPLATE and "at risk" in t for t, o in texts.items())
    assert prose.usage.calls == 2 and prose.usage.total_tokens == 2 * (1200 + 180)


def test_a_corrected_second_answer_is_used(facts, llm):
    llm.script = [Reply(BAD), Reply(GOOD)]
    prose, _ = prose_for(facts, cfg(llm), environ={})
    assert prose.first_errors and not prose.final_errors
    assert all(p.origin == LLM for p in prose.summary)


def test_a_failing_or_missing_recommendation_falls_back_to_the_code_text(facts, llm):
    answer = GOOD.replace("[R4] Investigate gpu-b02: 92.86%", "[R4] Investigate gpu-b02: 99%")
    answer = answer.replace("[R5] One failure came without a flag; review its telemetry.", "")
    llm.script = [Reply(answer), Reply(answer)]
    prose, _ = prose_for(facts, cfg(llm), environ={})
    by_id = {r.id: p for r, p in prose.recommendations}
    assert by_id["R1"].origin == LLM
    assert by_id["R4"].origin == TEMPLATE and "92.86%" in by_id["R4"].text
    assert by_id["R5"].origin == TEMPLATE


def test_rate_limits_past_the_retries_fall_back_to_templates(facts, llm):
    llm.script = [Status(429, retry_after=0)] * 3
    prose, _ = prose_for(facts, cfg(llm, llm_retries=2), environ={})
    assert prose.source == "templates" and len(llm.requests) == 3
    assert "429" in prose.notes[0]
    assert all(p.origin == TEMPLATE for p in prose.summary) and prose.summary


def test_a_server_error_is_retried_by_the_client(facts, llm):
    llm.script = [Status(500, retry_after=0), Reply(GOOD)]
    prose, _ = prose_for(facts, cfg(llm), environ={})
    assert prose.source == LLM and len(llm.requests) == 2


@pytest.fixture
def old_server():
    """An OpenAI-compatible server that refuses ``stream_options`` (older vLLM, Ollama)."""
    server = FakeLLM(rejects=("stream_options",))
    yield server
    server.close()


def test_a_server_refusing_stream_options_is_asked_again_without_streaming(facts, old_server):
    old_server.script = [Reply(BAD, prompt_tokens=1000, completion_tokens=100), Reply(GOOD)]
    prose, _ = prose_for(facts, cfg(old_server), environ={})
    assert prose.source == LLM and all(p.origin == LLM for p in prose.summary)
    refused, *plain = old_server.requests
    assert refused["body"]["stream"] is True and "stream_options" in refused["body"]
    # the retry and the claim-check retry after it go without streaming: no second refusal
    assert len(plain) == 2
    assert all("stream" not in r["body"] and "stream_options" not in r["body"] for r in plain)
    # tokens from the plain answers' usage; the refused request counts as a call without tokens
    assert (prose.usage.calls, prose.usage.total_tokens) == (3, 1100 + 1200 + 180)
    assert prose.usage.unreported == 0


def test_tokens_a_plain_answer_leaves_out_are_unknown_not_zero(facts, old_server):
    old_server.script = [Reply(GOOD, usage=False)]
    prose, _ = prose_for(facts, cfg(old_server), environ={})
    assert prose.source == LLM and len(old_server.requests) == 2
    assert prose.usage.total_tokens is None and prose.usage.unreported == 1
    assert prose.usage.describe() == "2 LLM calls; the server did not report tokens"


def test_a_request_refused_for_another_reason_is_retried_once_then_templates(facts, llm):
    llm.script = [Status(400), Status(400), Reply(GOOD)]
    prose, _ = prose_for(facts, cfg(llm), environ={})
    assert prose.source == "templates" and "HTTP 400" in prose.notes[0]
    assert len(llm.requests) == 2 and "stream_options" not in llm.requests[1]["body"]


def test_a_timeout_falls_back_to_templates(facts, llm):
    llm.script = [Hang(3.0)]
    prose, _ = prose_for(facts, cfg(llm, llm_timeout_s=0.5, llm_retries=0), environ={})
    assert prose.source == "templates" and "did not answer" in prose.notes[0]


def test_no_llm_configured_means_templates_and_no_request(facts, llm):
    prose, config = prose_for(facts, {"llm_base_url": "", "llm_model": ""}, environ={})
    assert config is None and prose.source == "templates" and not llm.requests
    assert llm_config({"llm_base_url": ""}, environ={}) is None


def test_a_configured_llm_without_a_model_is_a_config_error(llm):
    with pytest.raises(ConfigError, match="llm_model"):
        llm_config({"llm_base_url": llm.base_url, "llm_model": ""}, environ={})


def test_the_key_goes_in_the_header_only(facts, llm):
    llm.script = [Reply(BAD), Reply(GOOD)]
    prose, config = prose_for(facts, cfg(llm), environ={ENV_API_KEY: KEY})
    assert KEY not in repr(config)
    for request in llm.requests:
        assert request["headers"]["authorization"] == f"Bearer {KEY}"
    assert all(KEY not in prompt for prompt in llm.prompts())


def test_a_local_server_without_a_key_gets_a_placeholder(facts, llm):
    llm.script = [Reply(GOOD)]
    prose_for(facts, cfg(llm), environ={})
    assert llm.requests[0]["headers"]["authorization"] == "Bearer no-key"


def test_pseudonyms_hide_names_from_the_llm_and_come_back_in_the_report(facts, llm):
    names = Pseudonyms.of(facts, jobs=["j1"])
    llm.script = [Reply(names.hide(GOOD))]
    prose, _ = prose_for(facts, cfg(llm), pseudonymise=True, environ={})
    for prompt in llm.prompts():
        for real in ("gpu-a01", "gpu-b02", "alice", "bob", facts.risk.gpus[0].uuid):
            assert real not in prompt
    assert names.forward["gpu-b02"] in llm.prompts()[0]
    assert prose.source == LLM and all(p.origin == LLM for p in prose.summary)
    assert "gpu-b02 was the least available node at 92.86%." in [p.text for p in prose.summary]


def test_an_invented_pseudonym_is_caught(facts, llm):
    llm.script = [Reply(GOOD.replace("gpu-b02 was", "host-999 was"))] * 2
    prose, _ = prose_for(facts, cfg(llm), pseudonymise=True, environ={})
    assert any("host-999" in e for e in prose.first_errors)
    assert not any("host-999" in p.text for p in prose.summary)


def test_pseudonyms_round_trip():
    names = Pseudonyms(
        hosts=["node1", "node10", "gpu-a.example"], tenants=["ml-team"], jobs=["job-42x"]
    )
    text = "node10 and node1 (gpu-a.example) ran job-42x for ml-team; node100 is not ours."
    hidden = names.hide(text)
    assert "node10 " not in hidden and "ml-team" not in hidden and "node100" in hidden
    assert names.restore(hidden) == text


def test_headings_in_markdown_are_read_as_the_format():
    from gpuwarden.reports.writer import parse

    summary, recs = parse(
        "## Summary\nFleet availability was 94.64%.\n\n**Recommendations:**\n- [R1] Do it.\n"
    )
    assert summary == "Fleet availability was 94.64%." and recs == {"R1": "Do it."}


def test_the_prompt_carries_at_most_twenty_of_each_list(facts):
    import json

    from gpuwarden.reports.model import GpuRef
    from gpuwarden.reports.writer import prompt_facts

    many = [GpuRef(hostname=f"n{i}", gpu=0, uuid=f"GPU-{i}", model="H100") for i in range(500)]
    big = facts.model_copy(update={"inventory": facts.inventory.model_copy(update={"added": many})})
    data = json.loads(prompt_facts(big))
    assert len(data["inventory"]["added"]) == 20 and "slots" not in data["inventory"]
