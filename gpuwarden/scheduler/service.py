"""The scheduler as a service: one lock around a ``Scheduler``, every transition in one transaction.

The SQLite file (``state.SchedulerDB``) is the truth; the in-memory ``Scheduler`` is rebuilt
from it at start, whenever a node registers with a changed inventory and after a transition
that failed (``_service_tx``: all or nothing in memory too), through the same code, so a
restart after ``kill -9`` is not a special case. A job moves

    queued -> running -> succeeded | failed | cancelled
    running -> checkpointing (hook sent, grace running) -> queued (attempt + 1) -> running

Placement rounds run on each submission and agent sync, and every ``round_every_s`` seconds with
preemption. An evicted job leaves the ``Scheduler`` at once (its GPUs go to the job that needed
them) but the agent only starts that job's tasks once the evicted tasks have exited, so two jobs
never run on one GPU beyond what the placement allows. A node whose agent has not synced for
``node_timeout_s`` is lost: its work is written off and it takes no placements until its agent
syncs again (``_service_nodes``). Agent syncs are handled in ``_service_sync``; this module holds
the requests people make.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gpuwarden.errors import ConfigError, InputError
from gpuwarden.scheduler import _service_nodes as liveness
from gpuwarden.scheduler import _service_sync as sync
from gpuwarden.scheduler import _service_tx as tx
from gpuwarden.scheduler._service_jobs import (
    FINISHED,
    MAX_INT,
    check_text,
    job_json,
    job_of,
    normalise_spec,
)
from gpuwarden.scheduler.billing import BillRow, UsageInterval, gpu_hours
from gpuwarden.scheduler.quota import Quota
from gpuwarden.scheduler.resources import GPU_MILLI, Health
from gpuwarden.scheduler.scheduler import Scheduler
from gpuwarden.scheduler.state import JobRow, NodeRow, SchedulerDB

logger = logging.getLogger("gpuwarden.scheduler.service")


class NotFoundError(InputError):
    """No such job, node or GPU (or one another tenant owns): HTTP 404."""


class ConflictError(InputError):
    """The job cannot do that in its state (cancelling a finished job): HTTP 409."""


@dataclass(frozen=True)
class Principal:
    """Who is asking: ``kind`` tenant, admin or agent; ``name`` the tenant or node."""

    kind: str
    name: str = ""

    @property
    def actor(self) -> str:
        return "admin" if self.kind == "admin" else f"{self.kind}:{self.name}"

    def sees(self, tenant: str) -> bool:
        return self.kind == "admin" or (self.kind == "tenant" and self.name == tenant)


class SchedulerService:
    """Jobs, nodes, quotas and billing over one ``SchedulerDB``; thread-safe. A node whose agent
    has not synced for ``node_timeout_s`` seconds (agents sync every second) is lost."""

    def __init__(
        self,
        db: SchedulerDB,
        *,
        policy: str = "warden",
        round_every_s: float = 2.0,
        node_timeout_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not node_timeout_s > 0:
            raise ConfigError(f"node timeout must be > 0 seconds, got {node_timeout_s}")
        self.db = db
        self.policy = policy
        self.round_every_s = round_every_s
        self.node_timeout_s = node_timeout_s
        self.clock = clock
        self.started_at = clock()  # silence before this (the service was down) does not count
        self.lock = threading.RLock()
        self._scheduler: Scheduler | None = None
        self.touched = False  # the scheduler was reached in this transition (``_service_tx``)
        self.stale = ""  # why memory could not be rebuilt after a failed transition
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_round_error = ""
        with self.lock, db.transaction():
            sync.rebuild(self, self.clock())

    @property
    def scheduler(self) -> Scheduler | None:
        """The in-memory scheduler, a cache of the database. Every change to it goes through
        this attribute, so a transition that never read it cannot have changed it."""
        self.touched = True
        return self._scheduler

    @scheduler.setter
    def scheduler(self, value: Scheduler | None) -> None:
        self.touched = True
        self._scheduler = value

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
        with tx.transition(self):
            sync.run_round(self, self.clock(), preempt=True)

    def health(self) -> tuple[bool, str]:
        if self.stale:
            return False, f"scheduler state not rebuilt after a failed transaction: {self.stale}"
        if self.last_round_error:
            return False, f"last placement round failed: {self.last_round_error}"
        # _scheduler: this runs without the lock, and must not mark a transition as touching it
        return True, "" if self._scheduler else "no live node: none registered or all lost"

    # ---- jobs ------------------------------------------------------------------------------

    def submit(self, who: Principal, body: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """Queue a job; returns (job JSON, created). The same ``idempotency_key`` from the same
        tenant returns the first job and creates nothing."""
        tenant = self._tenant_for(who, body.get("tenant"))
        key = body.get("idempotency_key")
        if key is not None:
            check_text("idempotency_key", key, max_chars=200)
        spec = normalise_spec(body)
        job_id = "j-" + uuid.uuid4().hex[:12]
        job = job_of(job_id, tenant, spec)  # checks every field before anything is stored
        with tx.transition(self):
            if key is not None and (old := self.db.job_by_key(tenant, key)) is not None:
                return job_json(old), False
            now = self.clock()
            row = JobRow(
                job_id, self.db.next_seq(), tenant, spec["name"], spec, "queued", 1, key, now, now
            )
            self.db.insert_job(row)
            self.db.audit(now, who.actor, "submit", job_id=job_id, tenant=tenant,
                          reason=f"{spec['priority']} {job.total_gpu_milli} GPU milli")  # fmt: skip
            if self.scheduler is not None:
                self.scheduler.submit(job)
                sync.run_round(self, now, preempt=False)
            return job_json(self._row(job_id)), True

    def jobs(self, who: Principal, states: Sequence[str] = ()) -> list[dict[str, Any]]:
        tenant = None if who.kind == "admin" else who.name
        with self.lock:
            return [job_json(r) for r in self.db.jobs(tenant=tenant, states=states)]

    def job(self, who: Principal, job_id: str) -> dict[str, Any]:
        with self.lock:
            return job_json(self._visible(who, job_id))

    def logs(self, who: Principal, job_id: str, *, attempt: int | None, task: int | None) -> str:
        with self.lock:
            self._visible(who, job_id)
            return self.db.log_text(job_id, attempt=attempt, task=task)

    def cancel(self, who: Principal, job_id: str) -> dict[str, Any]:
        """Cancel a job: a queued one at once, a running one once its agent stopped it."""
        with tx.transition(self):
            row = self._visible(who, job_id)
            if row.state in FINISHED:
                raise ConflictError(f"job {job_id} has already {row.state}; nothing to cancel")
            if row.stop_reason == "cancel":
                return job_json(row)
            now = self.clock()
            self.db.audit(now, who.actor, "cancel", job_id=job_id, tenant=row.tenant,
                          reason=f"cancelled while {row.state}")  # fmt: skip
            if row.state == "queued":
                sync.forget(self, job_id)
                self.db.update_job(job_id, state="cancelled", ended_at=now, reason="cancelled")
            else:
                if row.state == "running" and row.stop_reason is None:
                    sync.forget(self, job_id)
                self.db.update_job(job_id, stop_reason="cancel", stop_after=now, reason="cancelled")
                sync.maybe_finish_stop(self, job_id, now)
            sync.run_round(self, now, preempt=False)
            return job_json(self._row(job_id))

    def report_checkpoint(self, who: Principal, job_id: str, at: float | None) -> dict[str, Any]:
        """The job says it wrote a checkpoint (``POST /v1/jobs/{id}/checkpoint``)."""
        with tx.transition(self):
            row = self._visible(who, job_id)
            if row.state not in ("running", "checkpointing"):
                raise ConflictError(f"job {job_id} is {row.state}, not running")
            now = self.clock()
            sync.checkpointed(self, row, now if at is None else at, who.actor, now)
            return job_json(self._row(job_id))

    # ---- cluster ---------------------------------------------------------------------------

    def register(self, node: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """An agent says what its node has; rebuilds the scheduler when the inventory changed."""
        with tx.transition(self):
            return sync.register(self, node, body, self.clock())

    def agent_sync(self, node: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with tx.transition(self):
            return sync.agent_sync(self, node, body, self.clock())

    def set_health(
        self, who: Principal, node: str, gpu: int, health: str, reason: str
    ) -> dict[str, Any]:
        """Mark one GPU ok / at-risk / unhealthy; work that may no longer run there is evicted
        through the same checkpoint path as a preemption."""
        try:
            health = str(Health(health))
        except ValueError:
            raise InputError(f"health must be ok, at-risk or unhealthy, got {health!r}") from None
        with tx.transition(self):
            row = self.db.node(node)
            if row is None:
                raise NotFoundError(f"no node {node!r} is registered")
            if not any(g["index"] == gpu for g in row.gpus):
                raise NotFoundError(f"node {node} has no GPU {gpu}")
            now = self.clock()
            evictions = []
            # a lost node holds no work; the rebuild when it is back applies the stored health
            if row.lost_at is None and self.scheduler is not None:
                evictions = self.scheduler.set_health(node, gpu, health)
            gpus = [{**g, "health": health} if g["index"] == gpu else g for g in row.gpus]
            self.db.upsert_node(NodeRow(node, row.cpu_milli, row.memory_mib, gpus,
                                        row.agent_seen_at, row.sync_seq))  # fmt: skip
            self.db.audit(
                now, who.actor, "health", node=node, gpu=gpu, reason=f"{health}: {reason}"
            )
            evicted = [e.job.job_id for e in evictions]
            for e in evictions:
                sync.evicted(self, e.job.job_id, e.reason, now, who.actor)
            sync.run_round(self, now, preempt=False)
            return {"node": node, "gpu": gpu, "health": health, "evicted": evicted}

    def nodes(self) -> list[dict[str, Any]]:
        """Every node with its state (ok / lost) and seconds since its agent last synced; a node
        silent past the timeout is written off here, before it is shown."""
        with tx.transition(self):
            now = self.clock()
            liveness.check_nodes(self, now)
            return liveness.nodes_json(self, now)

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
        with tx.transition(self):
            now = self.clock()
            self.db.set_quota(tenant, gpus, gpu_memory_mib, guaranteed_gpus)
            if self.scheduler is not None:
                self.scheduler.quotas.set(quota)
            self.db.audit(now, who.actor, "quota", tenant=tenant,
                          reason=f"gpus={gpus} guaranteed_gpus={guaranteed_gpus} "
                                 f"gpu_memory_mib={gpu_memory_mib}")  # fmt: skip
            sync.run_round(self, now, preempt=False)
        return next(r for r in self.quota_rows(Principal("admin")) if r["tenant"] == tenant)

    def quota_rows(self, who: Principal) -> list[dict[str, Any]]:
        with self.lock:
            tx.fresh(self)  # usage comes from memory
            limits = {r["tenant"]: r for r in self.db.quotas()}
            tenants = set(limits) | {r.tenant for r in self.db.jobs()}
            out = []
            for tenant in sorted(t for t in tenants if who.sees(t)):
                q = limits.get(tenant)
                used = self.scheduler.quotas.usage(tenant) if self.scheduler else None
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

    # ---- helpers ---------------------------------------------------------------------------

    def _row(self, job_id: str) -> JobRow:
        row = self.db.job(job_id)
        if row is None:
            raise NotFoundError(f"no job {job_id}")
        return row

    def _visible(self, who: Principal, job_id: str) -> JobRow:
        row = self.db.job(job_id)
        if row is None or not who.sees(row.tenant):  # another tenant's job is "not found" too
            raise NotFoundError(f"no job {job_id}")
        return row

    @staticmethod
    def _tenant_for(who: Principal, named: object) -> str:
        if who.kind == "admin":
            if not isinstance(named, str) or not named:
                raise InputError("tenant: the admin token must name the tenant of the job")
            return check_text("tenant", named, max_chars=200)
        if named not in (None, who.name):
            raise InputError("tenant: a tenant token submits for its own tenant only")
        return who.name


#: The most GPUs a quota may name: far beyond any cluster, and small enough that its GPU
#: thousandths stay exact integers.
MAX_QUOTA_GPUS = 1_000_000.0


def quota_of(
    tenant: str, gpus: float | None, gpu_memory_mib: int | None, guaranteed_gpus: float | None
) -> Quota:
    """The scheduler's ``Quota``: ``guaranteed_gpus`` is the guarantee, ``gpus`` the limit up to
    which interruptible jobs may borrow (no guarantee given: ``gpus`` is both). Every value is
    checked here, whether it came over HTTP, from ``--quotas`` or from the database."""
    check_text("tenant", tenant, max_chars=200)
    for name, value in (("gpus", gpus), ("guaranteed_gpus", guaranteed_gpus)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(f"quota of {tenant}: {name} must be a number of GPUs, got {value!r}")
        if not 0 <= value <= MAX_QUOTA_GPUS:  # NaN and inf fail too
            raise InputError(
                f"quota of {tenant}: {name} must be within 0..{MAX_QUOTA_GPUS:g}, got {value!r}"
            )
    mem = gpu_memory_mib
    if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int)
                            or not 0 <= mem <= MAX_INT):  # fmt: skip
        raise InputError(
            f"quota of {tenant}: gpu_memory_mib must be a whole number in 0..{MAX_INT}, got {mem!r}"
        )
    if gpus is not None and guaranteed_gpus is not None and guaranteed_gpus > gpus:
        raise InputError(f"quota of {tenant}: guaranteed_gpus {guaranteed_gpus} > gpus {gpus}")
    guarantee = guaranteed_gpus if guaranteed_gpus is not None else gpus
    if guarantee is None:
        return Quota(tenant, None, gpu_memory_mib)
    borrow = 0.0 if gpus is None else gpus - guarantee
    return Quota(tenant, round(guarantee * GPU_MILLI), gpu_memory_mib, round(borrow * GPU_MILLI))


__all__ = ["ConflictError", "NotFoundError", "Principal", "SchedulerService", "quota_of"]
