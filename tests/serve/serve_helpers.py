"""Test doubles for the serve tests: a controllable clock, a recording tagger and notifier."""

from __future__ import annotations

from gpuwarden.alerts.base import Notice
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks.base import NodeHealth, TagResult


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class RecordingTagger:
    """An idempotent in-memory backend: node -> state; records every change it makes."""

    name = "recording"

    def __init__(self) -> None:
        self.dry_run = False
        self.nodes: dict[str, GpuState] = {}
        self.changes: list[tuple[str, GpuState]] = []
        self.fail_next = 0

    def apply(self, node: NodeHealth) -> TagResult:
        from gpuwarden.errors import HookError

        if self.fail_next:
            self.fail_next -= 1
            raise HookError("backend unreachable")
        if self.nodes.get(node.hostname, GpuState.OK) is node.state:
            return TagResult(False, f"{node.hostname} already {node.state}")
        self.nodes[node.hostname] = node.state
        self.changes.append((node.hostname, node.state))
        return TagResult(True, f"{node.hostname} -> {node.state}")


class RecordingNotifier:
    name = "recording-notifier"

    def __init__(self) -> None:
        self.notices: list[Notice] = []

    def notify(self, notice: Notice) -> None:
        self.notices.append(notice)

    def flush(self, now: float) -> int:
        return 0
