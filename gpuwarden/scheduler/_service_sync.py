"""Agent syncs: what a node's agent reports (task states, checkpoints, output) and the orders
it gets back (tasks to start, checkpoint hooks to deliver, tasks to stop).

Every method runs under the service's lock inside one open transaction, so each sync either
lands whole in the database or not at all. Tasks are keyed by (job_id, attempt, task): the
service orders a start once per sync until the agent reports the task, the agent never starts a
key twice, so a lost response or a restarted service never runs one task two times. A task the
agent reports that the service does not know (a written-off attempt, a lost database) is stopped.
A job placed on GPUs that an evicted job still holds gets its start orders only once the evicted
tasks have exited, so two jobs never run on one GPU beyond what the placement allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpuwarden.scheduler._service_jobs import argv_of, job_of, task_env
from gpuwarden.scheduler._service_lifecycle import JobLifecycle, agent_time, last_exit, node_spec
from gpuwarden.scheduler._service_logs import store_logs
from gpuwarden.scheduler._service_nodes import Nodes
from gpuwarden.scheduler._service_types import NotFoundError
from gpuwarden.scheduler.billing import billed_gpu_milli
from gpuwarden.scheduler.state import JobRow, TaskRow

Key = tuple[str, int, int]


class AgentSync:
    """Takes in agent syncs and answers each with its node's orders."""

    def __init__(self, lifecycle: JobLifecycle, nodes: Nodes) -> None:
        self.lifecycle, self.nodes, self.db = lifecycle, nodes, lifecycle.db

    def agent_sync(self, node: str, body: Mapping[str, Any], now: float) -> dict[str, Any]:
        """Take in what an agent reports (task states, checkpoints, log text); answer with what
        it must start, checkpoint and stop."""
        old = self.db.node(node)
        if old is None:
            raise NotFoundError(f"node {node!r} is not registered; the agent registers first")
        seq = self.db.bump_sync(node, now)
        if old.lost_at is not None:
            self.nodes.node_back(old, now)
        if self.nodes.sleep is not None:
            self.nodes.sleep.synced(node)
        if body.get("models") is not None:
            self.nodes.set_model_cache(node, list(body["models"]))
        reported: dict[Key, dict[str, Any]] = {}
        for t in body["tasks"]:
            reported[(t["job_id"], int(t["attempt"]), int(t["task"]))] = t
        strangers: list[Key] = []
        for key, t in reported.items():
            row = self._task(key)
            if row is None or row.node != node or row.state == "exited":
                if t["state"] == "running":
                    # not ours (a lost database?) or written off as never started: stop it
                    # rather than let it hold GPUs the scheduler thinks are free
                    strangers.append(key)
                continue
            self._take_report(row, t, node, now)
        # only output of a task this node was told to run: an agent speaks for its node alone
        ours = [c for c in body.get("logs", ())
                if (k := self._task((c["job_id"], int(c["attempt"]), int(c["task"])))) is not None
                and k.node == node]  # fmt: skip
        store_logs(self.db, node, ours)
        if body.get("gpus") is not None:
            self.nodes.usage.add(node, now, body["gpus"])
            self._bill_energy(node, body["gpus"], now)
        for row in self.db.tasks(node=node, live=True):
            key = (row.job_id, row.attempt, row.task)
            if row.state == "starting" and row.ordered_seq < seq and key not in reported:
                job = self.db.job(row.job_id)
                if not _current(job, row):  # ordered, never started, no longer wanted
                    self._save(row, state="exited", ended_at=now)
                    self.lifecycle.maybe_finish_stop(row.job_id, now)
        self.nodes.run_round(now, preempt=False)
        return self._orders(node, seq, now, reported, strangers)

    def _bill_energy(self, node: str, gpus: list[dict[str, Any]], now: float) -> None:
        """Measured energy of each GPU since the last sync, to the jobs running on it by their
        share (a 250-milli share takes a quarter of its GPU's energy, as it bills a quarter of
        its GPU-hours; what no job holds is the GPU's idle draw and nobody's bill). A task that
        ended between two syncs is not charged for that last stretch."""
        holders: dict[int, list[tuple[JobRow, float]]] = {}
        for row in self.db.tasks(node=node, live=True):
            job = self.db.job(row.job_id)
            if row.state != "running" or job is None or not _current(job, row):
                continue
            placed = job.placement or []
            milli = float(placed[row.task]["gpu_milli"]) if row.task < len(placed) else 0.0
            for g in row.gpus:
                holders.setdefault(int(g), []).append((job, min(milli, 1000.0)))
        for got in gpus:
            mj, span = got.get("energy_mj"), got.get("span_s")
            if mj is None or not span:
                continue  # not measured: the bill estimates this stretch from board power
            for job, milli in holders.get(int(got["index"]), ()):
                self.db.add_energy(
                    job.job_id, job.tenant, now, span, mj * milli / 1000, milli * span
                )

    def _take_report(self, row: TaskRow, t: dict, node: str, now: float) -> None:
        job = self.db.job(row.job_id)
        if job is None:
            return
        if row.state == "starting" and t["state"] in ("running", "exited"):
            began = agent_time(t.get("started_at"), job.queued_at, now)
            row = self._save(row, state="running", pid=t.get("pid"), started_at=began)
            if _current(job, row) and job.started_at is None:
                self.db.update_job(job.job_id, started_at=began)
                s = self.lifecycle.scheduler
                if s is not None and job.job_id in s.placements:
                    s.note_started(job.job_id, began)
                total = billed_gpu_milli(job_of(job.job_id, job.tenant, job.spec),
                                         self._gpu_memory(job.placement or []))  # fmt: skip
                self.db.open_usage(job.job_id, job.tenant, job.name, total, began)
                if job.attempt > 1:
                    self.db.audit(now, f"agent:{node}", "resume", job_id=job.job_id,
                                  tenant=job.tenant, node=node,
                                  reason=f"attempt {job.attempt} started")  # fmt: skip
        ck = t.get("checkpoint_at")
        if ck is not None:
            self.lifecycle.checkpointed(job, float(ck), f"agent:{node}", now)
        if t["state"] == "exited" and row.state != "exited":
            ended = agent_time(t.get("ended_at"), row.started_at or now, now)
            row = self._save(row, state="exited", exit_code=t.get("exit_code"), ended_at=ended)
            self._task_exited(row, now)

    def _task_exited(self, row: TaskRow, now: float) -> None:
        job = self.db.job(row.job_id)
        if job is None or row.attempt != job.attempt:
            return
        if job.state == "running" and job.stop_reason is None:
            if row.exit_code != 0:
                self.lifecycle.forget(job.job_id)
                code = "an unknown status" if row.exit_code is None else row.exit_code
                self.db.update_job(job.job_id, stop_reason="failed", stop_after=now,
                                   exit_code=row.exit_code,
                                   reason=f"task {row.task} on {row.node} exited with {code}")  # fmt: skip
            else:
                done = [t for t in self.db.tasks(job_id=job.job_id) if t.attempt == job.attempt]
                if len(done) == job.spec["tasks"] and all(t.exit_code == 0 for t in done):
                    self.lifecycle.forget(job.job_id)
                    self.db.close_usage(job.job_id, last_exit(done, now))
                    self.db.update_job(job.job_id, state="succeeded", exit_code=0, ended_at=now,
                                       reason="")  # fmt: skip
                    self.db.audit(now, "scheduler", "finish", job_id=job.job_id,
                                  tenant=job.tenant, reason="succeeded")  # fmt: skip
                return
        self.lifecycle.maybe_finish_stop(job.job_id, now)

    def _orders(
        self, node: str, seq: int, now: float, reported: dict, strangers: list[Key]
    ) -> dict[str, Any]:
        start: list[dict[str, Any]] = []
        hooks: list[dict[str, Any]] = []
        stop = [{"job_id": k[0], "attempt": k[1], "task": k[2]} for k in strangers]
        leaving: set[int] = set()  # GPUs still held by tasks on their way out
        for k in strangers:  # e.g. an attempt written off while its node was lost
            if (known := self._task(k)) is not None and known.node == node:
                leaving.update(known.gpus)
        for row in self.db.tasks(node=node, live=True):
            job = self.db.job(row.job_id)
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
                    self._save(row, hook_sent=True)
                continue
            stop.append(key)
        for job in self.db.jobs(states=("running",)):
            if job.stop_reason is not None:
                continue
            for i, t in enumerate(job.placement or ()):
                if t["node"] != node:
                    continue
                had = self._task((job.job_id, job.attempt, i))
                resend = had is not None and had.state == "starting" and had.ordered_seq < seq
                if had is not None and not (
                    resend and (job.job_id, job.attempt, i) not in reported
                ):
                    continue
                if leaving & set(t["gpus"]):
                    continue  # the evicted job is still checkpointing on these GPUs
                start.append({"job_id": job.job_id, "attempt": job.attempt, "task": i,
                              "command": argv_of(job.spec["command"]), "env": task_env(job, i),
                              "gpus": t["gpus"], "gpu_milli": t["gpu_milli"], "mig": t["mig"],
                              "mig_start": t.get("mig_start"), "sharing": t.get("sharing"),
                              "gpu_memory_mib": job.spec.get("gpu_memory_mib"),
                              "priority": job.spec.get("priority", "batch")})  # fmt: skip
                self.db.upsert_task(TaskRow(job.job_id, job.attempt, i, node, list(t["gpus"]),
                                            "starting", None, None, seq))  # fmt: skip
        orders: dict[str, Any] = {"start": start, "checkpoint": hooks, "stop": stop}
        if self.nodes.sleep is not None and self.nodes.sleep.order_for(node):
            orders["sleep"] = True
        return orders

    def _gpu_memory(self, placement: list[dict[str, Any]]) -> list[float | None]:
        """Framebuffer (MiB) of the first GPU of each placed task, as the scheduler counts it
        (``node_spec``); None where unknown."""
        specs = {n: node_spec(row) for n in {t["node"] for t in placement}
                 if (row := self.db.node(n)) is not None}  # fmt: skip
        out: list[float | None] = []
        for t in placement:
            gpus = specs[t["node"]].gpus if t["node"] in specs and t["gpus"] else ()
            mem = next((g.memory_mib for g in gpus if g.index == t["gpus"][0]), None)
            out.append(None if mem is None else float(mem))
        return out

    def _task(self, key: Key) -> TaskRow | None:
        rows = [r for r in self.db.tasks(job_id=key[0]) if (r.attempt, r.task) == key[1:]]
        return rows[0] if rows else None

    def _save(self, row: TaskRow, **changes: Any) -> TaskRow:
        new = replace(row, **changes)
        self.db.upsert_task(new)
        return new


def _current(job: JobRow | None, row: TaskRow) -> bool:
    """The task belongs to the attempt that should be running now."""
    return (
        job is not None
        and job.state == "running"
        and job.stop_reason is None
        and row.attempt == job.attempt
    )


__all__ = ["AgentSync"]
