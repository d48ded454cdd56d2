"""The Slack notifier, driven through the real slack_sdk client against a local webhook server."""

import logging
import math

import pytest
from fake_slack import SECRET_PATH, FakeSlack

from gpuwarden.alerts.base import Notice, Transition
from gpuwarden.alerts.slack import ENV_WEBHOOK_URL, SlackNotifier
from gpuwarden.errors import ConfigError
from gpuwarden.health import GpuState
from gpuwarden.telemetry import GpuId

T0 = 1_700_000_000.0


@pytest.fixture
def slack():
    fake = FakeSlack()
    yield fake
    fake.close()


@pytest.fixture(autouse=True)
def debug_logs(caplog):
    caplog.set_level(logging.DEBUG)
    yield caplog
    # the webhook URL is a secret: whatever happened, no log line may carry it (slack_sdk
    # logs it at DEBUG unless its logger is ours and set higher)
    records = caplog.get_records("setup") + caplog.get_records("call")
    text = "\n".join(r.getMessage() for r in records)
    assert SECRET_PATH not in text and "s3cr3tT0k3n" not in text


def notice(host, index, new=GpuState.AT_RISK, risk=0.82, ts=T0):
    t = Transition(
        ts,
        GpuId(host, index, f"GPU-{host}-{index}"),
        GpuState.OK,
        new,
        risk,
        ("SBE rate 40/h, rising", "HBM 12 C above core"),
        "Move critical work off; schedule a GPU reset.",
        "model",
    )
    return Notice("transition", ts, f"{host}/{index} {new}", t)


def notifier(url, **kw):
    kw = {"group_wait_s": 0, "min_interval_s": 60, "backoff_s": 0.01, **kw}
    return SlackNotifier(url, dashboard_url="http://dash/gpu?uuid={uuid}", **kw)


def test_one_transition_message(slack):
    n = notifier(slack.url)
    n.notify(notice("node7", 3, risk=0.8234))
    assert n.flush(T0) == 1
    [msg] = slack.messages
    assert msg["text"] == "gpuwarden: 1 GPU changed state (1 at-risk) on 1 node"
    header, divider, section, context = msg["blocks"]
    assert header["type"] == "header" and divider["type"] == "divider"
    fields = [f["text"] for f in section["fields"]]
    assert fields[0] == "*GPU*\nnode7/3 `GPU-node7-3`"
    assert fields[1] == "*Node*\nnode7"
    assert "ok → :large_orange_circle: *at-risk*" in fields[2]
    assert fields[3] == "*Score*\n0.82"
    assert fields[4] == "*Reasons*\n• SBE rate 40/h, rising\n• HBM 12 C above core"
    assert fields[5] == "*Recommended action*\nMove critical work off; schedule a GPU reset."
    assert section["accessory"]["url"] == "http://dash/gpu?uuid=GPU-node7-3"
    assert context["elements"][0]["text"] == "decided by model"


def test_a_rack_wide_event_is_one_message_and_sends_are_rate_limited(slack):
    n = notifier(slack.url, group_wait_s=5)
    for host in range(8):
        for gpu in range(8):
            n.notify(
                notice(f"r7-n{host}", gpu, GpuState.UNHEALTHY if gpu == 0 else GpuState.AT_RISK)
            )
    assert n.flush(T0 + 1) == 0  # still gathering
    assert n.flush(T0 + 5) == 1
    [msg] = slack.messages
    assert msg["text"] == "gpuwarden: 64 GPUs changed state (56 at-risk, 8 unhealthy) on 8 nodes"
    sections = [b for b in msg["blocks"] if b["type"] == "section"]
    assert len(sections) == 11  # ten GPUs in full, worst first, then the count of the rest
    assert "*unhealthy*" in sections[0]["fields"][2]["text"]
    assert sections[-1]["text"]["text"].startswith("…and 54 more GPUs on 8 nodes: r7-n0")
    n.notify(notice("n9", 0, ts=T0 + 10))
    assert n.flush(T0 + 30) == 0  # one message per minute at most
    assert n.flush(T0 + 65) == 1 and len(slack.messages) == 2
    assert n.pending() == 0


def test_retries_429_and_500_then_delivers(slack):
    slack.script = [(429, {"Retry-After": "0"}, "rate_limited"), (500, {}, "internal_error")]
    n = notifier(slack.url)
    n.notify(notice("n1", 0))
    assert n.flush(T0) == 1
    assert slack.requests == 3 and len(slack.messages) == 1


def test_a_failed_delivery_stays_queued(slack):
    slack.script = [(500, {}, "internal_error")] * 3  # the first try and both retries
    n = notifier(slack.url, min_interval_s=0)
    n.notify(notice("n1", 0))
    assert n.flush(T0) == 0 and n.failures == 1 and n.pending() == 1
    assert n.flush(T0 + 1) == 1 and len(slack.messages) == 1 and n.pending() == 0


def test_breaker_notices_are_reported(slack):
    n = notifier(slack.url)
    n.notify(Notice("breaker", T0, "slurm: 4 nodes already re-tagged within 60 min"))
    n.flush(T0)
    [msg] = slack.messages
    assert msg["text"] == "gpuwarden: circuit breaker refused 1 re-tag"
    assert ":warning: *Circuit breaker*: slurm: 4 nodes" in msg["blocks"][1]["text"]["text"]


def test_unknown_score_says_unknown(slack):
    n = notifier(slack.url)
    n.notify(notice("n1", 0, GpuState.UNHEALTHY, risk=math.nan))
    n.flush(T0)
    assert slack.messages[0]["blocks"][2]["fields"][3]["text"] == "*Score*\nunknown"


def test_webhook_url_comes_from_the_environment(slack, monkeypatch):
    monkeypatch.delenv(ENV_WEBHOOK_URL, raising=False)
    with pytest.raises(ConfigError, match=ENV_WEBHOOK_URL):
        SlackNotifier()
    monkeypatch.setenv(ENV_WEBHOOK_URL, slack.url)
    n = SlackNotifier(group_wait_s=0)
    n.notify(notice("n1", 0))
    assert n.flush(T0) == 1 and len(slack.messages) == 1
