"""The service's transitions: rebuilding the scheduler, placement rounds, evictions, agent syncs.

Every function here runs under the service's lock inside one open transaction, so each either
lands whole in the database or not at all. Tasks are keyed by (job_id, attempt, task): the
service orders a start once per sync until the agent reports the task, the agent never starts a
key twice, so a lost response or a restarted service never runs one task two times. Nodes
whose agent goes silent are written off in ``_service_nodes``, checked at every round.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuwarden.errors import InputError
from gpuwarden.scheduler import mig
from gpuwarden.scheduler._service_jobs import (
    argv_of,
    for_tenant,
    job_of,
    placement_json,
    preempted_reason,
    task_env,
    task_placements,
)
from gpuwarden.scheduler._service_logs import store_logs
from gpuwarden.scheduler.billing import billed_gpu_milli
from gpuwarden.scheduler.jobs import Decision
from gpuwarden.scheduler.resources import GPU_MEMORY_MIB, GpuSpec, NodeSpec, SharingMode
from gpuwarden.scheduler.scheduler import Scheduler
from gpuwarden.scheduler.state import JobRow, NodeRow, TaskRow

if TYPE_CHECKING:
    from gpuwarden.scheduler.service import SchedulerService

logger = logging.getLogger("gpuwarden.scheduler.service")

Key = tuple[str, int, int]


def rebuild(svc: SchedulerService, now: float) -> None:
    """Build the in-memory scheduler from the database: live nodes (lost ones take no work),
    quotas, running jobs adopted where they run, queued jobs resubmitted in queue order."""
    from gpuwarden.scheduler.service import quota_of

    nodes = [n for n in svc.db.nodes() if n.lost_at is None]
    if not nodes:
        svc.scheduler = None
        return
    quotas = []
    for r in svc.db.quotas():
        try:
            quotas.append(quota_of(r["tenant"], r["gpus"], r["gpu_memory_mib"],
                                   r["guaranteed_gpus"]))  # fmt: skip
        except InputError as exc:  # stored before values were bounded: serve on, unlimited
            logger.error("ignoring the stored quota of %s: %s", r["tenant"], exc)
    s = Scheduler([node_spec(n) for n in nodes], svc.policy, quotas)
    lost = []
    for row in svc.db.jobs(states=("running",)):
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
    queued = sorted(svc.db.jobs(states=("queued",)), key=lambda r: (r.queued_at, r.seq))
    for row in queued:
        s.submit(job_of(row.job_id, row.tenant, row.spec))
    svc.scheduler = s
    for job_id, reason in lost:
        evicted(svc, job_id, reason, now, "scheduler")
    for e in evictions:
        evicted(svc, e.job.job_id, e.reason, now, "scheduler")


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
    return NodeSpec(n.node, n.cpu_milli, n.memory_mib, model, gpus)


def run_round(svc: SchedulerService, now: float, *, preempt: bool) -> None:
    """Write off nodes whose agent went silent, then place what waits (and preempt for it)."""
    from gpuwarden.scheduler._service_nodes import check_nodes  # it builds on this module

    check_nodes(svc, now)
    if svc.scheduler is None:
        return
    for decision in svc.scheduler.schedule(now=now, preempt=preempt):
        apply_decision(svc, decision, now)


def apply_decision(svc: SchedulerService, d: Decision, now: float) -> None:
    if d.placement is None and not d.evictions:
        # most of a long queue on a full cluster: one UPDATE that touches the row only when
        # the reason changed, not a read and decode of every waiting job each round
        svc.db.set_reason(d.job_id, d.reason)
        return
    row = svc.db.job(d.job_id)
    for e in getattr(d, "evictions", ()):
        # the victim's tenant reads this reason: another tenant's job stays unnamed there and
        # is named in a row only the admin sees (no tenant)
        victim = e.job
        by_tenant = None if row is None else row.tenant
        evicted(svc, victim.job_id, preempted_reason(victim, d.job_id, by_tenant), now, "scheduler")
        if by_tenant not in (None, victim.tenant):
            svc.db.audit(now, "scheduler", "preempt-for", job_id=d.job_id, node=e.node,
                         reason=f"took the GPUs of job {victim.job_id} of tenant {victim.tenant}")  # fmt: skip
    if row is None:
        return
    if d.placement is None:
        if d.reason != row.reason:
            svc.db.update_job(d.job_id, reason=d.reason)
        return
    where = ", ".join(f"{t.node} GPU {','.join(map(str, t.gpus))}" for t in d.placement.tasks)
    svc.db.update_job(d.job_id, state="running", placement=placement_json(d.placement),
                      reason="", started_at=None)  # fmt: skip
    nodes = {t.node for t in d.placement.tasks}
    svc.db.audit(now, "scheduler", "place", job_id=d.job_id, tenant=row.tenant,
                 node=nodes.pop() if len(nodes) == 1 else None,
                 reason=f"attempt {row.attempt} on {where}")  # fmt: skip


def forget(svc: SchedulerService, job_id: str) -> None:
    """Take a job out of the scheduler (placed or queued); a job it does not hold is fine."""
    if svc.scheduler is not None:
        try:
            svc.scheduler.release(job_id)
        except InputError:
            pass


def evicted(svc: SchedulerService, job_id: str, reason: str, now: float, actor: str) -> None:
    """A running job must leave its GPUs: ask it to checkpoint, stop it after its grace period,
    then queue it again (``maybe_finish_stop``). The scheduler has already freed its GPUs."""
    row = svc.db.job(job_id)
    if row is None or row.state != "running" or row.stop_reason is not None:
        return
    shown = for_tenant(reason, row.tenant, lambda j: _tenant_of(svc, j))
    if shown != reason:  # the admin still learns which job it was, from the log
        logger.warning("job %s evicted: %s", job_id, reason)
    reason = shown
    forget(svc, job_id)  # it comes back with the next attempt, after its tasks have stopped
    grace = float(row.spec["grace_period_s"]) if row.spec.get("checkpoint") else 0.0
    svc.db.update_job(job_id, state="checkpointing", stop_reason="preempt", stop_after=now + grace,
                      preemptions=row.preemptions + 1, reason=reason)  # fmt: skip
    svc.db.audit(now, actor, "preempt", job_id=job_id, tenant=row.tenant, reason=reason)
    maybe_finish_stop(svc, job_id, now)


def maybe_finish_stop(svc: SchedulerService, job_id: str, now: float) -> None:
    """A job being stopped whose tasks have all exited: requeue, fail or cancel it."""
    row = svc.db.job(job_id)
    if row is None or row.stop_reason is None:
        return
    if any(t.attempt == row.attempt for t in svc.db.tasks(job_id=job_id, live=True)):
        return
    ran = [t for t in svc.db.tasks(job_id=job_id) if t.attempt == row.attempt]
    svc.db.close_usage(job_id, _last_exit(ran, now))
    if row.stop_reason == "preempt":
        svc.db.update_job(job_id, state="queued", attempt=row.attempt + 1, placement=None,
                          stop_reason=None, stop_after=None, queued_at=now, started_at=None)  # fmt: skip
        svc.db.audit(now, "scheduler", "requeue", job_id=job_id, tenant=row.tenant,
                     reason=f"attempt {row.attempt + 1} queued after: {row.reason}")  # fmt: skip
        if svc.scheduler is not None:
            svc.scheduler.submit(job_of(job_id, row.tenant, row.spec))
        return
    state = "cancelled" if row.stop_reason == "cancel" else "failed"
    svc.db.update_job(job_id, state=state, stop_reason=None, stop_after=None, ended_at=now)
    svc.db.audit(now, "scheduler", "finish", job_id=job_id, tenant=row.tenant,
                 reason=f"{state}: {row.reason}")  # fmt: skip


def checkpointed(svc: SchedulerService, row: JobRow, at: float, actor: str, now: float) -> None:
    """Record a checkpoint, its time kept within this attempt and now: a time from before the
    attempt started would make the job look dear to preempt (and shield it), one from the
    future would hide every real checkpoint after it."""
    at = _agent_time(at, row.started_at if row.started_at is not None else now, now)
    if row.last_checkpoint_at is not None and at <= row.last_checkpoint_at:
        return
    svc.db.update_job(row.job_id, last_checkpoint_at=at)
    if svc.scheduler is not None and row.job_id in svc.scheduler.placements:
        svc.scheduler.note_checkpoint(row.job_id, at)
    svc.db.audit(now, actor, "checkpoint", job_id=row.job_id, tenant=row.tenant,
                 reason=f"attempt {row.attempt} checkpointed at {at:.3f}")  # fmt: skip


def register(svc: SchedulerService, node: str, body: Mapping[str, Any], now: float) -> dict:
    old = svc.db.node(node)
    keep = {g["index"]: g for g in old.gpus} if old else {}
    gpus = []
    for g in body["gpus"]:
        prev = keep.get(g["index"], {})
        gpus.append({**g, "health": prev.get("health", "ok"),
                     "mode": g.get("mode") or prev.get("mode", "fractional")})  # fmt: skip
    row = NodeRow(
        node, body["cpu_milli"], body["memory_mib"], gpus, now, old.sync_seq if old else 0
    )
    spec = node_spec(row)  # checks the inventory before anything is stored
    changed = old is None or node_spec(old) != spec
    svc.db.upsert_node(row)
    if changed:
        rebuild(svc, now)
        run_round(svc, now, preempt=False)
    return {"node": node, "gpus": len(gpus), "rebuilt": changed}


def agent_sync(svc: SchedulerService, node: str, body: Mapping[str, Any], now: float) -> dict:
    """Take in what an agent reports (task states, checkpoints, log text); answer with what it
    must start, checkpoint and stop."""
    from gpuwarden.scheduler._service_nodes import node_back  # it builds on this module
    from gpuwarden.scheduler.service import NotFoundError

    old = svc.db.node(node)
    if old is None:
        raise NotFoundError(f"node {node!r} is not registered; the agent registers first")
    seq = svc.db.bump_sync(node, now)
    if old.lost_at is not None:
        node_back(svc, old, now)
    reported: dict[Key, dict[str, Any]] = {}
    for t in body["tasks"]:
        reported[(t["job_id"], int(t["attempt"]), int(t["task"]))] = t
    strangers: list[Key] = []
    for key, t in reported.items():
        row = _task(svc, key)
        if row is None or row.node != node or row.state == "exited":
            if t["state"] == "running":
                # not ours (a lost database?) or written off as never started: stop it rather
                # than let it hold GPUs the scheduler thinks are free
                strangers.append(key)
            continue
        _take_report(svc, row, t, node, now)
    # only output of a task this node was told to run: an agent speaks for its node alone
    ours = [c for c in body.get("logs", ())
            if (k := _task(svc, (c["job_id"], int(c["attempt"]), int(c["task"])))) is not None
            and k.node == node]  # fmt: skip
    store_logs(svc.db, node, ours)
    for row in svc.db.tasks(node=node, live=True):
        key = (row.job_id, row.attempt, row.task)
        if row.state == "starting" and row.ordered_seq < seq and key not in reported:
            job = svc.db.job(row.job_id)
            if not _current(job, row):  # ordered, never started, no longer wanted
                _save(svc, row, state="exited", ended_at=now)
                maybe_finish_stop(svc, row.job_id, now)
    run_round(svc, now, preempt=False)
    return _orders(svc, node, seq, now, reported, strangers)


def _agent_time(value: Any, lo: float, hi: float) -> float:
    """A time an agent reported (its clock, so trusted only within what the service saw:
    not before ``lo``, not after ``hi``, this sync); ``hi`` when it sent none. A job that
    starts and ends between two syncs is billed for the time it ran, not for nothing."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return hi
    return min(hi, max(lo, float(value)))


