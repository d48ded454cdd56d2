"""The report in Slack: summary blocks through the incoming webhook
(``$GPUWARDEN_SLACK_WEBHOOK_URL``, as the alerts use), and the report files uploaded where a bot
token allows (``$GPUWARDEN_SLACK_BOT_TOKEN`` with ``files:write``, channel ``report_slack_channel``)
through Slack's external upload: ``files.getUploadURLExternal``, a POST of the bytes to the URL
it returns, then ``files.completeUploadExternal`` (slack_sdk's ``files_upload_v2``).

Both secrets come from the environment only and never appear in a log line or the report.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from gpuwarden.errors import ConfigError, GpuwardenError
from gpuwarden.reports.model import Facts
from gpuwarden.reports.render import MARK, prose_period
from gpuwarden.reports.writer import Prose
from gpuwarden.wording import counted, figure

logger = logging.getLogger(__name__)
ENV_WEBHOOK_URL = "GPUWARDEN_SLACK_WEBHOOK_URL"
ENV_BOT_TOKEN = "GPUWARDEN_SLACK_BOT_TOKEN"
TEXT_MAX = 2900  # Slack: 3,000 characters per section text


class SlackError(GpuwardenError):
    """Slack refused the report or could not be reached."""


def _clip(text: str, limit: int = TEXT_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summary_blocks(f: Facts, prose: Prose, where: str = "") -> tuple[str, list[dict[str, Any]]]:
    """The fallback text and the Block Kit blocks of the summary message."""
    title = f"GPU cluster report: {prose_period(f)}"
    summary = " ".join(f"{MARK[p.origin]} {p.text}" for p in prose.summary)
    fields = [f"*GPUs*\n{f.inventory.gpus:,} on {counted(f.inventory.nodes, 'node')}",
              f"*Failures*\n{f.failures.failures} ({f.failures.caught} caught)",
              f"*At risk / unhealthy now*\n{f.risk.at_risk_gpus} / {f.risk.unhealthy_gpus}",
              f"*Xids*\n{f.xids.xids}"]  # fmt: skip
    if f.availability:
        fields.append(f"*Availability*\n{figure(f.availability.fleet_availability_pct)}%")
    if f.energy:
        fields.append(f"*Energy*\n{figure(f.energy.energy_kwh)} kWh")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(title, 150)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _clip(summary or "(no summary)")}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": t} for t in fields[:10]]},
    ]
    recs = "\n".join(f"• {MARK[p.origin]} {p.text}" for _, p in prose.recommendations[:6])
    if recs:
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": _clip("*Recommendations*\n" + recs)},
            }
        )
    if where:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": _clip(where, 300)}]}
        )
    return title, blocks


def post_summary(text: str, blocks: list[dict[str, Any]], webhook_url: str | None = None) -> None:
    from slack_sdk.webhook import WebhookClient

    url = webhook_url or os.environ.get(ENV_WEBHOOK_URL, "")
    if not url.startswith(("https://", "http://")):
        raise ConfigError(f"posting to Slack needs an incoming-webhook URL in {ENV_WEBHOOK_URL}")
    try:
        resp = WebhookClient(url, timeout=30).send(text=text, blocks=blocks)
    except Exception as exc:  # urllib raises many kinds; the URL is the secret, so not shown
        raise SlackError(f"Slack webhook unreachable ({type(exc).__name__})") from None
    if resp.status_code != 200:
        raise SlackError(f"Slack webhook answered HTTP {resp.status_code}: {str(resp.body)[:200]}")


def upload_files(paths: list[Path], channel: str, *, token: str | None = None,
                 base_url: str | None = None, comment: str = "") -> list[str]:  # fmt: skip
    """Upload ``paths`` to ``channel`` with a bot token; returns Slack's file ids."""
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError, SlackClientError

    token = token or os.environ.get(ENV_BOT_TOKEN, "")
    if not token:
        raise ConfigError(f"uploading the report needs a bot token in {ENV_BOT_TOKEN}")
    if not channel:
        raise ConfigError("uploading the report needs a channel id (setting report_slack_channel)")
    client = WebClient(token=token, base_url=base_url or WebClient.BASE_URL, timeout=60)
    uploads = [{"file": str(p), "filename": p.name, "title": p.name} for p in paths]
    try:
        resp = client.files_upload_v2(
            file_uploads=uploads, channel=channel, initial_comment=comment or None
        )
    except SlackApiError as exc:
        raise SlackError(f"Slack refused the upload: {exc.response.get('error')}") from None
    except (SlackClientError, OSError) as exc:
        raise SlackError(f"Slack upload failed ({type(exc).__name__})") from None
    return [str(x.get("id")) for x in resp.get("files") or []]
