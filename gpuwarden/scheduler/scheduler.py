"""The scheduler: gangs placed all-or-nothing, quotas, health rules, a priority queue.

Every decision is made by one caller at a time on in-memory state (the service layer that comes
later serialises requests through one lock), and a gang is placed inside one decision: its tasks
are applied one by one and all undone if any does not fit. So no gang ever holds part of the
cluster while waiting for the rest, and two gangs can never deadlock on each other's GPUs.

Health: at-risk GPUs take only interruptible jobs, unhealthy GPUs take nothing. When a GPU's
health changes under running work that may no longer be there, ``set_health`` releases that
work, queues it again and returns ``Eviction`` records for the node agent to act on (checkpoint
hook, grace period), so the rule holds again as soon as it returns.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.scheduler.cluster import ClusterState, TaskAlloc
from gpuwarden.scheduler.jobs import Decision, Eviction, Job, Placement, TaskPlacement
from gpuwarden.scheduler.policies import PlacementPolicy, make_policy
from gpuwarden.scheduler.policies.mix import TaskMix
from gpuwarden.scheduler.quota import Quota, QuotaLedger
from gpuwarden.scheduler.resources import Health, NodeSpec, SharingMode


class Scheduler:
    """Places jobs on ``nodes`` with ``policy`` (a name from ``POLICIES`` or an object)."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        policy: str | PlacementPolicy = "warden",
        quotas: Iterable[Quota] = (),
        *,
        mix: TaskMix | None = None,
        seed: int = 0,
    ) -> None:
        self.cluster = ClusterState(nodes)
        self.policy = make_policy(policy, mix=mix, seed=seed) if isinstance(policy, str) else policy
        self.quotas = QuotaLedger(quotas)
        self._placed: dict[str, tuple[Placement, list[TaskAlloc]]] = {}
        self._on_gpu: dict[tuple[int, int], set[str]] = {}
        self._pending: dict[str, tuple[int, Job]] = {}
        self._seq = itertools.count()

    # ---- reading ---------------------------------------------------------------------------

    @property
    def placements(self) -> Mapping[str, Placement]:
        return {job_id: p for job_id, (p, _) in self._placed.items()}

    @property
    def pending(self) -> list[Job]:
        """Queued jobs in the order a round serves them: priority class, then arrival."""
        return [job for _, job in sorted(self._pending.values(), key=_queue_key)]

    def allocation_ratio(self) -> float:
        """GPUs allocated / all GPUs, shares in thousandths."""
        return self.cluster.allocation_ratio()

    # ---- placing ---------------------------------------------------------------------------

    def place(self, job: Job) -> Decision:
        """Try to place all of ``job`` now; nothing is held if any task does not fit."""
        if job.job_id in self._placed:
            raise InputError(f"job {job.job_id} is already placed")
        admission = self.quotas.admit(job)
        if not admission.ok:
            return Decision(job.job_id, reason=admission.reason)
        room = self.quotas.memory_room(job.tenant)
        cluster, charged = self.cluster, 0.0
        allocs: list[TaskAlloc] = []
        for _ in range(job.tasks):
            feasible = cluster.feasible(job, room - charged)
            if not feasible.any():
                reason = self._why_not(job, room - charged, placed_tasks=len(allocs))
                for alloc in reversed(allocs):
                    cluster.undo(alloc)
                return Decision(job.job_id, reason=reason)
            choice = self.policy.choose(cluster, job, feasible)
            alloc = cluster.apply(job, choice.node, choice.gpus, choice.mig_start)
            allocs.append(alloc)
            charged += math.fsum(m for m in alloc.gpu_memory_mib if not math.isnan(m))
        placement = Placement(
            job,
            tuple(self._task_placement(a) for a in allocs),
            borrowed=admission.borrowed,
            gpu_memory_mib=charged,
        )
        self.quotas.charge(job.job_id, job.tenant, job.total_gpu_milli, charged)
        self._placed[job.job_id] = (placement, allocs)
        for a in allocs:
            for g in a.gpus:
                self._on_gpu.setdefault((a.node, g), set()).add(job.job_id)
        self._pending.pop(job.job_id, None)
        return Decision(job.job_id, placement)

    def submit(self, job: Job) -> None:
        """Queue ``job`` for the next ``schedule`` round."""
        if job.job_id in self._placed or job.job_id in self._pending:
            raise InputError(f"job {job.job_id} is already known")
        self._pending[job.job_id] = (next(self._seq), job)

    def schedule(self) -> list[Decision]:
        """One placement round over the queue: inference, training, batch, dev, each first come
        first served. A job that does not fit waits; smaller ones behind it may still start."""
        decisions = []
        for job in self.pending:
            decision = self.place(job)
            decisions.append(decision)
        return decisions

    def release(self, job_id: str) -> Placement | None:
        """A job finished or was cancelled: free what it holds (or drop it from the queue)."""
        if self._pending.pop(job_id, None) is not None:
            return None
        entry = self._placed.pop(job_id, None)
        if entry is None:
            raise InputError(f"no job {job_id} is placed or queued")
        placement, allocs = entry
        for a in reversed(allocs):
            self.cluster.undo(a)
            for g in a.gpus:
                self._on_gpu[(a.node, g)].discard(job_id)
        self.quotas.release(job_id)
        return placement

    # ---- cluster changes -------------------------------------------------------------------

    def node_index(self, node: str) -> int:
        try:
            return self.cluster.index[node]
        except KeyError:
            raise InputError(f"no node {node!r} in the cluster") from None

    def _gpu(self, node: str, gpu: int) -> int:
        n = self.node_index(node)
        if not 0 <= gpu < self.cluster.n_gpus[n]:
            raise InputError(f"node {node} has no GPU {gpu}")
        return n

    def gpu_health(self, node: str, gpu: int) -> Health:
        """The scheduling health of one GPU."""
        n = self._gpu(node, gpu)
        return list(Health)[int(self.cluster.health[n, gpu])]

    def set_health(self, node: str, gpu: int, health: Health | str) -> list[Eviction]:
        """Mark one GPU ok / at-risk / unhealthy; evict (release and re-queue) the jobs that
        may no longer run on it."""
        try:
            health = Health(health)
        except ValueError:
            raise InputError(f"health must be ok, at-risk or unhealthy: {health!r}") from None
        n = self._gpu(node, gpu)
        self.cluster.set_health(n, gpu, health)
        evictions = []
        for job_id in sorted(self._on_gpu.get((n, gpu), ())):
            job = self._placed[job_id][0].job
            if health is Health.UNHEALTHY or (health is Health.AT_RISK and not job.interruptible):
                self.release(job_id)
                self._pending[job_id] = (-1, job)  # evicted work goes first in its class
                evictions.append(Eviction(job, node, gpu, f"GPU {gpu} of {node} is {health}"))
        return evictions

    def set_sharing_mode(self, node: str, gpu: int, mode: SharingMode | str) -> None:
        """Switch an idle GPU between whole, fractional and MIG."""
        try:
            mode = SharingMode(mode)
        except ValueError:
            raise InputError(f"sharing mode must be whole, fractional or mig: {mode!r}") from None
        self.cluster.set_mode(self._gpu(node, gpu), gpu, mode)

    # ---- helpers ---------------------------------------------------------------------------

    def _task_placement(self, a: TaskAlloc) -> TaskPlacement:
        milli = a.milli if a.mig is None else 0
        return TaskPlacement(self.cluster.names[a.node], a.gpus, milli, a.mig)

    def _why_not(self, job: Job, room: float, placed_tasks: int) -> str:
        """One line naming the first constraint that leaves no node for a task of ``job``."""
        c = self.cluster
        prefix = f"job {job.job_id}: "
        if placed_tasks:
            prefix += f"only {placed_tasks} of {job.tasks} tasks fit at once; "
        steps: list[tuple[str, np.ndarray]] = []
        if job.kind != "cpu":
            wanted = "|".join(sorted(job.gpu_models)) or "any"
            has_model = c.model_mask(job.gpu_models) & (c.n_gpus > 0)
            steps.append((f"no node has GPUs of model {wanted}", has_model))
        steps.append(("no node has the CPU free", c.cpu_free >= job.cpu_milli))
        steps.append(("no node has the memory free", c.mem_free >= job.memory_mib))
        if job.kind != "cpu":
            health = "ok or at-risk" if job.interruptible else "ok"
            steps.append(
                (
                    f"no node has {job.gpus_per_task} fitting {health} GPU(s) free",
                    c.gpu_candidates(job).sum(axis=1) >= job.gpus_per_task,
                )
            )
        if room != math.inf:
            steps.append(("the tenant's GPU-memory quota is used up", c.memory_charge(job) <= room))
        ok = np.ones(c.n_nodes, dtype=bool)
        for reason, mask in steps:
            ok &= mask
            if not ok.any():
                return prefix + reason
        return prefix + "no node has all it needs free at once"


def _queue_key(entry: tuple[int, Job]) -> tuple[int, int]:
    seq, job = entry
    return (job.priority.rank, seq)
