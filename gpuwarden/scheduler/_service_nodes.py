"""Node liveness: a node whose agent has not synced for ``node_timeout_s`` seconds is lost.

Agents sync every second, so a minute of silence (the default timeout) means a crashed host, a
killed agent or a cut network. A lost node takes no placements: the in-memory scheduler is
rebuilt without it, through ``rebuild`` as after a restart. The current attempt of every job
with a task there is written off:

- an interruptible job with a checkpoint hook goes down the preemption path (``stop_reason``
  "preempt") with no grace period, since nobody is left to deliver the hook, and is queued
  again as the next attempt, which resumes from its last checkpoint (``GPUWARDEN_RESUME=1``);
- any other job fails, its reason naming the node ("node n1 lost: no agent sync for 61 s").

Either way its usage interval closes at the node's last sync, not when the loss was noticed: the
tenant is not billed for time nobody saw the job run. Its tasks on live nodes get the usual stop
orders. When the agent syncs again the node is back and takes placements; tasks it still reports
for written-off attempts are strangers to the service and are stopped (``agent_sync``).

The service's own downtime does not count: after a restart each agent gets a full timeout to sync
again (``svc.started_at``), so restarting the service never writes off a healthy cluster.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpuwarden.scheduler._service_jobs import FINISHED
from gpuwarden.scheduler._service_sync import forget, maybe_finish_stop, rebuild
from gpuwarden.scheduler.resources import GPU_MILLI
from gpuwarden.scheduler.state import NodeRow

if TYPE_CHECKING:
    from gpuwarden.scheduler.service import SchedulerService

logger = logging.getLogger("gpuwarden.scheduler.service")


def check_nodes(svc: SchedulerService, now: float) -> list[str]:
    """Find the nodes whose agent went silent, write off their work and rebuild the scheduler
    without them; returns their names (none most of the time, at the cost of one query)."""
    quiet_since = now - svc.node_timeout_s
    if svc.started_at >= quiet_since:  # up for less than a timeout: every agent gets its chance
        return []
    silent = svc.db.silent_nodes(quiet_since)
    for node, seen in silent:
        _lose(svc, node, svc.started_at if seen is None else seen, now)
    if silent:
        rebuild(svc, now)
    return [node for node, _ in silent]


def node_back(svc: SchedulerService, old: NodeRow, now: float) -> None:
    """A lost node's agent synced again: it takes placements from this sync on."""
    svc.db.set_node_lost(old.node, None)
    lost_s = now - (old.lost_at or now)
    svc.db.audit(now, "scheduler", "node-back", node=old.node,
                 reason=f"agent synced again {lost_s:.0f} s after the node was lost")  # fmt: skip
    logger.warning("node %s is back, %.0f s after it was lost", old.node, lost_s)
    rebuild(svc, now)


def _lose(svc: SchedulerService, node: str, seen: float, now: float) -> None:
    silent_s = now - seen
    reason = f"node {node} lost: no agent sync for {silent_s:.0f} s"
    svc.db.set_node_lost(node, now)
    hit = _write_off_tasks(svc, node, seen)
    for row in svc.db.jobs(states=("running",)):
        if row.stop_reason is None and any(t["node"] == node for t in row.placement or ()):
            hit.add(row.job_id)  # placed there, but the agent never got or answered the order
    svc.db.audit(now, "scheduler", "node-lost", node=node,
                 reason=f"no agent sync for {silent_s:.0f} s (timeout {svc.node_timeout_s:g} s); "
                        f"{len(hit)} job(s) written off")  # fmt: skip
    logger.warning("%s; %d job(s) written off", reason, len(hit))
    for job_id in sorted(hit):
        _write_off(svc, job_id, node, reason, seen, now)


def _write_off_tasks(svc: SchedulerService, node: str, seen: float) -> set[str]:
    """Count every live task on ``node`` as exited at its last sync (exit status unknown);
    returns the jobs whose current attempt had one."""
    hit = set()
    for t in svc.db.tasks(node=node, live=True):
        svc.db.upsert_task(replace(t, state="exited", ended_at=max(seen, t.started_at or seen)))
        job = svc.db.job(t.job_id)
        if job is not None and job.attempt == t.attempt and job.state not in FINISHED:
            hit.add(job.job_id)
    return hit


def _write_off(
    svc: SchedulerService, job_id: str, node: str, reason: str, seen: float, now: float
) -> None:
    row = svc.db.job(job_id)
    if row is None:
        return
    if row.state == "running" and row.stop_reason is None:
        forget(svc, job_id)
        if row.spec["interruptible"] and row.spec.get("checkpoint"):
            # the preemption path, without the grace period: requeued once its other tasks stop
            svc.db.update_job(job_id, state="checkpointing", stop_reason="preempt",
                              stop_after=now, reason=reason)  # fmt: skip
            outcome = f"attempt {row.attempt} requeued"
        else:
            svc.db.update_job(job_id, stop_reason="failed", stop_after=now, reason=reason)
            outcome = f"attempt {row.attempt} failed"
    else:
        outcome = f"attempt {row.attempt} was already stopping ({row.stop_reason})"
    svc.db.close_usage(job_id, seen)
    svc.db.audit(now, "scheduler", "node-lost", job_id=job_id, tenant=row.tenant, node=node,
                 reason=f"{reason}; {outcome}")  # fmt: skip
    maybe_finish_stop(svc, job_id, now)


def nodes_json(svc: SchedulerService, now: float) -> list[dict[str, Any]]:
    """``GET /v1/nodes``: each node's state (ok / lost), seconds since its agent's last sync,
    and its GPUs (``used_milli`` None where the scheduler does not hold the node: lost)."""
    out = []
    s = svc.scheduler
    for n in svc.db.nodes():
        idx = s.cluster.index.get(n.node) if s is not None else None
        gpus = []
        for g in n.gpus:
            used = None if idx is None else GPU_MILLI - int(s.cluster.free[idx, g["index"]])  # type: ignore[union-attr]
            gpus.append({"index": g["index"], "uuid": g.get("uuid", ""), "model": g["model"],
                         "memory_mib": g.get("memory_mib"), "health": g.get("health", "ok"),
                         "mode": g.get("mode", "fractional"), "used_milli": used})  # fmt: skip
        seen = n.agent_seen_at
        out.append({"node": n.node, "state": "ok" if n.lost_at is None else "lost",
                    "since_sync_s": None if seen is None else round(max(0.0, now - seen), 1),
                    "lost_at": n.lost_at, "cpu_milli": n.cpu_milli, "memory_mib": n.memory_mib,
                    "agent_seen_at": seen, "gpus": gpus})  # fmt: skip
    return out


__all__ = ["check_nodes", "node_back", "nodes_json"]
