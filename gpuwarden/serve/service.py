"""The risk loop of ``gpuwarden serve``: collect -> store -> assess -> decide -> act.

Every ``interval_s`` the service asks its assessor for a ``RiskAssessment`` per GPU, feeds them
to the decision engine (hysteresis, hard signals), lets time pass for holds and pins, and acts on
what changed within the same call, so a GPU crossing the threshold is re-tagged within one
scoring interval. Alertmanager alerts and people's overrides enter the same path. Collection
runs in the reused ``Exporter`` (its own thread), which writes every batch to the store and
serves the telemetry part of ``/metrics``.

One lock serialises decisions (tick, alerts, overrides), so two sources never re-tag the same
node at once; reads (``/v1/gpus``, ``/metrics``) take the engine's own lock only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from gpuwarden.alerts.alertmanager import AmPayload, alert_inputs
from gpuwarden.alerts.audit import AuditLog
from gpuwarden.alerts.base import Notifier, RiskAssessment, Transition
from gpuwarden.alerts.decision import DecisionEngine
from gpuwarden.alerts.hard_signals import QUIET_S
from gpuwarden.errors import ConfigError, StoreError
from gpuwarden.exporter import Exporter
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks.base import Tagger
from gpuwarden.scheduler_hooks.breaker import CircuitBreaker
from gpuwarden.serve._actor import Actor, Counters, HookOutcome, non_ok_hosts
from gpuwarden.serve.verdicts import VerdictLog
from gpuwarden.store.base import Store, WritableStore
from gpuwarden.telemetry import GpuId

#: why an input naming a board since replaced in its slot changes nothing
REPLACED = "board since replaced in its slot (the store has its successor reporting there)"

logger = logging.getLogger("gpuwarden.serve")

#: ``assess(store, at)`` -> one record per GPU (``RiskAssessment`` or any object with its fields)
Assessor = Callable[[Store, float], Iterable[Any]]


class RiskService:
    """The loop and everything it decides with.

    ``taggers`` are wrapped in a ``CircuitBreaker`` each (``breaker_share`` of the fleet per
    ``breaker_window_s``); the fleet size is ``fleet_nodes`` when given, else the most nodes
    seen in the store, the last assessment or the engine. ``exporter``: collects into ``store`` and serves telemetry (None: alerts and the
    assessor only). ``clock``: Unix seconds.
    """

    def __init__(
        self,
        store: Store,
        *,
        assess: Assessor | None = None,
        engine: DecisionEngine | None = None,
        audit: AuditLog | None = None,
        taggers: Sequence[Tagger] = (),
        notifiers: Sequence[Notifier] = (),
        interval_s: float = 60.0,
        exporter: Exporter | None = None,
        breaker_share: float = 0.1,
        breaker_window_s: float = 3600.0,
        fleet_nodes: int | None = None,
        clock: Callable[[], float] = time.time,
        verdicts: WritableStore | None | Literal["store"] = "store",
    ) -> None:
        if not interval_s > 0:
            raise ConfigError(f"serve interval must be positive, not {interval_s!r}")
        if fleet_nodes is not None and fleet_nodes < 1:
            raise ConfigError(f"fleet_nodes must be at least 1, not {fleet_nodes!r}")
        self.store = store
        self.assess = assess
        self.engine = engine or DecisionEngine()
        self.audit = audit or AuditLog()
        self.interval_s = float(interval_s)
        self.exporter = exporter
        self.clock = clock
        self.counters = Counters()
        self.taggers = [
            CircuitBreaker(
                t,
                fleet_nodes=self.fleet_size,
                max_share=breaker_share,
                window_s=breaker_window_s,
                clock=clock,
            )
            for t in taggers
        ]
        self.notifiers = list(notifiers)
        # verdicts go to the telemetry store unless told otherwise (None: not stored)
        self.verdicts = VerdictLog(
            (store if isinstance(store, WritableStore) else None)
            if verdicts == "store"
            else verdicts,  # type: ignore[arg-type]
            self.engine,
        )
        self.actor = Actor(
            self.engine, self.taggers, self.notifiers, self.audit, self.counters, clock
        )
        self._decide = threading.Lock()
        self._seen_alerts: OrderedDict[tuple[str, bool, float], None] = OrderedDict()
        self._fleet_nodes = fleet_nodes
        self._seen_nodes = 0
        self._counted_at: float | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- the loop ------------------------------------------------------------------------

    def restore(self) -> list[HookOutcome]:
        """Start from the audit log's last decisions and make every backend agree with them."""
        with self._decide:
            for gpu, state, since, source in self.audit.last_states():
                self.engine.restore(gpu, state, since=since, source=source)
            return self.actor.resync(non_ok_hosts(self.engine))

    def tick(self, now: float | None = None) -> list[Transition]:
        """One scoring interval: assess, decide, act. Returns the transitions made."""
        now = self.clock() if now is None else now
        self._count_store_nodes(now)
        assessments = self._run_assessor(now)
        with self._decide:
            gone = self._replaced([a.gpu for a in assessments])
            if gone:
                self.counters.replaced_boards_skipped += len(gone)
                logger.info("left out %d assessments of boards since replaced", len(gone))
            changes: list[Transition] = []
            for a in assessments:
                if a.gpu.uuid in gone:
                    continue
                changes += self.engine.assess(a)
            changes += self.engine.tick(now)
            self.actor.act(changes)
            self.actor.retry_failed()
            self.verdicts.record(now, changes)
        return changes

    def _run_assessor(self, now: float) -> list[RiskAssessment]:
        if self.assess is None:
            return []
        started = time.perf_counter()
        self.counters.assess_runs += 1
        try:
            out = [RiskAssessment.coerce(a) for a in self.assess(self.store, now)]
            self._seen_nodes = max(self._seen_nodes, len({a.gpu.hostname for a in out}))
        except Exception as exc:  # a failing model must not stop alerts, overrides or retries
            self.counters.assess_errors += 1
            self.counters.last_assess_error = f"{type(exc).__name__}: {exc}"
            # a store that cannot be read (a server down, a query it refuses) is not the model
            self.counters.assess_store_failed = isinstance(exc, StoreError)
            logger.warning("assess failed: %s", exc, exc_info=True)
            return []
        self.counters.assess_last_ok_ts = now
        self.counters.assess_duration_s = time.perf_counter() - started
        self.counters.last_assess_error = ""
        return out

    def fleet_size(self) -> int:
        """Nodes in the fleet, for the circuit breaker's share."""
        if self._fleet_nodes is not None:
            return self._fleet_nodes
        return max(self._seen_nodes, len(self.engine.nodes()))

    def _count_store_nodes(self, now: float) -> None:
        # a receiver without a scorer still knows the fleet from what collectors stored; the
        # fleet changes slowly, so count every 10 minutes, not every tick
        if self._counted_at is not None and now - self._counted_at < 600:
            return
        self._counted_at = now
        try:
            hosts = self.store.gpus()["hostname"].nunique()
        except Exception as exc:  # the breaker falls back on what the engine has seen
            logger.debug("cannot count the fleet's nodes in the store: %s", exc)
            return
        self._seen_nodes = max(self._seen_nodes, int(hosts))

    # -- other inputs --------------------------------------------------------------------

    def receive_alerts(self, payload: AmPayload) -> dict[str, Any]:
        """Apply one validated Alertmanager payload; the same alert twice does one thing."""
        outcomes = []
        with self._decide:
            changes: list[Transition] = []
            inputs = alert_inputs(payload)
            gone = self._replaced([i.gpu for i in inputs if i.gpu is not None and not i.ignored])
            for i in inputs:
                seen_key = (i.key, i.firing, i.signal_ts)
                if i.ignored:
                    outcome = f"ignored: {i.ignored}"
                elif i.gpu is not None and i.gpu.uuid in gone:
                    outcome = f"ignored: {REPLACED}"
                elif seen_key in self._seen_alerts:
                    outcome = "duplicate"
                else:
                    assert i.gpu is not None and i.effect is not None
                    made = self.engine.alert(
                        i.gpu,
                        key=i.key,
                        name=i.name,
                        effect=i.effect,
                        firing=i.firing,
                        ts=self.clock(),
                        reasons=i.reasons,
                        action=i.action,
                        signal_ts=i.signal_ts,
                    )
                    changes += made
                    self._remember(seen_key)
                    outcome = "applied" + "".join(f": {t.old} -> {t.new}" for t in made)
                self.counters.alerts[outcome.split(":", 1)[0]] += 1
                outcomes.append(
                    {
                        "fingerprint": i.key,
                        "alertname": i.name,
                        "status": "firing" if i.firing else "resolved",
                        "outcome": outcome,
                    }
                )
            hooks = self.actor.act(changes)
            self.verdicts.record(self.clock(), changes)
        return {
            "alerts": outcomes,
            "hooks": [h.__dict__ for h in hooks],
        }

    def _replaced(self, gpus: Sequence[GpuId]) -> set[str]:
        """UUIDs among ``gpus`` of boards replaced in their slot by the one the engine tracks
        there, as the store tells: after the last the store heard of the named board, the
        tracked one sent its first sample, or was heard more than ``QUIET_S`` later (a GPU
        renumbered into the slot). The built-in assessor scores current boards only, but an
        own scorer or an Alertmanager rule can still name the old one after its successor
        reports, and deciding on both would flap the slot's tags every round. The store is
        asked only when a GPU names another UUID than the tracked one; unknown is kept."""
        tracked = self.engine.slot_uuids()
        named = {
            g.uuid: tracked[(g.hostname, g.index)]
            for g in gpus
            if g.uuid and tracked.get((g.hostname, g.index), g.uuid) != g.uuid
        }
        if not named:
            return set()
        try:
            inv = self.store.gpus()
        except Exception as exc:  # unknown: decide on every input, as before
            logger.debug("cannot read the inventory to spot replaced boards: %s", exc)
            return set()
        uuids = inv["uuid"].astype(str).tolist()
        first = dict(zip(uuids, inv["first_ts"].astype(float), strict=True))
        last = dict(zip(uuids, inv["last_ts"].astype(float), strict=True))
        return {
            u
            for u, now_there in named.items()
            if u in last
            and now_there in last
            and (first[now_there] >= last[u] or last[now_there] > last[u] + QUIET_S)
        }

    def _remember(self, key: tuple[str, bool, float]) -> None:
        self._seen_alerts[key] = None
        while len(self._seen_alerts) > 50_000:
            self._seen_alerts.popitem(last=False)

    def override(
        self, uuid: str, state: GpuState | str, *, reason: str, actor: str
    ) -> tuple[Transition, list[HookOutcome]]:
        """A person's decision, applied and re-tagged at once."""
        with self._decide:
            t = self.engine.override(uuid, state, reason=reason, actor=actor, ts=self.clock())
            hooks = self.actor.act([t])
            self.verdicts.record(t.ts, [t])
            return t, hooks

    def release_held(self, actor: str) -> list[HookOutcome]:
        with self._decide:
            return self.actor.release_held(actor)

    # -- threads -------------------------------------------------------------------------

    def start(self) -> None:
        """Start collecting (if an exporter was given), the scoring loop and notifications."""
        self._stop.clear()
        if self.exporter is not None:
            self.exporter.start_polling()
        for name, target in (
            ("gpuwarden-assess", self._loop),
            ("gpuwarden-notify", self._notify_loop),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.tick()
            except Exception:  # a bug in one tick must not end the service
                logger.exception("tick failed")
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def _notify_loop(self) -> None:
        while not self._stop.wait(1.0):
            self.flush_notifiers()

    def flush_notifiers(self) -> int:
        sent = 0
        for n in self.notifiers:
            try:
                sent += n.flush(self.clock())
            except Exception:  # a notifier bug must not end the loop
                logger.exception("notifier %s failed", n.name)
        return sent

    def stop(self) -> None:
        """Stop the threads (a tick in flight finishes); the store and audit stay open."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads.clear()
        if self.exporter is not None:
            self.exporter.stop()
        self.flush_notifiers()

    def health(self) -> tuple[bool, str]:
        """(healthy, why) for /healthz: unhealthy while the assessor or the collector fails."""
        c = self.counters
        if c.last_assess_error:
            what = "store" if c.assess_store_failed else "assess"
            return False, f"{what} failing: {c.last_assess_error}"
        if self.verdicts.last_error:
            return False, f"verdict store failing: {self.verdicts.last_error}"
        if self.exporter is not None:
            ok, why = self.exporter.health()
            if not ok:
                return False, f"collector: {why}"
        return True, "ok"


__all__ = ["Assessor", "RiskService"]
