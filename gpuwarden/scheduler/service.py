"""The scheduler as a service: one lock around a ``Scheduler``, every transition in one transaction.

``SchedulerService`` is the facade the HTTP API (``api.py``) and the CLI call. It opens the
transaction of each request and hands the work to the part that owns it. Each part gets its
collaborators when it is built, and depends only on the parts listed below it:

    JobRequests (_service_requests)    job requests             -> Nodes, JobLifecycle
    AgentSync (_service_sync)          agent syncs and orders   -> Nodes, JobLifecycle
    Nodes (_service_nodes)             nodes, health, rounds    -> JobLifecycle
    Transactions (_service_tx)         lock, rollback, rebuild  -> JobLifecycle
    JobLifecycle (_service_lifecycle)  memory, job transitions  -> SchedulerDB (state)

Placement rounds run on each submission and agent sync, and every ``round_every_s`` seconds with
preemption; each is bounded (``Scheduler.schedule``: tenants in turn, at most ``ROUND_BUDGET``
task tries, refused jobs passed over until room is made), so no tenant's queue holds the lock
for long. A tenant may have at most ``max_queued_tasks`` tasks queued (429 past that). A node whose agent has not synced for ``node_timeout_s`` is lost: its work is
written off and it takes no placements until its agent syncs again (``_service_nodes``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from gpuwarden.errors import ConfigError, InputError
from gpuwarden.scheduler._service_jobs import job_of
from gpuwarden.scheduler._service_lifecycle import JobLifecycle, node_spec
from gpuwarden.scheduler._service_nodes import Nodes, health_of
from gpuwarden.scheduler._service_requests import JobRequests
from gpuwarden.scheduler._service_sleep import ServiceSleep
from gpuwarden.scheduler._service_sync import AgentSync
from gpuwarden.scheduler._service_tx import Transactions
from gpuwarden.scheduler._service_types import (
    ConflictError,
    NotFoundError,
    Principal,
    QueueFullError,
    quota_of,
)
from gpuwarden.scheduler.billing import (
    BOARD_POWER_W,
    BillRow,
    EnergyRow,
    UsageInterval,
    energy,
    gpu_hours,
    measured_energy,
)
from gpuwarden.scheduler.mig import canonical_model
from gpuwarden.scheduler.resources import GPU_MILLI
from gpuwarden.scheduler.scheduler import Scheduler
from gpuwarden.scheduler.sleep import SleepPolicy
from gpuwarden.scheduler.state import SchedulerDB
from gpuwarden.scheduler.wol import WOL_PORT
from gpuwarden.wording import counted

logger = logging.getLogger("gpuwarden.scheduler.service")

#: Tasks one tenant may have queued by default (all its queued jobs together): room for a
#: sweep of thousands of small jobs, and a bound on what one tenant's queue costs everyone.
MAX_QUEUED_TASKS = 16_384


class SchedulerService:
    """Jobs, nodes, quotas and billing over one ``SchedulerDB``; thread-safe. A node whose agent
    has not synced for ``node_timeout_s`` seconds (agents sync every second) is lost. A tenant
    may have ``max_queued_tasks`` tasks queued (None: no limit)."""

    def __init__(
        self,
        db: SchedulerDB,
        *,
        policy: str = "warden",
        round_every_s: float = 2.0,
        node_timeout_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        max_queued_tasks: int | None = MAX_QUEUED_TASKS,
        grid_g_per_kwh: float | None = None,
        sleep: SleepPolicy | None = None,
        wol_broadcast: str = "255.255.255.255",
        wol_port: int = WOL_PORT,
    ) -> None:
        if not node_timeout_s > 0:
            raise ConfigError(f"node timeout must be > 0 seconds, got {node_timeout_s}")
        if max_queued_tasks is not None and max_queued_tasks < 1:
            raise ConfigError(f"max queued tasks must be >= 1, got {max_queued_tasks}")
        self.db = db
        self.grid_g_per_kwh = grid_g_per_kwh
        self.policy = policy
        self.round_every_s = round_every_s
        self.node_timeout_s = node_timeout_s
        self.clock = clock
        self.started_at = clock()  # silence before this (the service was down) does not count
        self._lifecycle = JobLifecycle(db, policy)
        self._tx = Transactions(self._lifecycle, clock)
        self._nodes = Nodes(
            self._lifecycle, node_timeout_s=node_timeout_s, started_at=self.started_at, clock=clock
        )
        self._agents = AgentSync(self._lifecycle, self._nodes)
        if sleep is None and (left := db.sleep_rows()):
            logger.warning("%s left asleep or draining by a run that slept nodes, "
                           "and idle-node sleep is off: none of them is woken (%s)",
                           counted(len(left), "node was", "nodes were"),
                           ", ".join(r.node for r in left))  # fmt: skip
        if sleep is not None:
            self._nodes.sleep = ServiceSleep(
                self._lifecycle,
                sleep,
                broadcast=wol_broadcast,
                port=wol_port,
                usage=self._nodes.usage,
            )
        self._jobs = JobRequests(
            self._lifecycle, self._nodes, clock, max_queued_tasks=max_queued_tasks
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_round_error = ""
        self._tx.load()

    @property
    def lock(self) -> threading.RLock:
        """The one lock every request takes (re-entrant)."""
        return self._tx.lock

    @property
    def scheduler(self) -> Scheduler | None:
        """The in-memory scheduler, a cache of the database (``JobLifecycle.scheduler``)."""
        return self._lifecycle.scheduler

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Run a preempting placement round every ``round_every_s`` seconds in a thread."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="gpuwarden-rounds", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.round_every_s):
            try:
                self.tick()
                self.last_round_error = ""
            except Exception as exc:  # the loop must outlive one bad round
                logger.exception("placement round failed")
                self.last_round_error = str(exc)

    def tick(self) -> None:
        """One placement round with preemption."""
        with self._tx.transition():
            self._nodes.run_round(self.clock(), preempt=True)

    def health(self) -> tuple[bool, str]:
        if self._tx.stale:
            return (
                False,
                f"scheduler state not rebuilt after a failed transaction: {self._tx.stale}",
            )
        if self.last_round_error:
            return False, f"last placement round failed: {self.last_round_error}"
        # ``loaded``: this runs without the lock, and must not mark a transition as touching it
        return True, "" if self._lifecycle.loaded else "no live node: none registered or all lost"

    # ---- jobs ------------------------------------------------------------------------------

    def submit(self, who: Principal, body: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """Queue a job; returns (job JSON, created). The same ``idempotency_key`` from the same
        tenant returns the first job and creates nothing."""
        sub = self._jobs.check(who, body)  # checks every field before anything is stored
        with self._tx.transition():
            return self._jobs.submit(who, sub)

    def jobs(self, who: Principal, states: Sequence[str] = ()) -> list[dict[str, Any]]:
        with self.lock:
            return self._jobs.jobs(who, states)

    def job(self, who: Principal, job_id: str) -> dict[str, Any]:
        with self.lock:
            return self._jobs.job(who, job_id)

    def logs(self, who: Principal, job_id: str, *, attempt: int | None, task: int | None) -> str:
        with self.lock:
            return self._jobs.logs(who, job_id, attempt=attempt, task=task)

    def cancel(self, who: Principal, job_id: str) -> dict[str, Any]:
        """Cancel a job: a queued one at once, a running one once its agent stopped it."""
        with self._tx.transition():
            return self._jobs.cancel(who, job_id)

    def report_checkpoint(self, who: Principal, job_id: str, at: float | None) -> dict[str, Any]:
        """The job says it wrote a checkpoint (``POST /v1/jobs/{id}/checkpoint``)."""
        with self._tx.transition():
            return self._jobs.report_checkpoint(who, job_id, at)

    # ---- cluster ---------------------------------------------------------------------------

    def register(self, node: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """An agent says what its node has; rebuilds the scheduler when the inventory changed."""
        with self._tx.transition():
            return self._nodes.register(node, body)

    def agent_sync(self, node: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self._tx.transition():
            return self._agents.agent_sync(node, body, self.clock())

    def set_health(
        self, who: Principal, node: str, gpu: int, health: str, reason: str
    ) -> dict[str, Any]:
        """Mark one GPU ok / at-risk / unhealthy; work that may no longer run there is evicted
        through the same checkpoint path as a preemption."""
        health = health_of(health)
        with self._tx.transition():
            return self._nodes.set_health(who.actor, node, gpu, health, reason)

    def reclaim(self, who: Principal, node: str, deadline: float, reason: str) -> dict[str, Any]:
        """A spot reclaim notice for ``node``: close it, checkpoint and requeue its jobs within
        ``deadline`` (unix seconds)."""
        with self._tx.transition():
            return self._nodes.reclaim(who.actor, node, deadline, reason)

    def nodes(self) -> list[dict[str, Any]]:
        """Every node with its state (ok / lost) and seconds since its agent last synced; a node
        silent past the timeout is written off here, before it is shown."""
        with self._tx.transition():
            now = self.clock()
            self._nodes.check_nodes(now)
            return self._nodes.nodes_json(now)

    # ---- quotas and billing ----------------------------------------------------------------

    def set_quota(
        self,
        who: Principal,
        tenant: str,
        gpus: float | None,
        gpu_memory_mib: int | None,
        guaranteed_gpus: float | None,
    ) -> dict[str, Any]:
        quota = quota_of(tenant, gpus, gpu_memory_mib, guaranteed_gpus)
        with self._tx.transition():
            now = self.clock()
            self.db.set_quota(tenant, gpus, gpu_memory_mib, guaranteed_gpus)
            if self._lifecycle.scheduler is not None:
                self._lifecycle.scheduler.quotas.set(quota)
            self.db.audit(now, who.actor, "quota", tenant=tenant,
                          reason=f"gpus={gpus} guaranteed_gpus={guaranteed_gpus} "
                                 f"gpu_memory_mib={gpu_memory_mib}")  # fmt: skip
            self._nodes.run_round(now, preempt=False)
        return next(r for r in self.quota_rows(Principal("admin")) if r["tenant"] == tenant)

    def quota_rows(self, who: Principal) -> list[dict[str, Any]]:
        with self.lock:
            self._tx.fresh()  # usage comes from memory
            limits = {r["tenant"]: r for r in self.db.quotas()}
            tenants = set(limits) | {r.tenant for r in self.db.jobs()}
            s = self._lifecycle.scheduler
            out = []
            for tenant in sorted(t for t in tenants if who.sees(t)):
                q = limits.get(tenant)
                used = s.quotas.usage(tenant) if s else None
                out.append({
                    "tenant": tenant,
                    "gpus": q["gpus"] if q else None,
                    "gpu_memory_mib": q["gpu_memory_mib"] if q else None,
                    "guaranteed_gpus": q["guaranteed_gpus"] if q else None,
                    "used_gpus": used.gpu_milli / GPU_MILLI if used else 0.0,
                    "used_gpu_memory_mib": used.gpu_memory_mib if used else 0.0,
                })  # fmt: skip
            return out

    def billing(self, who: Principal, since: float, until: float) -> list[BillRow]:
        """GPU-hours per job between ``since`` and ``until`` (unix seconds)."""
        if until < since:
            raise InputError(f"until ({until}) is before since ({since})")
        tenant = None if who.kind == "admin" else who.name
        with self.lock:
            rows = self.db.usage_rows(tenant)
        intervals = [UsageInterval(*r) for r in rows]
        return gpu_hours(intervals, since, until, self.clock())

    def billing_energy(
        self, rows: list[BillRow], since: float | None = None, until: float | None = None
    ) -> list[EnergyRow]:
        """kWh and CO2 of each billed job inside ``[since, until)``: measured by its GPUs'
        energy counters where its nodes' agents sent them, else estimated from the GPU model
        of the nodes its tasks ran on (``billing.energy``); the ``grid_intensity_g_per_kwh``
        setting gives CO2."""
        watts: dict[str, float | None] = {}
        with self.lock:
            models = {n.node: next((g["model"] for g in n.gpus), "") for n in self.db.nodes()}
            for r in rows:
                nodes = {t.node for t in self.db.tasks(job_id=r.job_id)}
                found = {
                    BOARD_POWER_W.get(canonical_model(models.get(n, "") or "x")) for n in nodes
                }
                watts[r.job_id] = found.pop() if len(found) == 1 else None
            stored = self.db.energy_rows([r.job_id for r in rows]) if rows else []
        measured = measured_energy((tuple(s) for s in stored), since, until)
        return energy(rows, watts, self.grid_g_per_kwh, measured)

    def audit(
        self,
        who: Principal,
        limit: int,
        *,
        before_id: int | None = None,
        since: float | None = None,
        action: str | None = None,
    ) -> list[dict[str, Any]]:
        """Audit rows newest first, each with its ``id``; a tenant gets only its own jobs'
        rows. Page back with ``before_id`` = the last id of a full page."""
        tenant = None if who.kind == "admin" else who.name
        with self.lock:
            rows = self.db.audit_rows(
                limit=limit, tenant=tenant, before_id=before_id, since=since, action=action
            )
        return [asdict(r) for r in rows]


__all__ = [
    "ConflictError",
    "MAX_QUEUED_TASKS",
    "NotFoundError",
    "Principal",
    "QueueFullError",
    "SchedulerDB",
    "SchedulerService",
    "job_of",
    "node_spec",
    "quota_of",
]
