"""Block Kit for the Slack notifier: one message for a group of notices.

Slack's limits shape this: at most 50 blocks per message, 10 fields per section and 2,000
characters per field, so a rack-wide event lists ``max_listed`` GPUs in full and counts the rest.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from gpuwarden.alerts.base import Notice, Transition
from gpuwarden.health import GpuState
from gpuwarden.wording import counted, plural

_EMOJI = {GpuState.OK: ":large_green_circle:", GpuState.AT_RISK: ":large_orange_circle:"}
_EMOJI[GpuState.UNHEALTHY] = ":red_circle:"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def dashboard_link(template: str, t: Transition) -> str:
    """``template`` with {uuid}, {hostname} and {gpu} filled in ("" when no template)."""
    if not template:
        return ""
    try:
        return template.format(uuid=t.gpu.uuid, hostname=t.gpu.hostname, gpu=t.gpu.index)
    except (KeyError, IndexError, ValueError):
        return template


def headline(notices: Sequence[Notice]) -> str:
    """One line: what happened, e.g. "3 GPUs at-risk, 1 unhealthy on 2 nodes"."""
    changes = [n.transition for n in notices if n.kind == "transition" and n.transition]
    breaker = sum(1 for n in notices if n.kind == "breaker")
    parts = []
    if changes:
        by_state = Counter(str(t.new) for t in changes)
        states = ", ".join(f"{k} {s}" for s, k in sorted(by_state.items()))
        nodes = len({t.gpu.hostname for t in changes})
        noun = "GPU" if len(changes) == 1 else "GPUs"
        parts.append(
            f"{len(changes)} {noun} changed state ({states}) on {nodes} node{'s' * (nodes > 1)}"
        )
    if breaker:
        parts.append(f"circuit breaker refused {breaker} re-tag{'s' * (breaker > 1)}")
    return "gpuwarden: " + "; ".join(parts) if parts else "gpuwarden"


def _transition_blocks(t: Transition, dashboard: str) -> list[dict[str, Any]]:
    score = "unknown" if math.isnan(t.risk) else f"{t.risk:.2f}"
    reasons = "\n".join(f"• {r}" for r in t.reasons) or "—"
    who = f"{t.source}" + (f" ({t.actor})" if t.actor != "gpuwarden" else "")
    fields = [
        f"*GPU*\n{t.gpu.hostname}/{t.gpu.index} `{t.gpu.uuid}`",
        f"*Node*\n{t.gpu.hostname}",
        f"*State*\n{_EMOJI[t.old]} {t.old} → {_EMOJI[t.new]} *{t.new}*",
        f"*Score*\n{score}",
        f"*Reasons*\n{reasons}",
        f"*Recommended action*\n{t.action or '—'}",
    ]
    section: dict[str, Any] = {
        "type": "section",
        "fields": [{"type": "mrkdwn", "text": _clip(f, 2000)} for f in fields],
    }
    link = dashboard_link(dashboard, t)
    if link:
        section["accessory"] = {
            "type": "button",
            "text": {"type": "plain_text", "text": "Dashboard"},
            "url": link,
        }
    context = {"type": "context", "elements": [{"type": "mrkdwn", "text": f"decided by {who}"}]}
    return [section, context]


def message(
    notices: Sequence[Notice], *, dashboard: str = "", max_listed: int = 10
) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) for one grouped Slack message."""
    title = headline(notices)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(title, 150)}}
    ]
    for n in notices:
        if n.kind == "breaker":
            text = f":warning: *Circuit breaker*: {n.text}"
            blocks.append(
                {"type": "section", "text": {"type": "mrkdwn", "text": _clip(text, 3000)}}
            )
            if len(blocks) >= 8:
                break
    changes = [n.transition for n in notices if n.kind == "transition" and n.transition]
    # the worst news first: unhealthy, then at-risk, then recoveries
    changes.sort(key=lambda t: (-t.new.rank, t.gpu.hostname, t.gpu.index))
    for t in changes[:max_listed]:
        blocks += [{"type": "divider"}, *_transition_blocks(t, dashboard)]
    if len(changes) > max_listed:
        rest = changes[max_listed:]
        hosts = sorted({t.gpu.hostname for t in rest})
        shown = ", ".join(hosts[:20]) + (" …" if len(hosts) > 20 else "")
        more = f"…and {len(rest)} more {plural(len(rest), 'GPU')} on {counted(len(hosts), 'node')}: {shown}"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _clip(more, 3000)}})
    return title, blocks[:50]


__all__ = ["dashboard_link", "headline", "message"]
