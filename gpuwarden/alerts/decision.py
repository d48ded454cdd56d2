"""The decision state machine: risk scores, alerts and people in, GPU state changes out.

    ok --(risk >= enter_at, an at-risk alert fires, or a link rule holds)--> at-risk
    at-risk --(risk < exit_below, no at-risk alert and no link rule, for hold_s)--> ok
    any --(hard signal: DBE, remap failure, GPU lost, fatal Xid)--> unhealthy   (at once)
    unhealthy --(a person, or a new board in the slot)--> ok / at-risk

Hysteresis keeps a GPU whose score hovers around the threshold from flapping its node's tag:
a score between ``exit_below`` and ``enter_at`` keeps the current state, and leaving at-risk
needs the score to *stay* low for ``hold_s`` (default 24 h). A rule beside the model
(``RiskAssessment.rule``: a PCIe link below full width, NVLink errors growing on one GPU)
counts as a firing at-risk alert for as long as the scorer reports it. An unknown score (NaN) is no
evidence either way: it neither starts nor resets the hold. Unhealthy is sticky because the
GPU needs a reset or a replacement, which a person confirms (or the slot reports a new UUID).

A person's decision (``override``) is pinned for ``manual_hold_s``: scores and alerts are still
recorded but do not move the state, except a hard signal newer than the decision.

GPUs are tracked by slot (hostname, index); the UUID says which board sits there.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from gpuwarden.alerts.base import RiskAssessment, Transition
from gpuwarden.errors import ConfigError, InputError
from gpuwarden.health import DEFAULT_AT_RISK, GpuState
from gpuwarden.telemetry import GpuId

DEFAULT_ENTER_AT = DEFAULT_AT_RISK  # serve passes the loaded model's own threshold
DEFAULT_EXIT_BELOW = 0.5
#: how long a GPU's track is kept aside after another board took its slot: a GPU renumbered
#: at a boot reports at its new index within this
PARKED_S = 7 * 86400.0
DEFAULT_HOLD_S = 24 * 3600.0


@dataclass(frozen=True)
class GpuStatus:
    """What the engine knows of one GPU now (``/gpus`` and ``gpuwarden_gpu_state``)."""

    gpu: GpuId
    state: GpuState
    risk: float
    risk_ts: float | None
    since: float
    source: str
    reasons: tuple[str, ...]
    action: str
    firing: tuple[str, ...]
    pinned_until: float | None


@dataclass
class _Track:
    gpu: GpuId
    state: GpuState = GpuState.OK
    since: float = 0.0
    source: str = "model"
    risk: float = math.nan
    risk_ts: float | None = None
    reasons: tuple[str, ...] = ()
    action: str = ""
    below_since: float | None = None
    firing: dict[str, str] = field(default_factory=dict)  # alert key -> alert name
    alert_low: bool = False  # every at-risk alert resolved: evidence the condition ended
    ruled: bool = False  # a rule beside the model holds (``RiskAssessment.rule``)
    pinned_at: float | None = None
    pinned_until: float | None = None


def _known(x: float) -> bool:
    return not math.isnan(x)


class DecisionEngine:
    """Per-GPU hysteresis over risk scores, alerts and manual decisions (thread-safe).

    ``enter_at``: risk at which an ok GPU becomes at-risk (``health.at_risk_threshold``). ``exit_below``: risk the
    GPU must stay under, for ``hold_s`` seconds, to be ok again (0.5, 24 h).
    ``manual_hold_s``: how long a person's decision holds against the scorer (24 h).

    GPUs are tracked per slot (host, index). A new UUID in a slot is a new board and starts ok;
    a UUID the engine tracks at another index of the same host is that GPU renumbered (a GPU
    off the bus renumbers the ones after it at the next boot): its state goes with it, and the
    board it displaced is kept aside in case it reports at another index too.
    """

    def __init__(
        self,
        *,
        enter_at: float = DEFAULT_ENTER_AT,
        exit_below: float = DEFAULT_EXIT_BELOW,
        hold_s: float = DEFAULT_HOLD_S,
        manual_hold_s: float = DEFAULT_HOLD_S,
    ) -> None:
        if not 0.0 <= exit_below <= enter_at <= 1.0:
            raise ConfigError(
                f"need 0 <= exit_below <= enter_at <= 1, got exit_below={exit_below!r}, "
                f"enter_at={enter_at!r}"
            )
        if not (hold_s >= 0 and manual_hold_s >= 0):
            raise ConfigError("hold_s and manual_hold_s must be >= 0 seconds")
        self.enter_at = float(enter_at)
        self.exit_below = float(exit_below)
        self.hold_s = float(hold_s)
        self.manual_hold_s = float(manual_hold_s)
        self._tracks: dict[tuple[str, int], _Track] = {}
        # tracks displaced from their slot by a renumbered or new board, by UUID, with the
        # slot they left: a GPU renumbered again later picks its track up (``PARKED_S``)
        self._parked: dict[str, tuple[tuple[str, int], float, _Track]] = {}
        self._uuids: set[str] = set()  # every UUID given a track: only these can be renumbered
        self._lock = threading.RLock()

    # -- inputs --------------------------------------------------------------------------

    def assess(self, a: RiskAssessment, *, source: str = "model") -> list[Transition]:
        """Take one scorer verdict; returns the transitions it caused (usually none)."""
        with self._lock:
            out, t = self._track(a.gpu, a.ts)
            t.risk, t.risk_ts = float(a.risk), a.ts
            t.ruled = bool(a.rule)
            if a.reasons or a.action:
                t.reasons, t.action = tuple(a.reasons), a.action
            if a.hard_signal:
                change = self._hard(
                    t, a.ts, a.hard_signal, a.reasons, a.hard_signal_ts, a.action, source
                )
                return out + ([change] if change else [])
            self._update_below(t, a.ts)
            change = self._decide(t, a.ts, source)
            return out + ([change] if change else [])

    def alert(
        self,
        gpu: GpuId,
        *,
        key: str,
        name: str,
        effect: GpuState,
        firing: bool,
        ts: float,
        reasons: tuple[str, ...] = (),
        action: str = "",
        signal_ts: float | None = None,
    ) -> list[Transition]:
        """An alert about ``gpu`` fired or resolved (``key``: its identity, e.g. the
        Alertmanager fingerprint). ``effect`` unhealthy acts as a hard signal; at-risk counts
        as a score above ``enter_at`` while it fires. Repeating the same call changes nothing."""
        with self._lock:
            out, t = self._track(gpu, ts)
            if effect is GpuState.UNHEALTHY:
                if not firing:  # unhealthy is sticky: a person clears it
                    return out
                why = reasons or (f"alert {name} is firing",)
                change = self._hard(t, ts, why[0], why, signal_ts, action, "alertmanager")
                return out + ([change] if change else [])
            if effect is not GpuState.AT_RISK:
                return out
            if firing:
                if key in t.firing:
                    return out
                t.firing[key] = name
                t.alert_low = False
                if reasons or action:
                    t.reasons, t.action = tuple(reasons), action
            else:
                if t.firing.pop(key, None) is None:
                    return out
                t.alert_low = not t.firing
            self._update_below(t, ts)
            change = self._decide(t, ts, "alertmanager")
            return out + ([change] if change else [])

    def override(
        self, uuid: str, state: GpuState | str, *, reason: str, actor: str, ts: float
    ) -> Transition:
        """A person sets the state of the GPU with ``uuid``; pinned for ``manual_hold_s``.
        Recorded even when the state does not change (the person confirmed it)."""
        state = GpuState.parse(state)
        if not reason.strip():
            raise InputError("a manual decision needs a reason")
        if not actor.strip():
            raise InputError("a manual decision needs the name of who decided")
        with self._lock:
            t = self._by_uuid(uuid)
            old = t.state
            t.state, t.since, t.source = state, ts, "manual"
            t.below_since = None
            t.pinned_at = ts
            t.pinned_until = ts + self.manual_hold_s if self.manual_hold_s > 0 else None
            return Transition(
                ts, t.gpu, old, state, t.risk, (reason.strip(),), t.action, "manual", actor.strip()
            )

    def tick(self, now: float) -> list[Transition]:
        """Let time pass: expire pins and holds. Call once per scoring interval."""
        out: list[Transition] = []
        with self._lock:
            for t in self._tracks.values():
                if t.pinned_until is not None and now >= t.pinned_until:
                    t.pinned_at = t.pinned_until = None
                    self._update_below(t, now)
                change = self._decide(t, now, "hold")
                if change:
                    out.append(change)
        return out

    def restore(self, gpu: GpuId, state: GpuState, *, since: float, source: str) -> None:
        """Start from a state decided before a restart (read back from the audit log). A
        person's decision (``source`` manual) is pinned again for what is left of
        ``manual_hold_s`` from when it was made: a restart must not hand it back to the scorer."""
        with self._lock:
            t = self._tracks.setdefault((gpu.hostname, gpu.index), _Track(gpu, since=since))
            self._uuids.add(gpu.uuid)
            t.gpu, t.state, t.since, t.source = gpu, GpuState.parse(state), since, source
            t.pinned_at = t.pinned_until = None
            if source == "manual" and self.manual_hold_s > 0:
                t.pinned_at, t.pinned_until = since, since + self.manual_hold_s

    # -- reading -------------------------------------------------------------------------

    def statuses(self) -> list[GpuStatus]:
        """Every GPU seen, sorted by hostname and index."""
        with self._lock:
            return [self._status(self._tracks[k]) for k in sorted(self._tracks)]

    def status(self, uuid: str) -> GpuStatus:
        """The GPU with ``uuid``; InputError if no such GPU was seen."""
        with self._lock:
            return self._status(self._by_uuid(uuid))

    def node_states(self, hostname: str) -> dict[int, GpuState]:
        """GPU index -> state for every GPU seen on ``hostname``."""
        with self._lock:
            return {i: t.state for (h, i), t in self._tracks.items() if h == hostname}

    def node_uuids(self, hostname: str) -> dict[int, str]:
        """GPU index -> UUID for every GPU seen on ``hostname`` that reported one."""
        with self._lock:
            return {
                i: t.gpu.uuid for (h, i), t in self._tracks.items() if h == hostname and t.gpu.uuid
            }

    def slot_uuids(self) -> dict[tuple[str, int], str]:
        """(hostname, index) -> the UUID tracked there, for every slot whose GPU reported one."""
        with self._lock:
            return {k: t.gpu.uuid for k, t in self._tracks.items() if t.gpu.uuid}

    def nodes(self) -> list[str]:
        with self._lock:
            return sorted({h for h, _ in self._tracks})

    # -- internals -----------------------------------------------------------------------

    def _status(self, t: _Track) -> GpuStatus:
        return GpuStatus(
            t.gpu,
            t.state,
            t.risk,
            t.risk_ts,
            t.since,
            t.source,
            t.reasons,
            t.action,
            tuple(sorted(set(t.firing.values()))),
            t.pinned_until,
        )

    def _by_uuid(self, uuid: str) -> _Track:
        for t in self._tracks.values():
            if t.gpu.uuid == uuid:
                return t
        raise InputError(f"no GPU with UUID {uuid!r} has been seen")

    def _track(self, gpu: GpuId, ts: float) -> tuple[list[Transition], _Track]:
        """The slot's track; a new UUID in a known slot is a new board and starts ok, a UUID
        tracked at another index of the host is that GPU renumbered (``_renumbered``)."""
        key = (gpu.hostname, gpu.index)
        t = self._tracks.get(key)
        if t is not None and t.gpu.uuid == gpu.uuid:
            if gpu != t.gpu and (gpu.model or gpu.pci_bus_id):
                t.gpu = gpu  # keep the richest identity seen
            return [], t
        moved = self._renumbered(gpu, ts)
        if moved is not None:
            return moved
        self._uuids.add(gpu.uuid)
        if t is None:
            t = self._tracks[key] = _Track(gpu, since=ts)
            return [], t
        old = t
        self._park(key, old, ts)
        t = self._tracks[key] = _Track(gpu, since=ts, source="replaced")
        if old.state is GpuState.OK:
            return [], t
        why = f"board replaced: UUID {old.gpu.uuid} -> {gpu.uuid}"
        change = Transition(ts, gpu, old.state, GpuState.OK, math.nan, (why,), "", "replaced")
        return [change], t

    def _renumbered(self, gpu: GpuId, ts: float) -> tuple[list[Transition], _Track] | None:
        """``gpu``'s own track when it is tracked at another index of its host, or was put
        aside from another slot: moved into ``gpu``'s slot with its state, the slot's board
        put aside. One transition when a state moves or leaves (the node's tags follow)."""
        if not gpu.uuid or gpu.uuid not in self._uuids:
            return None  # a GPU never seen (every GPU at start-up): no search
        key = (gpu.hostname, gpu.index)
        src = next(
            (
                k
                for k, t in self._tracks.items()
                if t.gpu.uuid == gpu.uuid and k[0] == gpu.hostname and k != key
            ),
            None,
        )
        if src is not None:
            moved = self._tracks.pop(src)
        else:
            parked = self._parked.get(gpu.uuid)
            if parked is None or parked[0] == key or parked[0][0] != gpu.hostname:
                return None  # a board back in the slot it left starts again, as a new one
            src, _, moved = self._parked.pop(gpu.uuid)
        here = self._tracks.get(key)
        if here is not None:
            self._park(key, here, ts)
        moved.gpu = gpu
        self._tracks[key] = moved
        if moved.state is GpuState.OK and (here is None or here.state is GpuState.OK):
            return [], moved
        why = f"GPU {gpu.uuid} now reports as index {gpu.index} (was {src[1]})"
        old = here.state if here is not None else moved.state
        return [
            Transition(ts, gpu, old, moved.state, moved.risk, (why,), moved.action, "moved")
        ], moved

    def _park(self, key: tuple[str, int], t: _Track, ts: float) -> None:
        if not t.gpu.uuid:
            return
        self._parked = {u: p for u, p in self._parked.items() if ts - p[1] < PARKED_S}
        self._parked[t.gpu.uuid] = (key, ts, t)

    def _pinned(self, t: _Track, ts: float) -> bool:
        return t.pinned_until is not None and ts < t.pinned_until

    def _hard(
        self,
        t: _Track,
        ts: float,
        signal: str,
        reasons: tuple[str, ...],
        signal_ts: float | None,
        action: str,
        source: str,
    ) -> Transition | None:
        if t.state is GpuState.UNHEALTHY:
            return None
        if self._pinned(t, ts):
            # a person decided after this signal was seen: the signal is already judged
            if signal_ts is not None and t.pinned_at is not None and signal_ts <= t.pinned_at:
                return None
            t.pinned_at = t.pinned_until = None
        old = t.state
        t.state, t.since, t.source, t.below_since = GpuState.UNHEALTHY, ts, source, None
        t.reasons = (signal, *[r for r in reasons if r != signal])
        t.action = action or t.action
        return Transition(ts, t.gpu, old, t.state, t.risk, t.reasons, t.action, source)

    def _update_below(self, t: _Track, ts: float) -> None:
        """Start or reset the hold clock from the evidence just received."""
        if t.firing or t.ruled or (_known(t.risk) and t.risk >= self.exit_below):
            t.below_since = None
        elif _known(t.risk) or t.alert_low:
            if t.below_since is None:
                t.below_since = ts

    def _decide(self, t: _Track, ts: float, source: str) -> Transition | None:
        if self._pinned(t, ts) or t.state is GpuState.UNHEALTHY:
            return None
        high = bool(t.firing) or t.ruled or (_known(t.risk) and t.risk >= self.enter_at)
        if t.state is GpuState.OK:
            if not high:
                return None
            t.below_since = None
            if source == "hold":  # a pin expired under a high score or a firing alert
                source = "alertmanager" if t.firing else "model"
            return self._move(t, GpuState.AT_RISK, ts, source, t.reasons)
        if t.below_since is not None and ts - t.below_since >= self.hold_s:
            t.below_since = None
            why = (f"risk stayed below {self.exit_below:.2f} for {self.hold_s / 3600:g} h",)
            return self._move(t, GpuState.OK, ts, "hold", why)
        return None

    def _move(
        self, t: _Track, new: GpuState, ts: float, source: str, reasons: tuple[str, ...]
    ) -> Transition:
        old = t.state
        t.state, t.since, t.source = new, ts, source
        return Transition(ts, t.gpu, old, new, t.risk, reasons, t.action, source)


__all__ = [
    "DecisionEngine",
    "GpuStatus",
    "DEFAULT_ENTER_AT",
    "DEFAULT_EXIT_BELOW",
    "DEFAULT_HOLD_S",
]
