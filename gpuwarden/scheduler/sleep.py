"""Idle-node sleep: drain nodes that idle in a quiet window, put them to sleep, wake them on demand.

The guideline's policy: a node below 20% utilisation from 02:00 to 06:00 and at weekends is drained
and put to sleep; Wake-on-LAN wakes it, with a cold start of about three minutes. Here:

- ``SleepWindow`` says when nodes may sleep (default 02:00-06:00 every day, and weekends);
- ``SleepController.step`` is called every few minutes with each node's utilisation (0..1):
  inside the window, a node below ``below`` is closed to new work (``Scheduler.set_open``) while
  the other awake nodes keep ``headroom_gpus`` idle GPUs; once its jobs have ended it sleeps
  (``sleep_command``, run by the node's agent: ``systemctl suspend``, ``ipmitool chassis power
  soft``, a cloud stop). Outside the window every sleeping node is woken;
- ``SleepController.need`` is called with the queue after a placement round: a waiting critical
  job (inference) reopens every draining node at once and wakes sleeping ones; other waiting
  work wakes as many sleeping nodes as its GPUs need. A woken node takes work ``cold_start_s``
  after the magic packet (``wol.py``).

Dry run is the default: the controller decides and logs, and nothing is closed, slept or woken.
"""

from __future__ import annotations

import datetime as dt
import logging
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpuwarden.errors import InputError
from gpuwarden.scheduler.jobs import Job, PriorityClass
from gpuwarden.scheduler.scheduler import Scheduler

logger = logging.getLogger("gpuwarden.scheduler.sleep")


def _minutes(text: str) -> int:
    try:
        h, m = text.split(":")
        value = int(h) * 60 + int(m)
    except ValueError:
        raise InputError(f"sleep window: {text!r} is not HH:MM") from None
    if not 0 <= value <= 24 * 60 or not 0 <= int(m) < 60:
        raise InputError(f"sleep window: {text!r} is not a time of day")
    return value


@dataclass(frozen=True)
class SleepWindow:
    """When nodes may sleep: ``start``-``end`` (HH:MM, local time, may wrap past midnight)
    every day, and all of Saturday and Sunday when ``weekends``. ``utc_offset_h``: the local
    time's offset from UTC."""

    start: str = "02:00"
    end: str = "06:00"
    weekends: bool = True
    utc_offset_h: float = 0.0

    def __post_init__(self) -> None:
        if _minutes(self.start) == _minutes(self.end):
            raise InputError("sleep window: start and end must differ")

    def contains(self, ts: float) -> bool:
        local = dt.datetime.fromtimestamp(ts, dt.UTC) + dt.timedelta(hours=self.utc_offset_h)
        if self.weekends and local.weekday() >= 5:
            return True
        now, a, b = local.hour * 60 + local.minute, _minutes(self.start), _minutes(self.end)
        return a <= now < b if a < b else now >= a or now < b

    @classmethod
    def parse(cls, text: str, *, weekends: bool = True, utc_offset_h: float = 0.0) -> SleepWindow:
        """``"02:00-06:00"``."""
        start, sep, end = text.partition("-")
        if not sep:
            raise InputError(f"sleep window: expected HH:MM-HH:MM, got {text!r}")
        return cls(start.strip(), end.strip(), weekends, utc_offset_h)


class NodeSleep(StrEnum):
    AWAKE = "awake"
    DRAINING = "draining"
    ASLEEP = "asleep"
    WAKING = "waking"


