"""Acting on decisions: audit, notify, re-tag through every hook, retry, hold what the breaker
refused.

Each transition gets an audit row and a notice; then each node that changed is re-tagged with
its whole picture (``NodeHealth`` from the engine) by every tagger, and each result is an audit
row. A hook that fails (backend down) is retried every interval, with a new audit row only when
its result changes. A re-tag the circuit breaker refused is *held*, logged, audited and sent to
people; it is applied only when a person releases it (``release_held``) or the GPU's decision
changes, never silently later.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuwarden.alerts.audit import AuditLog
from gpuwarden.alerts.base import Notice, Notifier, Transition
from gpuwarden.alerts.decision import DecisionEngine
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks.base import NodeHealth, Tagger, TagResult
from gpuwarden.scheduler_hooks.breaker import CircuitBreaker

logger = logging.getLogger("gpuwarden.serve")


@dataclass
class Counters:
    """What ``/metrics`` counts about decisions and actions."""

    decisions: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # old, new, source
    hook_results: Counter[tuple[str, str]] = field(default_factory=Counter)  # hook, result kind
    alerts: Counter[str] = field(default_factory=Counter)  # applied / duplicate / ignored
    webhook_requests: Counter[int] = field(default_factory=Counter)  # HTTP status
    assess_runs: int = 0
    assess_errors: int = 0
    assess_last_ok_ts: float | None = None
    assess_duration_s: float | None = None
    last_assess_error: str = ""
    #: the last failure was the store's (``StoreError``), not the model's
    assess_store_failed: bool = False
    #: assessments left out because they named a board the store says was replaced in its slot
    replaced_boards_skipped: int = 0


@dataclass(frozen=True)
class HookOutcome:
    hostname: str
    hook: str
    result: str


def _kind(result: str) -> str:
    return result.split(":", 1)[0]


def _reason(t: Transition) -> str:
    why = "; ".join(t.reasons) or f"{t.source} decision"
    return f"{t.gpu.hostname} GPU {t.gpu.index} {t.new}: {why}"


class Actor:
    def __init__(
        self,
        engine: DecisionEngine,
        taggers: Sequence[Tagger],
        notifiers: Sequence[Notifier],
        audit: AuditLog,
        counters: Counters,
        clock: Callable[[], float],
    ) -> None:
        self.engine = engine
        self.taggers = list(taggers)
        self.notifiers = list(notifiers)
        self.audit = audit
        self.counters = counters
        self._clock = clock
        self.failed: dict[tuple[str, str], Transition] = {}  # (hook, host) -> to retry
        self.held: dict[tuple[str, str], Transition] = {}  # (hook, host) -> breaker refused
        self._last: dict[tuple[str, str], str] = {}  # (hook, host) -> last audited result

    def act(self, transitions: Sequence[Transition]) -> list[HookOutcome]:
        """Audit and announce ``transitions``, then re-tag each node they touched."""
        last_per_node: dict[str, Transition] = {}
        for t in transitions:
            self.audit.record(t)
            self.counters.decisions[(str(t.old), str(t.new), t.source)] += 1
            logger.info(
                "%s/%s (%s): %s -> %s by %s: %s",
                t.gpu.hostname,
                t.gpu.index,
                t.gpu.uuid,
                t.old,
                t.new,
                t.actor if t.source == "manual" else t.source,
                "; ".join(t.reasons),
            )
            self._notify(Notice("transition", t.ts, _reason(t), t))
            last_per_node[t.gpu.hostname] = t
        out = []
        for host, t in last_per_node.items():
            for tagger in self.taggers:
                out.append(self._apply(tagger, host, t))
        return out

    def retry_failed(self) -> list[HookOutcome]:
        """Try again the re-tags whose backend failed (called every interval)."""
        by_name = {t.name: t for t in self.taggers}
        return [
            self._apply(by_name[name], host, t, quiet_if_same=True)
            for (name, host), t in list(self.failed.items())
            if name in by_name
        ]

    def release_held(self, actor: str) -> list[HookOutcome]:
        """A person lets the re-tags the breaker refused through, past the breaker, once."""
        by_name = {t.name: t for t in self.taggers}
        out = []
        for (name, host), t in list(self.held.items()):
            tagger = by_name.get(name)
            if tagger is None:
                continue
            inner = tagger.tagger if isinstance(tagger, CircuitBreaker) else tagger
            out.append(self._apply(inner, host, t, note=f"released by {actor}"))
        return out

    def resync(self, hosts: Sequence[str]) -> list[HookOutcome]:
        """Make every backend agree with the engine for ``hosts`` (after a restart); audited
        only where a backend had drifted."""
        out = []
        statuses = self.engine.statuses()
        for host in hosts:
            here = [s for s in statuses if s.gpu.hostname == host]
            if not here:
                continue
            s = max(here, key=lambda st: st.state.rank)
            t = Transition(
                self._clock(), s.gpu, s.state, s.state, s.risk, s.reasons, s.action, "resync"
            )
            for tagger in self.taggers:
                out.append(self._apply(tagger, host, t, audit_unchanged=False))
        return out

    def _apply(
        self,
        tagger: Tagger,
        host: str,
        t: Transition,
        *,
        quiet_if_same: bool = False,
        audit_unchanged: bool = True,
        note: str = "",
    ) -> HookOutcome:
        key = (tagger.name, host)
        view = NodeHealth(
            host, self.engine.node_states(host), _reason(t), self.engine.node_uuids(host)
        )
        failed = False
        try:
            result = tagger.apply(view)
        except Exception as exc:  # a backend (or a bug in one) must not stop the loop
            failed = True
            result = TagResult(False, f"{type(exc).__name__}: {exc}")
            logger.warning("%s: re-tagging %s failed: %s", tagger.name, host, exc)
        summary = f"failed: {result.detail}" if failed else result.summary()
        if note:
            summary = f"{note}: {summary}"
        kind = "failed" if failed else _kind(result.summary())
        self.counters.hook_results[(tagger.name, kind)] += 1
        if failed:
            self.failed[key] = t
        else:
            self.failed.pop(key, None)
        if result.blocked:
            if key not in self.held:
                logger.warning("%s: %s", tagger.name, result.detail)
                self._notify(Notice("breaker", t.ts, f"{tagger.name}: {result.detail}", t))
            self.held[key] = t
        else:
            self.held.pop(key, None)
        quiet = (quiet_if_same and self._last.get(key) == summary) or (
            not audit_unchanged and not result.changed and not failed
        )
        if not quiet:
            self.audit.record(t, hook=tagger.name, result=summary)
        self._last[key] = summary
        return HookOutcome(host, tagger.name, summary)

    def _notify(self, notice: Notice) -> None:
        for n in self.notifiers:
            try:
                n.notify(notice)
            except Exception:  # queueing must not fail a decision
                logger.exception("notifier %s refused a notice", n.name)


def non_ok_hosts(engine: DecisionEngine) -> list[str]:
    return sorted({s.gpu.hostname for s in engine.statuses() if s.state is not GpuState.OK})


__all__ = ["Actor", "Counters", "HookOutcome", "non_ok_hosts"]