def _last_exit(tasks: list[TaskRow], now: float) -> float:
    """When the last of an attempt's tasks ended (``now`` if one has no end on record)."""
    ends = [t.ended_at for t in tasks]
    return now if not ends or None in ends else max(e for e in ends if e is not None)


def _take_report(svc: SchedulerService, row: TaskRow, t: dict, node: str, now: float) -> None:
    job = svc.db.job(row.job_id)
    if job is None:
        return
    if row.state == "starting" and t["state"] in ("running", "exited"):
        began = _agent_time(t.get("started_at"), job.queued_at, now)
        row = _save(svc, row, state="running", pid=t.get("pid"), started_at=began)
        if _current(job, row) and job.started_at is None:
            svc.db.update_job(job.job_id, started_at=began)
            if svc.scheduler is not None and job.job_id in svc.scheduler.placements:
                svc.scheduler.note_started(job.job_id, began)
            total = billed_gpu_milli(job_of(job.job_id, job.tenant, job.spec),
                                     _gpu_memory(svc, job.placement or []))  # fmt: skip
            svc.db.open_usage(job.job_id, job.tenant, job.name, total, began)
            if job.attempt > 1:
                svc.db.audit(now, f"agent:{node}", "resume", job_id=job.job_id, tenant=job.tenant,
                             node=node, reason=f"attempt {job.attempt} started")  # fmt: skip
    ck = t.get("checkpoint_at")
    if ck is not None:
        checkpointed(svc, job, float(ck), f"agent:{node}", now)
    if t["state"] == "exited" and row.state != "exited":
        ended = _agent_time(t.get("ended_at"), row.started_at or now, now)
        row = _save(svc, row, state="exited", exit_code=t.get("exit_code"), ended_at=ended)
        _task_exited(svc, row, now)