@dataclass(frozen=True)
class SleepPolicy:
    """``below``: utilisation (0..1) under which a node may sleep. ``headroom_gpus``: idle GPUs
    the awake nodes keep, so arriving critical work finds room without a cold start.
    ``cold_start_s``: from the magic packet until the node takes work. ``min_awake_s``: after
    the queue woke a node, no node is drained for this long (no waking and sleeping in turn)."""

    window: SleepWindow = field(default_factory=SleepWindow)
    below: float = 0.20
    headroom_gpus: int = 8
    cold_start_s: float = 180.0
    min_awake_s: float = 3600.0
    dry_run: bool = True
    sleep_command: tuple[str, ...] = ("systemctl", "suspend")

    def __post_init__(self) -> None:
        if not 0 <= self.below <= 1:
            raise InputError(f"sleep: below must be in 0..1, got {self.below}")
        if self.headroom_gpus < 0 or self.cold_start_s < 0 or self.min_awake_s < 0:
            raise InputError("sleep: headroom_gpus, cold_start_s and min_awake_s must be >= 0")
        if not self.sleep_command:
            raise InputError("sleep: sleep_command must not be empty")

    @staticmethod
    def command(text: str) -> tuple[str, ...]:
        """A hook command from its shell form (``"ipmitool chassis power soft"``)."""
        words = tuple(shlex.split(text))
        if not words:
            raise InputError("sleep: the sleep command is empty")
        return words


@dataclass(frozen=True)
class SleepAction:
    """What the controller did (or, in a dry run, would do) to a node at ``at``."""

    at: float
    node: str
    action: str  # drain, sleep, wake, open, reopen
    reason: str


#: waiting jobs ``need`` looks at after a round: enough to size a wake-up, bounded in cost
MAX_LOOK = 64


def critical(job: Job) -> bool:
    """Work whose placement sleep may never delay: inference (serving)."""
    return job.priority is PriorityClass.INFERENCE


