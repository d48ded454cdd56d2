"""The in-memory scheduler kept in step with the database, and the job moves that change both.

The SQLite file (``SchedulerDB``) is the truth; ``JobLifecycle.scheduler`` is its cache, rebuilt
from it (``rebuild``) at start, when a node is lost, back or registers a changed inventory, and
after a transition that failed (``_service_tx``), through the same code, so a restart after
``kill -9`` is not a special case. A job moves

    queued -> running -> succeeded | failed | cancelled
    running -> checkpointing (hook sent, grace running) -> queued (attempt + 1) -> running

An evicted job leaves the ``Scheduler`` at once (its GPUs go to the job that needed them); it is
queued again, failed or cancelled only once its agent reports its tasks gone
(``maybe_finish_stop``). Every method runs under the service's lock inside one open transaction.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from gpuwarden.errors import InputError
from gpuwarden.scheduler import mig
from gpuwarden.scheduler._service_jobs import (
    for_tenant,
    job_of,
    placement_json,
    preempted_reason,
    task_placements,
)
from gpuwarden.scheduler._service_types import quota_of
from gpuwarden.scheduler.jobs import Decision
from gpuwarden.scheduler.resources import GPU_MEMORY_MIB, CostClass, GpuSpec, NodeSpec, SharingMode
from gpuwarden.scheduler.scheduler import Scheduler
from gpuwarden.scheduler.state import JobRow, NodeRow, SchedulerDB, TaskRow, checkpoint_reason

logger = logging.getLogger("gpuwarden.scheduler.service")


class JobLifecycle:
    """Owns the in-memory ``Scheduler`` over ``db`` and every job transition that changes it."""

    def __init__(self, db: SchedulerDB, policy: str) -> None:
        self.db = db
        self.policy = policy
        self._scheduler: Scheduler | None = None
        self.touched = False  # the scheduler was reached in this transition (``_service_tx``)
        #: nodes a spot reclaim closed (node -> deadline), kept across rebuilds and, in the
        #: database's ``reclaims`` table, across restarts
        self.closed: dict[str, float] = {r.node: r.deadline for r in db.reclaims()}
        #: what each agent last said its model cache holds
        self.model_cache: dict[str, list[str]] = {}

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

    @property
    def loaded(self) -> bool:
        """Whether a scheduler is held; for callers outside the lock, which must not mark a
        transition as having touched it."""
        return self._scheduler is not None

    def rebuild(self, now: float) -> None:
        """Build the in-memory scheduler from the database: live nodes (lost ones take no work),
        quotas, running jobs adopted where they run, queued jobs resubmitted in queue order."""
        nodes = [n for n in self.db.nodes() if n.lost_at is None]
        if not nodes:
            self.scheduler = None
            return
        quotas = []
        for r in self.db.quotas():
            try:
                quotas.append(quota_of(r["tenant"], r["gpus"], r["gpu_memory_mib"],
                                       r["guaranteed_gpus"]))  # fmt: skip
            except InputError as exc:  # stored before values were bounded: serve on, unlimited
                logger.error("ignoring the stored quota of %s: %s", r["tenant"], exc)
        s = Scheduler([node_spec(n) for n in nodes], self.policy, quotas)
        lost = []
        for row in self.db.jobs(states=("running",)):
            if row.stop_reason is not None or not row.placement:
                continue
            try:
                s.adopt(job_of(row.job_id, row.tenant, row.spec), task_placements(row.placement),
                        started_at=row.started_at, last_checkpoint_at=row.last_checkpoint_at)  # fmt: skip
            except InputError as exc:  # its node changed under it: move it like a preemption
                lost.append((row.job_id, f"cannot keep its placement after a restart: {exc}"))
        evictions = []
        for n in nodes:  # health after adoption: adopted work was allowed when it was placed
            for g in n.gpus:
                if g.get("health", "ok") != "ok":
                    evictions += s.set_health(n.node, g["index"], g["health"])
        queued = sorted(self.db.jobs(states=("queued",)), key=lambda r: (r.queued_at, r.seq))
        for row in queued:
            s.submit(job_of(row.job_id, row.tenant, row.spec))
        for node in self.closed:  # reclaimed nodes stay closed until their agent registers again
            if node in s.cluster.index:
                s.set_open(node, False)
        for node, held in self.model_cache.items():
            if node in s.cluster.index:
                s.set_model_cache(node, held)
        self.scheduler = s
        for job_id, reason in lost:
            self.evicted(job_id, reason, now, "scheduler")
        for e in evictions:
            self.evicted(e.job.job_id, e.reason, now, "scheduler")

    def apply_decision(self, d: Decision, now: float) -> None:
        """Store what a placement round decided for one job: its placement, its victims, or
        why it still waits."""
        if d.placement is None and not d.evictions:
            # most of a long queue on a full cluster: one UPDATE that touches the row only when
            # the reason changed, not a read and decode of every waiting job each round
            self.db.set_reason(d.job_id, d.reason)
            return
        row = self.db.job(d.job_id)
        for e in getattr(d, "evictions", ()):
            # the victim's tenant reads this reason: another tenant's job stays unnamed there
            # and is named in a row only the admin sees (no tenant)
            victim = e.job
            by_tenant = None if row is None else row.tenant
            self.evicted(victim.job_id, preempted_reason(victim, d.job_id, by_tenant), now,
                         "scheduler")  # fmt: skip
            if by_tenant not in (None, victim.tenant):
                self.db.audit(now, "scheduler", "preempt-for", job_id=d.job_id, node=e.node,
                              reason=f"took the GPUs of job {victim.job_id} of tenant "
                                     f"{victim.tenant}")  # fmt: skip
        if row is None:
            return
        if d.placement is None:
            if d.reason != row.reason:
                self.db.update_job(d.job_id, reason=d.reason)
            return
        where = ", ".join(f"{t.node} GPU {','.join(map(str, t.gpus))}" for t in d.placement.tasks)
        self.db.update_job(d.job_id, state="running", placement=placement_json(d.placement),
                           reason="", started_at=None)  # fmt: skip
        nodes = {t.node for t in d.placement.tasks}
        self.db.audit(now, "scheduler", "place", job_id=d.job_id, tenant=row.tenant,
                      node=nodes.pop() if len(nodes) == 1 else None,
                      reason=f"attempt {row.attempt} on {where}")  # fmt: skip

    def forget(self, job_id: str) -> None:
        """Take a job out of the scheduler (placed or queued); a job it does not hold is fine."""
        if self.scheduler is not None:
            try:
                self.scheduler.release(job_id)
            except InputError:
                pass

    def evicted(
        self, job_id: str, reason: str, now: float, actor: str, *, deadline: float | None = None
    ) -> None:
        """A running job must leave its GPUs: ask it to checkpoint, stop it after its grace
        period (cut to ``deadline``, a spot reclaim's), then queue it again
        (``maybe_finish_stop``). The scheduler has already freed its GPUs."""
        row = self.db.job(job_id)
        if row is None or row.state != "running" or row.stop_reason is not None:
            return
        shown = for_tenant(reason, row.tenant, self._tenant_of)
        if shown != reason:  # the admin still learns which job it was, from the log
            logger.warning("job %s evicted: %s", job_id, reason)
        reason = shown
        self.forget(job_id)  # it comes back with the next attempt, after its tasks have stopped
        grace = float(row.spec["grace_period_s"]) if row.spec.get("checkpoint") else 0.0
        if deadline is not None:
            grace = max(0.0, min(grace, deadline - now))
        self.db.update_job(job_id, state="checkpointing", stop_reason="preempt",
                           stop_after=now + grace, preemptions=row.preemptions + 1,
                           reason=reason)  # fmt: skip
        self.db.audit(now, actor, "preempt", job_id=job_id, tenant=row.tenant, reason=reason)
        self.maybe_finish_stop(job_id, now)

    def maybe_finish_stop(self, job_id: str, now: float) -> None:
        """A job being stopped whose tasks have all exited: requeue, fail or cancel it."""
        row = self.db.job(job_id)
        if row is None or row.stop_reason is None:
            return
        if any(t.attempt == row.attempt for t in self.db.tasks(job_id=job_id, live=True)):
            return
        ran = [t for t in self.db.tasks(job_id=job_id) if t.attempt == row.attempt]
        self.db.close_usage(job_id, last_exit(ran, now))
        if row.stop_reason == "preempt":
            self.db.update_job(job_id, state="queued", attempt=row.attempt + 1, placement=None,
                               stop_reason=None, stop_after=None, queued_at=now,
                               started_at=None)  # fmt: skip
            self.db.audit(now, "scheduler", "requeue", job_id=job_id, tenant=row.tenant,
                          reason=f"attempt {row.attempt + 1} queued after: {row.reason}")  # fmt: skip
            if self.scheduler is not None:
                self.scheduler.submit(job_of(job_id, row.tenant, row.spec))
            return
        state = "cancelled" if row.stop_reason == "cancel" else "failed"
        self.db.update_job(job_id, state=state, stop_reason=None, stop_after=None, ended_at=now)
        self.db.audit(now, "scheduler", "finish", job_id=job_id, tenant=row.tenant,
                      reason=f"{state}: {row.reason}")  # fmt: skip

    def checkpointed(self, row: JobRow, at: float, actor: str, now: float) -> None:
        """Record a checkpoint, its time kept within this attempt and now: a time from before the
        attempt started would make the job look dear to preempt (and shield it), one from the
        future would hide every real checkpoint after it."""
        at = agent_time(at, row.started_at if row.started_at is not None else now, now)
        if row.last_checkpoint_at is not None and at <= row.last_checkpoint_at:
            return
        self.db.update_job(row.job_id, last_checkpoint_at=at)
        if self.scheduler is not None and row.job_id in self.scheduler.placements:
            self.scheduler.note_checkpoint(row.job_id, at)
        self.db.audit(now, actor, "checkpoint", job_id=row.job_id, tenant=row.tenant,
                      reason=checkpoint_reason(row.attempt, at))  # fmt: skip

    def _tenant_of(self, job_id: str) -> str | None:
        row = self.db.job(job_id)
        return None if row is None else row.tenant


def node_spec(n: NodeRow) -> NodeSpec:
    """The scheduler's view of a registered node; a GPU whose agent did not say its memory gets
    its model's nominal framebuffer, as ``NodeSpec.uniform`` does (unknown models stay unknown)."""
    models = {mig.canonical_model(g["model"]) for g in n.gpus}
    if len(models) > 1:
        raise InputError(f"node {n.node}: GPUs of one model only, got {', '.join(sorted(models))}")
    model = next(iter(models), "")
    gpus = tuple(
        GpuSpec(g["index"], mode=SharingMode(g.get("mode") or "fractional"),
                memory_mib=g.get("memory_mib") or GPU_MEMORY_MIB.get(model))
        for g in sorted(n.gpus, key=lambda g: g["index"])
    )  # fmt: skip
    first = n.gpus[0] if n.gpus else {}
    # the cost class the agent registered is kept with each GPU's inventory (one per node)
    cost = next((g["cost_class"] for g in n.gpus if g.get("cost_class")), "owned")
    return NodeSpec(n.node, n.cpu_milli, n.memory_mib, model, gpus,
                    driver_version=first.get("driver_version"),
                    cuda_version=first.get("cuda_version"),
                    cuda_compat=first.get("cuda_compat"),
                    cost_class=CostClass(cost))  # fmt: skip


def agent_time(value: Any, lo: float, hi: float) -> float:
    """A time an agent reported (its clock, so trusted only within what the service saw:
    not before ``lo``, not after ``hi``, this sync); ``hi`` when it sent none. A job that
    starts and ends between two syncs is billed for the time it ran, not for nothing."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return hi
    return min(hi, max(lo, float(value)))


def last_exit(tasks: list[TaskRow], now: float) -> float:
    """When the last of an attempt's tasks ended (``now`` if one has no end on record)."""
    ends = [t.ended_at for t in tasks]
    return now if not ends or None in ends else max(e for e in ends if e is not None)


__all__ = ["JobLifecycle", "agent_time", "last_exit", "node_spec"]