def _task_exited(svc: SchedulerService, row: TaskRow, now: float) -> None:
    job = svc.db.job(row.job_id)
    if job is None or row.attempt != job.attempt:
        return
    if job.state == "running" and job.stop_reason is None:
        if row.exit_code != 0:
            forget(svc, job.job_id)
            code = "an unknown status" if row.exit_code is None else row.exit_code
            svc.db.update_job(job.job_id, stop_reason="failed", stop_after=now,
                              exit_code=row.exit_code,
                              reason=f"task {row.task} on {row.node} exited with {code}")  # fmt: skip
        else:
            done = [t for t in svc.db.tasks(job_id=job.job_id) if t.attempt == job.attempt]
            if len(done) == job.spec["tasks"] and all(t.exit_code == 0 for t in done):
                forget(svc, job.job_id)
                svc.db.close_usage(job.job_id, _last_exit(done, now))
                svc.db.update_job(job.job_id, state="succeeded", exit_code=0, ended_at=now,
                                  reason="")  # fmt: skip
                svc.db.audit(now, "scheduler", "finish", job_id=job.job_id, tenant=job.tenant,
                             reason="succeeded")  # fmt: skip
            return
    maybe_finish_stop(svc, job.job_id, now)


def _orders(
    svc: SchedulerService, node: str, seq: int, now: float, reported: dict, strangers: list[Key]
) -> dict[str, list[dict[str, Any]]]:
    start: list[dict[str, Any]] = []
    hooks: list[dict[str, Any]] = []
    stop = [{"job_id": k[0], "attempt": k[1], "task": k[2]} for k in strangers]
    leaving: set[int] = set()  # GPUs still held by tasks on their way out
    for k in strangers:  # e.g. an attempt written off while its node was lost
        if (known := _task(svc, k)) is not None and known.node == node:
            leaving.update(known.gpus)
    for row in svc.db.tasks(node=node, live=True):
        job = svc.db.job(row.job_id)
        if _current(job, row):
            continue
        leaving.update(row.gpus)
        key = {"job_id": row.job_id, "attempt": row.attempt, "task": row.task}
        if job is None:
            stop.append(key)
            continue
        hook = job.spec.get("checkpoint")
        grace_left = (job.stop_after or now) - now
        if job.stop_reason == "preempt" and row.attempt == job.attempt and grace_left > 0:
            if hook and not row.hook_sent:
                hooks.append({**key, "hook": hook, "grace_period_s": grace_left})
                _save(svc, row, hook_sent=True)
            continue
        stop.append(key)
    for job in svc.db.jobs(states=("running",)):
        if job.stop_reason is not None:
            continue
        for i, t in enumerate(job.placement or ()):
            if t["node"] != node:
                continue
            had = _task(svc, (job.job_id, job.attempt, i))
            resend = had is not None and had.state == "starting" and had.ordered_seq < seq
            if had is not None and not (resend and (job.job_id, job.attempt, i) not in reported):
                continue
            if leaving & set(t["gpus"]):
                continue  # the evicted job is still checkpointing on these GPUs
            start.append({"job_id": job.job_id, "attempt": job.attempt, "task": i,
                          "command": argv_of(job.spec["command"]), "env": task_env(job, i),
                          "gpus": t["gpus"], "gpu_milli": t["gpu_milli"], "mig": t["mig"]})  # fmt: skip
            svc.db.upsert_task(TaskRow(job.job_id, job.attempt, i, node, list(t["gpus"]),
                                       "starting", None, None, seq))  # fmt: skip
    return {"start": start, "checkpoint": hooks, "stop": stop}