class SleepController:
    """Runs ``policy`` over ``scheduler``'s nodes. ``wake`` is called with a node name to send
    its magic packet, ``sleep`` to run the sleep hook on it (the agent's job; the simulator
    only counts); neither is called in a dry run."""

    def __init__(
        self,
        scheduler: Scheduler,
        policy: SleepPolicy,
        *,
        wake: Callable[[str], None] = lambda node: None,
        sleep: Callable[[str], None] = lambda node: None,
    ) -> None:
        self.s, self.policy = scheduler, policy
        self._wake, self._sleep = wake, sleep
        self.state: dict[str, NodeSleep] = dict.fromkeys(scheduler.cluster.names, NodeSleep.AWAKE)
        self.ready_at: dict[str, float] = {}
        self.log: list[SleepAction] = []
        #: the queue woke nodes: drain nothing until then (kept by the service over restarts)
        self.hold_until = -float("inf")

    # ---- reading -----------------------------------------------------------------------

    def count(self, state: NodeSleep) -> int:
        return sum(1 for v in self.state.values() if v is state)

    def _gpus(self, node: str) -> int:
        return int(self.s.cluster.n_gpus[self.s.cluster.index[node]])

    def _idle_gpus(self, node: str) -> int:
        c, n = self.s.cluster, self.s.cluster.index[node]
        return int(((c.free[n] == 1000) & c.exists[n]).sum())

    # ---- deciding ----------------------------------------------------------------------

    def step(
        self, now: float, utilisation: Mapping[str, float], basis: Mapping[str, str] | None = None
    ) -> list[SleepAction]:
        """One pass: wake nodes that are due, sleep drained ones, drain idle ones in the
        window, wake all outside it. ``utilisation``: node -> 0..1 (a node not in it is left
        alone: missing is never idle). ``basis``: node -> what its figure came from, added to
        the reason of a drain or sleep."""
        done: list[SleepAction] = []
        for node, ready in list(self.ready_at.items()):
            if now >= ready:
                del self.ready_at[node]
                self._set(node, NodeSleep.AWAKE, now, "open", "cold start done", done)
        inside = self.policy.window.contains(now)
        for node, st in self.state.items():
            if st is NodeSleep.DRAINING:
                if not inside:
                    self._set(node, NodeSleep.AWAKE, now, "reopen", "window over", done)
                elif not self.s.node_busy(node):
                    self._set(node, NodeSleep.ASLEEP, now, "sleep", "drained", done)
            elif st is NodeSleep.ASLEEP and not inside:
                self._start_wake(node, now, "window over", done)
        if not inside or now < self.hold_until:
            return done
        spare = sum(self._idle_gpus(n) for n, st in self.state.items() if st is NodeSleep.AWAKE)
        calm = sorted(
            (u, n)
            for n, u in utilisation.items()
            if self.state.get(n) is NodeSleep.AWAKE and u == u and u < self.policy.below
        )
        for u, node in calm:
            idle = self._idle_gpus(node)
            if spare - idle < self.policy.headroom_gpus:
                continue
            spare -= idle
            why = f"{u:.0%} utilisation"
            if basis is not None and node in basis:
                why += f", {basis[node]}"
            if self.s.node_busy(node):
                self._set(node, NodeSleep.DRAINING, now, "drain", f"below threshold ({why})", done)
            else:
                self._set(node, NodeSleep.ASLEEP, now, "sleep", f"idle ({why})", done)
        return done

    def need(self, now: float, waiting: Iterable[Job]) -> list[SleepAction]:
        """The queue after a round: wake what waiting work needs (the first ``MAX_LOOK`` jobs,
        in the queue's order, so critical work first). Each job is promised room on a node
        already waking that could take it, else a draining node that could is reopened (it is
        still up: no cold start), else a sleeping one is woken."""
        done: list[SleepAction] = []
        room = {n: self._gpus(n) for n in self.ready_at}  # GPUs not yet promised, waking nodes
        for job in list(waiting)[:MAX_LOOK]:
            gpus = max(1, job.total_gpu_milli // 1000)
            promised = next(
                (n for n, left in room.items() if left >= gpus and self._could_take(n, job)), None
            )
            if promised is not None:
                room[promised] -= gpus
                continue
            for want in (NodeSleep.DRAINING, NodeSleep.ASLEEP):
                node = next(
                    (n for n, st in self.state.items() if st is want and self._could_take(n, job)),
                    None,
                )
                if node is None:
                    continue
                why = "critical job waiting" if critical(job) else "queue needs it"
                if want is NodeSleep.DRAINING:
                    self._set(node, NodeSleep.AWAKE, now, "reopen", why, done)
                else:
                    self._start_wake(node, now, why, done)
                    room[node] = self._gpus(node) - gpus
                self.hold_until = now + self.policy.min_awake_s
                break
        return done

    def _sleeping(self) -> list[str]:
        return [n for n, st in self.state.items() if st in (NodeSleep.ASLEEP, NodeSleep.DRAINING)]

    def _could_take(self, node: str, job: Job) -> bool:
        c, n = self.s.cluster, self.s.cluster.index[node]
        if job.gpu_models and (
            c.model_idx[n] < 0 or c.models[c.model_idx[n]] not in job.gpu_models
        ):
            return False
        return bool(
            c.n_gpus[n] >= job.gpus_per_task
            and c.cpu_cap[n] >= job.cpu_milli
            and c.mem_cap[n] >= job.memory_mib
        )

    # ---- acting ------------------------------------------------------------------------

    def _start_wake(self, node: str, now: float, reason: str, done: list[SleepAction]) -> None:
        self.ready_at[node] = now + self.policy.cold_start_s
        self._set(node, NodeSleep.WAKING, now, "wake", reason, done)

    def _set(
        self, node: str, state: NodeSleep, now: float, action: str, reason: str,
        done: list[SleepAction],
    ) -> None:  # fmt: skip
        act = SleepAction(now, node, action, reason)
        done.append(act)
        self.log.append(act)
        if self.policy.dry_run:
            logger.info("dry run: would %s %s (%s)", action, node, reason)
            return
        self.state[node] = state
        if state is NodeSleep.DRAINING or state is NodeSleep.ASLEEP:
            self.s.set_open(node, False)
        if state is NodeSleep.AWAKE:
            self.s.set_open(node, True)
        if action == "sleep":
            self._sleep(node)
        elif action == "wake":
            self._wake(node)


__all__ = ["NodeSleep", "SleepAction", "SleepController", "SleepPolicy", "SleepWindow", "critical"]
