"""The requests tenants and the admin make about jobs: submit, list, read, logs, cancel,
report a checkpoint.

A tenant sees only its own jobs: another tenant's job is "not found" (404), not "forbidden",
so job ids do not leak which jobs exist. The methods that change state run under the service's
lock inside one open transaction, and end with a placement round (``Nodes.run_round``) so the
answer shows where the job went. A tenant may have at most ``max_queued_tasks`` tasks queued
(all its queued jobs together); a submission past that is refused (``QueueFullError``, 429).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwarden.scheduler._service_jobs import (
    FINISHED,
    check_text,
    job_json,
    job_of,
    normalise_spec,
)
from gpuwarden.scheduler._service_lifecycle import JobLifecycle
from gpuwarden.scheduler._service_nodes import Nodes
from gpuwarden.scheduler._service_types import (
    ConflictError,
    NotFoundError,
    Principal,
    QueueFullError,
    tenant_for,
)
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.state import JobRow


@dataclass(frozen=True)
class Submission:
    """A submission checked before the lock is taken: every field, and the ``Job`` it makes."""

    tenant: str
    key: str | None
    spec: dict[str, Any]
    job: Job


class JobRequests:
    """Jobs as tenants and the admin see and change them."""

    def __init__(
        self,
        lifecycle: JobLifecycle,
        nodes: Nodes,
        clock: Callable[[], float],
        *,
        max_queued_tasks: int | None = None,
    ) -> None:
        self.lifecycle = lifecycle
        self.nodes = nodes
        self.db = lifecycle.db
        self.clock = clock
        self.max_queued_tasks = max_queued_tasks

    def check(self, who: Principal, body: Mapping[str, Any]) -> Submission:
        """Check a submission whole; nothing is stored, no lock is needed."""
        tenant = tenant_for(who, body.get("tenant"))
        key = body.get("idempotency_key")
        if key is not None:
            check_text("idempotency_key", key, max_chars=200)
        spec = normalise_spec(body)
        job_id = "j-" + uuid.uuid4().hex[:12]
        job = job_of(job_id, tenant, spec)
        if job.checkpoint is not None:
            job.checkpoint.check_new()
        return Submission(tenant, key, spec, job)

    def submit(self, who: Principal, sub: Submission) -> tuple[dict[str, Any], bool]:
        """Queue a checked job; returns (job JSON, created). The same ``idempotency_key`` from
        the same tenant returns the first job and creates nothing."""
        tenant, key, spec, job = sub.tenant, sub.key, sub.spec, sub.job
        if key is not None and (old := self.db.job_by_key(tenant, key)) is not None:
            return job_json(old), False
        self._check_queue_room(tenant, job.tasks)
        now = self.clock()
        row = JobRow(
            job.job_id, self.db.next_seq(), tenant, spec["name"], spec, "queued", 1, key, now, now
        )
        self.db.insert_job(row)
        self.db.audit(now, who.actor, "submit", job_id=job.job_id, tenant=tenant,
                      reason=f"{spec['priority']} {job.total_gpu_milli} GPU milli")  # fmt: skip
        if self.lifecycle.scheduler is not None:
            self.lifecycle.scheduler.submit(job)
            self.nodes.run_round(now, preempt=False)
        return job_json(self._row(job.job_id)), True

    def _check_queue_room(self, tenant: str, tasks: int) -> None:
        """Refuse a job that would take ``tenant`` past its queued-task limit."""
        limit = self.max_queued_tasks
        if limit is None:
            return
        queued = self.db.queued_tasks(tenant)
        if queued + tasks > limit:
            raise QueueFullError(
                f"tenant {tenant} has {queued} tasks queued and may have at most {limit}; "
                f"this job's {tasks} would pass that: wait for queued jobs to start, or cancel "
                "some"
            )

    def jobs(self, who: Principal, states: Sequence[str] = ()) -> list[dict[str, Any]]:
        tenant = None if who.kind == "admin" else who.name
        return [job_json(r) for r in self.db.jobs(tenant=tenant, states=states)]

    def job(self, who: Principal, job_id: str) -> dict[str, Any]:
        return job_json(self._visible(who, job_id))

    def logs(self, who: Principal, job_id: str, *, attempt: int | None, task: int | None) -> str:
        self._visible(who, job_id)
        return self.db.log_text(job_id, attempt=attempt, task=task)

    def cancel(self, who: Principal, job_id: str) -> dict[str, Any]:
        """Cancel a job: a queued one at once, a running one once its agent stopped it."""
        row = self._visible(who, job_id)
        if row.state in FINISHED:
            raise ConflictError(f"job {job_id} has already {row.state}; nothing to cancel")
        if row.stop_reason == "cancel":
            return job_json(row)
        now = self.clock()
        self.db.audit(now, who.actor, "cancel", job_id=job_id, tenant=row.tenant,
                      reason=f"cancelled while {row.state}")  # fmt: skip
        if row.state == "queued":
            self.lifecycle.forget(job_id)
            self.db.update_job(job_id, state="cancelled", ended_at=now, reason="cancelled")
        else:
            if row.state == "running" and row.stop_reason is None:
                self.lifecycle.forget(job_id)
            self.db.update_job(job_id, stop_reason="cancel", stop_after=now, reason="cancelled")
            self.lifecycle.maybe_finish_stop(job_id, now)
        self.nodes.run_round(now, preempt=False)
        return job_json(self._row(job_id))

    def report_checkpoint(self, who: Principal, job_id: str, at: float | None) -> dict[str, Any]:
        """The job says it wrote a checkpoint (``POST /v1/jobs/{id}/checkpoint``)."""
        row = self._visible(who, job_id)
        if row.state not in ("running", "checkpointing"):
            raise ConflictError(f"job {job_id} is {row.state}, not running")
        now = self.clock()
        self.lifecycle.checkpointed(row, now if at is None else at, who.actor, now)
        return job_json(self._row(job_id))

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


__all__ = ["JobRequests", "Submission"]
