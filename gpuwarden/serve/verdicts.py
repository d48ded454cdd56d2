"""``serve``'s verdicts, written to a store: what was decided for every GPU, and why.

After every round (and every alert or override) each GPU's status in the decision engine
becomes a ``health.Verdict``: its state, the risk, the reasons with their features, the action,
and the cause (the model, a hard signal, a person's override, the hysteresis hold, an
Alertmanager alert, a new board). The dashboard, the exporter's summary and the weekly report
read these instead of scoring anything themselves, so they show what the scheduler hooks were
told.

A GPU's verdict is written when it differs from the last one written for it (state, cause,
reasons, action, or risk by ``risk_step`` or more), when it is a transition, and otherwise once
an hour (``heartbeat_s``): a steady 10,000-GPU fleet scored every minute writes 10,000 rows an
hour, not 600,000, and "the newest verdict at t" is never more than an hour old while serve runs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuwarden.alerts.base import Transition
from gpuwarden.alerts.decision import DecisionEngine, GpuStatus
from gpuwarden.health import GpuState, Verdict
from gpuwarden.store.base import WritableStore
from gpuwarden.wording import counted

logger = logging.getLogger("gpuwarden.serve")

#: Transition.source / GpuStatus.source -> the verdict's cause.
_CAUSE = {
    "model": "model",
    "alertmanager": "alertmanager",
    "hold": "hysteresis",
    "manual": "override",
    "replaced": "replaced",
}


def cause_of(status: GpuStatus, engine: DecisionEngine, now: float) -> str:
    """Why ``status.gpu`` is in its state at ``now``."""
    if status.pinned_until is not None and now < status.pinned_until:
        return "override"
    if status.source == "manual":
        return "override"
    if status.state is GpuState.UNHEALTHY and status.source == "model":
        return "hard-signal"  # the engine makes a GPU unhealthy on a hard signal only
    if (
        status.state is GpuState.AT_RISK
        and status.source != "alertmanager"
        and math.isfinite(status.risk)
        and status.risk < engine.enter_at
    ):
        return "hysteresis"  # the score fell below the line, the hold has not passed yet
    return _CAUSE.get(status.source, "restored")


@dataclass
class _Last:
    ts: float
    key: tuple[object, ...]
    risk: float


class VerdictLog:
    """Turns the engine's statuses into stored verdicts (see the module docstring).

    ``store``: where verdicts go (None: nowhere, serve still decides). A failing write is
    logged and counted, never stops the loop; the next round writes the verdicts again.
    """

    def __init__(
        self,
        store: WritableStore | None,
        engine: DecisionEngine,
        *,
        heartbeat_s: float = 3600.0,
        risk_step: float = 0.005,
    ) -> None:
        self.store = store
        self.engine = engine
        self.heartbeat_s = float(heartbeat_s)
        self.risk_step = float(risk_step)
        self.written = 0
        self.errors = 0
        self.last_error = ""
        self._last: dict[str, _Last] = {}

    def verdicts(
        self, now: float, changes: Sequence[Transition] = (), *, every: bool = False
    ) -> list[Verdict]:
        """The verdicts due at ``now``: transitions always, the rest when they changed or the
        heartbeat is due (``every``: all of them)."""
        moved = {t.gpu.uuid: t for t in changes if t.old is not t.new}
        out = []
        for s in self.engine.statuses():
            cause = cause_of(s, self.engine, now)
            key = (s.state, cause, tuple(s.reasons), s.action)
            last = self._last.get(s.gpu.uuid)
            turn = moved.get(s.gpu.uuid)
            due = (
                every
                or turn is not None
                or last is None
                or last.key != key
                or now - last.ts >= self.heartbeat_s
                or _moved(last.risk, s.risk, self.risk_step)
            )
            if not due:
                continue
            out.append(
                Verdict(
                    ts=now,
                    gpu=s.gpu,
                    state=s.state,
                    risk=s.risk,
                    cause=cause,
                    since=s.since,
                    changed_from=None if turn is None else turn.old,
                    reasons=tuple(s.reasons),
                    action=s.action,
                    threshold=self.engine.enter_at,
                )
            )
        return out

    def record(self, now: float, changes: Iterable[Transition] = ()) -> int:
        """Write the verdicts due at ``now``; returns how many were written."""
        if self.store is None:
            return 0
        due = self.verdicts(now, list(changes))
        if not due:
            return 0
        try:
            n = self.store.write_verdicts(due)
        except Exception as exc:  # the scheduler hooks were told; the record retries next round
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            logger.warning("cannot store %s: %s", counted(len(due), "verdict"), exc)
            return 0
        self.last_error = ""
        for v in due:
            self._last[v.gpu.uuid] = _Last(
                v.ts, (v.state, v.cause, tuple(v.reasons), v.action), v.risk
            )
        self.written += n
        return n


def _moved(before: float, now: float, step: float) -> bool:
    if math.isnan(before) or math.isnan(now):
        return math.isnan(before) != math.isnan(now)
    return abs(now - before) >= step


__all__ = ["VerdictLog", "cause_of"]