def _gpu_memory(svc: SchedulerService, placement: list[dict[str, Any]]) -> list[float | None]:
    """Framebuffer (MiB) of the first GPU of each placed task, as the scheduler counts it
    (``node_spec``); None where unknown."""
    specs = {n: node_spec(row) for n in {t["node"] for t in placement}
             if (row := svc.db.node(n)) is not None}  # fmt: skip
    out: list[float | None] = []
    for t in placement:
        gpus = specs[t["node"]].gpus if t["node"] in specs and t["gpus"] else ()
        mem = next((g.memory_mib for g in gpus if g.index == t["gpus"][0]), None)
        out.append(None if mem is None else float(mem))
    return out


def _current(job: JobRow | None, row: TaskRow) -> bool:
    """The task belongs to the attempt that should be running now."""
    return (
        job is not None
        and job.state == "running"
        and job.stop_reason is None
        and row.attempt == job.attempt
    )


def _tenant_of(svc: SchedulerService, job_id: str) -> str | None:
    row = svc.db.job(job_id)
    return None if row is None else row.tenant


def _task(svc: SchedulerService, key: Key) -> TaskRow | None:
    rows = [r for r in svc.db.tasks(job_id=key[0]) if (r.attempt, r.task) == key[1:]]
    return rows[0] if rows else None


def _save(svc: SchedulerService, row: TaskRow, **changes: Any) -> TaskRow:
    from dataclasses import replace

    new = replace(row, **changes)
    svc.db.upsert_task(new)
    return new
