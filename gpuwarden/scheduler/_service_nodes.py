"""The cluster side of the service: node inventories, GPU health, liveness, placement rounds.

A node whose agent has not synced for ``node_timeout_s`` seconds is lost. Agents sync every
second, so a minute of silence (the default timeout) means a crashed host, a killed agent or a
cut network. A lost node takes no placements: the in-memory scheduler is rebuilt without it,
through ``JobLifecycle.rebuild`` as after a restart. The current attempt of every job with a
task there is written off:

- an interruptible job with a checkpoint hook goes down the preemption path (``stop_reason``
  "preempt") with no grace period, since nobody is left to deliver the hook, and is queued
  again as the next attempt, which resumes from its last checkpoint (``GPUWARDEN_RESUME=1``);
- any other job fails, its reason naming the node ("node n1 lost: no agent sync for 61 s").

Either way its usage interval closes at the node's last sync, not when the loss was noticed: the
tenant is not billed for time nobody saw the job run. Its tasks on live nodes get the usual stop
orders. When the agent syncs again the node is back and takes placements; tasks it still reports
for written-off attempts are strangers to the service and are stopped (``_service_sync``).

The service's own downtime does not count: after a restart each agent gets a full timeout to sync
again (``started_at``), so restarting the service never writes off a healthy cluster. Every
method runs under the service's lock inside one open transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from gpuwarden.errors import InputError
from gpuwarden.scheduler._service_jobs import FINISHED
from gpuwarden.scheduler._service_lifecycle import JobLifecycle, node_spec
from gpuwarden.scheduler._service_sleep import ServiceSleep
from gpuwarden.scheduler._service_types import NotFoundError
from gpuwarden.scheduler._service_usage import UsageWindow
from gpuwarden.scheduler.resources import GPU_MILLI, Health
from gpuwarden.scheduler.state import NodeRow, ReclaimRow
from gpuwarden.wording import counted

logger = logging.getLogger("gpuwarden.scheduler.service")


class Nodes:
    """Registers nodes, marks GPU health, writes off silent nodes and runs placement rounds."""

    def __init__(
        self,
        lifecycle: JobLifecycle,
        *,
        node_timeout_s: float,
        started_at: float,
        clock: Callable[[], float],
    ) -> None:
        self.lifecycle = lifecycle
        self.db = lifecycle.db
        self.node_timeout_s = node_timeout_s
        self.started_at = started_at  # silence before this (the service was down) does not count
        self.clock = clock
        self.sleep: ServiceSleep | None = None  # idle-node sleep, when the service runs it
        self.usage = UsageWindow()  # measured GPU utilisation, from agent syncs

    def run_round(self, now: float, *, preempt: bool) -> None:
        """Write off nodes whose agent went silent, then place what waits (and preempt for it)."""
        self.check_nodes(now)
        s = self.lifecycle.scheduler
        if s is None:
            return
        for decision in s.schedule(now=now, preempt=preempt):
            self.lifecycle.apply_decision(decision, now)
        if self.sleep is not None:
            self.sleep.after_round(now)

    def register(self, node: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """An agent says what its node has; rebuilds the scheduler when the inventory changed."""
        now = self.clock()
        old = self.db.node(node)
        keep = {g["index"]: g for g in old.gpus} if old else {}
        gpus = []
        cost = body.get("cost_class") or "owned"
        for g in body["gpus"]:
            prev = keep.get(g["index"], {})
            gpus.append({**g, "health": prev.get("health", "ok"), "cost_class": cost,
                         "mac": body.get("mac"),
                         "mode": g.get("mode") or prev.get("mode", "fractional")})  # fmt: skip
        row = NodeRow(
            node, body["cpu_milli"], body["memory_mib"], gpus, now, old.sync_seq if old else 0
        )
        spec = node_spec(row)  # checks the inventory before anything is stored
        # a registration after a reclaim is the replacement instance: it takes work again
        changed = old is None or node_spec(old) != spec or node in self.lifecycle.closed
        if self.lifecycle.closed.pop(node, None) is not None:
            self.db.drop_reclaim(node)
        if body.get("models") is not None:
            self.lifecycle.model_cache[node] = list(body["models"])
        self.db.upsert_node(row)
        if changed:
            self.lifecycle.rebuild(now)
            self.run_round(now, preempt=False)
        return {"node": node, "gpus": len(gpus), "rebuilt": changed}

    def set_health(
        self, actor: str, node: str, gpu: int, health: str, reason: str
    ) -> dict[str, Any]:
        """Mark one GPU (``health`` checked by ``health_of``); work that may no longer run there
        is evicted through the same checkpoint path as a preemption."""
        row = self.db.node(node)
        if row is None:
            raise NotFoundError(f"no node {node!r} is registered")
        if not any(g["index"] == gpu for g in row.gpus):
            raise NotFoundError(f"node {node} has no GPU {gpu}")
        now = self.clock()
        evictions = []
        # a lost node holds no work; the rebuild when it is back applies the stored health
        if row.lost_at is None and self.lifecycle.scheduler is not None:
            evictions = self.lifecycle.scheduler.set_health(node, gpu, health)
        gpus = [{**g, "health": health} if g["index"] == gpu else g for g in row.gpus]
        self.db.upsert_node(NodeRow(node, row.cpu_milli, row.memory_mib, gpus,
                                    row.agent_seen_at, row.sync_seq))  # fmt: skip
        self.db.audit(now, actor, "health", node=node, gpu=gpu, reason=f"{health}: {reason}")
        evicted = [e.job.job_id for e in evictions]
        for e in evictions:
            self.lifecycle.evicted(e.job.job_id, e.reason, now, actor)
        self.run_round(now, preempt=False)
        return {"node": node, "gpu": gpu, "health": health, "evicted": evicted}

    def reclaim(self, actor: str, node: str, deadline: float, reason: str) -> dict[str, Any]:
        """The provider takes ``node`` back at ``deadline`` (a spot reclaim): it takes no new
        work, and every job there is checkpointed within the deadline and queued again
        (``spot.py``), through the same path as a preemption."""
        if self.db.node(node) is None:
            raise NotFoundError(f"no node {node!r} is registered")
        now = self.clock()
        reason = f"node {node} reclaimed ({reason}), {max(0.0, deadline - now):.0f} s notice"
        self.lifecycle.closed[node] = deadline
        self.db.put_reclaim(ReclaimRow(node, deadline, reason, now))
        evictions = []
        s = self.lifecycle.scheduler
        if s is not None and node in s.cluster.index:
            evictions = s.reclaim(node, reason)
        self.db.audit(now, actor, "reclaim", node=node, reason=reason)
        logger.warning("%s; %s to checkpoint and requeue", reason, counted(len(evictions), "job"))
        for e in evictions:
            self.lifecycle.evicted(e.job.job_id, e.reason, now, actor, deadline=deadline)
        self.run_round(now, preempt=False)
        return {"node": node, "deadline": deadline, "evicted": [e.job.job_id for e in evictions]}

    def set_model_cache(self, node: str, models: list[str]) -> None:
        """What ``node``'s local cache holds now (its agent's sync)."""
        if self.lifecycle.model_cache.get(node) == models:
            return
        self.lifecycle.model_cache[node] = models
        s = self.lifecycle.scheduler
        if s is not None and node in s.cluster.index:
            s.set_model_cache(node, models)

    def check_nodes(self, now: float) -> list[str]:
        """Find the nodes whose agent went silent, write off their work and rebuild the scheduler
        without them; returns their names (none most of the time, at the cost of one query)."""
        quiet_since = now - self.node_timeout_s
        if (
            self.started_at >= quiet_since
        ):  # up for less than a timeout: every agent gets its chance
            return []
        silent = self.db.silent_nodes(quiet_since)
        if self.sleep is not None:  # a sleeping node's agent is silent by design
            silent = [(n, seen) for n, seen in silent if not self.sleep.resting(n, now)]
        for node, seen in silent:
            self._lose(node, self.started_at if seen is None else seen, now)
        if silent:
            self.lifecycle.rebuild(now)
        return [node for node, _ in silent]

    def node_back(self, old: NodeRow, now: float) -> None:
        """A lost node's agent synced again: it takes placements from this sync on."""
        self.db.set_node_lost(old.node, None)
        lost_s = now - (old.lost_at or now)
        self.db.audit(now, "scheduler", "node-back", node=old.node,
                      reason=f"agent synced again {lost_s:.0f} s after the node was lost")  # fmt: skip
        logger.warning("node %s is back, %.0f s after it was lost", old.node, lost_s)
        self.lifecycle.rebuild(now)

    def nodes_json(self, now: float) -> list[dict[str, Any]]:
        """``GET /v1/nodes``: each node's state (ok / lost), seconds since its agent's last sync,
        its cost class, its idle-sleep state (off when the service runs no sleep policy), the
        deadline of a spot reclaim that closed it (None: none), and its GPUs (``used_milli``
        None where the scheduler does not hold the node: lost)."""
        out = []
        s = self.lifecycle.scheduler
        for n in self.db.nodes():
            idx = s.cluster.index.get(n.node) if s is not None else None
            means = self.usage.gpu_means(n.node, now)
            gpus = []
            for g in n.gpus:
                used = None if idx is None else GPU_MILLI - int(s.cluster.free[idx, g["index"]])  # type: ignore[union-attr]
                gpus.append({"index": g["index"], "uuid": g.get("uuid", ""), "model": g["model"],
                             "memory_mib": g.get("memory_mib"), "health": g.get("health", "ok"),
                             "mode": g.get("mode", "fractional"), "used_milli": used,
                             "util_pct": means.get(g["index"])})  # fmt: skip
            measured = bool(gpus) and all(g["util_pct"] is not None for g in gpus)
            seen = n.agent_seen_at
            out.append({"node": n.node, "state": "ok" if n.lost_at is None else "lost",
                        "since_sync_s": None if seen is None else round(max(0.0, now - seen), 1),
                        "lost_at": n.lost_at, "cpu_milli": n.cpu_milli,
                        "memory_mib": n.memory_mib, "agent_seen_at": seen,
                        "utilisation_from": "measured" if measured else "allocation",
                        "cost_class": next((g.get("cost_class") for g in n.gpus), "owned"),
                        "sleep": "off" if self.sleep is None else self.sleep.state_of(n.node),
                        "reclaim_deadline": self.lifecycle.closed.get(n.node),
                        "gpus": gpus})  # fmt: skip
        return out

    def _lose(self, node: str, seen: float, now: float) -> None:
        silent_s = now - seen
        reason = f"node {node} lost: no agent sync for {silent_s:.0f} s"
        self.db.set_node_lost(node, now)
        hit = self._write_off_tasks(node, seen)
        for row in self.db.jobs(states=("running",)):
            if row.stop_reason is None and any(t["node"] == node for t in row.placement or ()):
                hit.add(row.job_id)  # placed there, but the agent never got or answered the order
        self.db.audit(now, "scheduler", "node-lost", node=node,
                      reason=f"no agent sync for {silent_s:.0f} s (timeout "
                             f"{self.node_timeout_s:g} s); {counted(len(hit), 'job')} written off")  # fmt: skip
        logger.warning("%s; %s written off", reason, counted(len(hit), "job"))
        for job_id in sorted(hit):
            self._write_off(job_id, node, reason, seen, now)

    def _write_off_tasks(self, node: str, seen: float) -> set[str]:
        """Count every live task on ``node`` as exited at its last sync (exit status unknown);
        returns the jobs whose current attempt had one."""
        hit = set()
        for t in self.db.tasks(node=node, live=True):
            self.db.upsert_task(
                replace(t, state="exited", ended_at=max(seen, t.started_at or seen))
            )
            job = self.db.job(t.job_id)
            if job is not None and job.attempt == t.attempt and job.state not in FINISHED:
                hit.add(job.job_id)
        return hit

    def _write_off(self, job_id: str, node: str, reason: str, seen: float, now: float) -> None:
        row = self.db.job(job_id)
        if row is None:
            return
        if row.state == "running" and row.stop_reason is None:
            self.lifecycle.forget(job_id)
            if row.spec["interruptible"] and row.spec.get("checkpoint"):
                # the preemption path, without the grace period: requeued once its other tasks stop
                self.db.update_job(job_id, state="checkpointing", stop_reason="preempt",
                                   stop_after=now, reason=reason)  # fmt: skip
                outcome = f"attempt {row.attempt} requeued"
            else:
                self.db.update_job(job_id, stop_reason="failed", stop_after=now, reason=reason)
                outcome = f"attempt {row.attempt} failed"
        else:
            outcome = f"attempt {row.attempt} was already stopping ({row.stop_reason})"
        self.db.close_usage(job_id, seen)
        self.db.audit(now, "scheduler", "node-lost", job_id=job_id, tenant=row.tenant, node=node,
                      reason=f"{reason}; {outcome}")  # fmt: skip
        self.lifecycle.maybe_finish_stop(job_id, now)


def health_of(text: str) -> str:
    """``text`` as a GPU health (ok, at-risk or unhealthy); checked before the lock is taken."""
    try:
        return str(Health(text))
    except ValueError:
        raise InputError(f"health must be ok, at-risk or unhealthy, got {text!r}") from None


__all__ = ["Nodes", "health_of"]
