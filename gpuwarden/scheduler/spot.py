"""Spot capacity: which work may run there, and what a reclaim notice does.

A node's ``cost_class`` (``resources.CostClass``) is owned, reserved or spot. Spot capacity is
cheap because its provider may take it back at short notice: AWS sends a two-minute interruption
notice, GCP's Spot VMs 30 seconds, Azure's 30 seconds (their documentation). So:

- only interruptible jobs are placed on spot nodes (``ClusterState.node_mask``); critical work
  (anything not interruptible: inference, non-interruptible training) never lands there;
- interruptible work goes to spot first when spot nodes can take all of it, which keeps owned
  and reserved GPUs for work that cannot be interrupted (``Scheduler(spot_first=True)``);
- a reclaim notice (``ReclaimNotice``: a file the agent watches, or ``POST
  /v1/nodes/{node}/reclaim``) closes the node and evicts its jobs through the preemption path:
  the agent runs each job's checkpoint hook, within the notice's deadline, and the job is queued
  again first in its class, resuming from that checkpoint elsewhere.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gpuwarden.errors import InputError
from gpuwarden.scheduler.cluster import ClusterState

T = TypeVar("T")

#: AWS's EC2 Spot interruption notice: two minutes before the instance is stopped.
AWS_NOTICE_S = 120.0


def on_spot(cluster: ClusterState, attempt: Callable[[], T]) -> T:
    """Run a placement ``attempt`` with the cluster narrowed to its spot nodes."""
    cluster.only = cluster.spot
    try:
        return attempt()
    finally:
        cluster.only = None


@dataclass(frozen=True)
class ReclaimNotice:
    """The provider takes ``node`` back at ``deadline`` (unix seconds)."""

    node: str
    deadline: float
    reason: str = "spot reclaim"

    def seconds_left(self, now: float) -> float:
        return max(0.0, self.deadline - now)

    def grace_s(self, job_grace_s: float, now: float) -> float:
        """How long a job gets to checkpoint: its grace period, cut to the time left."""
        return min(job_grace_s, self.seconds_left(now))


def parse_notice(text: str, node: str, *, now: float | None = None) -> ReclaimNotice:
    """A notice from the JSON the agent finds in its notice file, or a callback sends:
    ``{"deadline": <unix s or ISO 8601>, "reason": "..."}``, or ``{"in_s": 120}``. AWS's
    instance metadata ``spot/instance-action`` document (``{"action": "terminate", "time":
    "2026-12-04T05:00:00Z"}``) is accepted as is. ``InputError`` naming the problem else."""
    now = time.time() if now is None else now
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise InputError(f"reclaim notice for {node}: not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise InputError(f"reclaim notice for {node}: expected a JSON object")
    reason = str(body.get("reason") or body.get("action") or "spot reclaim")[:200]
    when = body.get("deadline", body.get("time"))
    if when is None and "in_s" in body:
        when = now + _number(body["in_s"], node, "in_s")
    if when is None:
        raise InputError(f"reclaim notice for {node}: give deadline, time or in_s")
    return ReclaimNotice(node, _instant(when, node), reason)


def _number(value: object, node: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"reclaim notice for {node}: {field} must be a number, got {value!r}")
    if value < 0:
        raise InputError(f"reclaim notice for {node}: {field} must be >= 0")
    return float(value)


def _instant(value: object, node: str) -> float:
    if isinstance(value, str):
        from datetime import datetime

        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise InputError(f"reclaim notice for {node}: bad time {value!r}") from None
    return _number(value, node, "deadline")


class NoticeFile:
    """Watches one file for a reclaim notice (a cloud hook writes it; on AWS, a cron that
    copies ``http://169.254.169.254/latest/meta-data/spot/instance-action``). ``poll`` returns
    a notice once per new content, None otherwise; a bad file is reported once and ignored."""

    def __init__(self, path: Path, node: str) -> None:
        self.path, self.node = path, node
        self._seen: tuple[float, int] | None = None

    def poll(self, now: float | None = None) -> ReclaimNotice | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._seen = None
            return None
        key = (st.st_mtime, st.st_size)
        if key == self._seen:
            return None
        self._seen = key
        return parse_notice(self.path.read_text(), self.node, now=now)


__all__ = ["AWS_NOTICE_S", "NoticeFile", "ReclaimNotice", "on_spot", "parse_notice"]
