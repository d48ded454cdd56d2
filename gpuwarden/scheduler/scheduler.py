"""The scheduler: gangs placed all-or-nothing, quotas, health rules, a priority queue.

Every decision is made by one caller at a time on in-memory state (the service layer that comes
later serialises requests through one lock), and a gang is placed inside one decision: its tasks
are applied one by one and all undone if any does not fit. So no gang ever holds part of the
cluster while waiting for the rest, and two gangs can never deadlock on each other's GPUs.

Health: at-risk GPUs take only interruptible jobs, unhealthy GPUs take nothing. When a GPU's
health changes under running work that may no longer be there, ``set_health`` releases that
work, queues it again and returns ``Eviction`` records for the node agent to act on (checkpoint
hook, grace period), so the rule holds again as soon as it returns.

Rounds: ``schedule`` serves the queue (``queue.py``): classes in order, tenants in turn within a
class, and a job refused once is passed over until its inputs change. A round spends at most
``round_budget`` task tries (the jobs left wait for the next round), and a gang that cannot fit
is refused from per-node counts (``ClusterState.fit_counts``) without placing any of its tasks,
so no tenant's queue makes a round long for everyone.

Preemption: ``place(job, preempt=True)`` lets an inference job that does not fit push out
interruptible training, batch and dev work, the cheapest set in lost work (``preempt.py``); the
victims are released and queued again at the front of their class, like evicted work. After a
restart, ``adopt`` puts running jobs back exactly where a database says they run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.scheduler import preempt as _preempt
from gpuwarden.scheduler import spot as _spot
from gpuwarden.scheduler._why import why_not, why_too_few
from gpuwarden.scheduler.cluster import ClusterState, TaskAlloc
from gpuwarden.scheduler.jobs import (
    Decision,
    Eviction,
    Job,
    Placement,
    PriorityClass,
    Runtime,
    TaskPlacement,
)
from gpuwarden.scheduler.mig import MigInstance
from gpuwarden.scheduler.policies import PlacementPolicy, make_policy
from gpuwarden.scheduler.policies.mix import TaskMix
from gpuwarden.scheduler.queue import Inputs, JobQueue
from gpuwarden.scheduler.quota import Admission, Quota, QuotaLedger
from gpuwarden.scheduler.resources import GPU_MILLI, Health, NodeSpec, SharingMode
from gpuwarden.wording import plural

_Allocated = tuple[list[TaskAlloc], float, Admission]  # task allocations, GPU memory charged

#: Task tries one ``schedule`` round may spend (a try: one task's feasibility over every node
#: and the policy's choice, or one refusal from the per-node counts). A round starts no job
#: whose tasks would pass it, except its first try, so a gang of any size can be tried.
ROUND_BUDGET = 4096


class Scheduler:
    """Places jobs on ``nodes`` with ``policy`` (a name from ``POLICIES`` or an object).
    ``clock`` (unix seconds) times placements when a call gives no ``now``; ``round_budget``
    bounds the task tries of one ``schedule`` round; with ``spot_first`` interruptible work
    goes to spot nodes when they can take all of it (``spot.py``)."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        policy: str | PlacementPolicy = "warden",
        quotas: Iterable[Quota] = (),
        *,
        mix: TaskMix | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.time,
        round_budget: int = ROUND_BUDGET,
        spot_first: bool = True,
    ) -> None:
        if round_budget < 1:
            raise InputError(f"round_budget must be >= 1 task try, got {round_budget}")
        self.cluster = ClusterState(nodes)
        self.policy = make_policy(policy, mix=mix, seed=seed) if isinstance(policy, str) else policy
        self.quotas = QuotaLedger(quotas)
        self._placed: dict[str, tuple[Placement, list[TaskAlloc]]] = {}
        self._on_gpu: dict[tuple[int, int], set[str]] = {}
        self._queue = JobQueue()
        self._runtime: dict[str, Runtime] = {}
        self._clock = clock
        self.round_budget = round_budget
        #: task tries made so far (``ROUND_BUDGET`` says what one is); budgets and tests read it
        self.task_tries = 0
        self._freed = 0  # bumped when room may have been made: a refusal no longer holds
        self._moved = 0  # bumped on every placement change (preemption looks at placements)
        self.spot_first = spot_first
        self._cached: dict[str, np.ndarray] = {}  # model weights -> nodes whose cache holds them

    # ---- reading ---------------------------------------------------------------------------

    @property
    def placements(self) -> Mapping[str, Placement]:
        return {job_id: p for job_id, (p, _) in self._placed.items()}

    @property
    def pending(self) -> list[Job]:
        """Queued jobs in the order a round serves them: priority class, evicted work first,
        then tenants in turn, each tenant's jobs by arrival (``queue.py``)."""
        return self._queue.jobs()

    def allocation_ratio(self) -> float:
        """GPUs allocated / all GPUs, shares in thousandths."""
        return self.cluster.allocation_ratio()

    def runtime(self, job_id: str) -> Runtime:
        """When placed job ``job_id`` started and last checkpointed."""
        try:
            return self._runtime[job_id]
        except KeyError:
            raise InputError(f"job {job_id} is not placed") from None

    def running_on(self, node: str, gpu: int) -> list[str]:
        """Ids of the placed jobs holding (a share of) GPU ``gpu`` of ``node``."""
        return sorted(self._on_gpu.get((self._gpu(node, gpu), gpu), ()))

    # ---- placing ---------------------------------------------------------------------------

    def place(self, job: Job, *, now: float | None = None, preempt: bool = False) -> Decision:
        """Try to place all of ``job`` now; nothing is held if any task does not fit.

        With ``preempt``, an inference job that does not fit may evict interruptible training,
        batch and dev jobs, the set that loses the least work; if no set makes room, nothing
        changes. ``now`` (unix seconds, default the clock) is the start time recorded.
        """
        if job.job_id in self._placed:
            raise InputError(f"job {job.job_id} is already placed")
        now = self._clock() if now is None else now
        got = self._allocate(job)
        if isinstance(got, str):
            if preempt and job.priority is PriorityClass.INFERENCE:
                return self._place_preempting(job, now, got)
            return Decision(job.job_id, reason=got)
        return Decision(job.job_id, self._commit(job, *got, started_at=now))

    def submit(self, job: Job) -> None:
        """Queue ``job`` for the next ``schedule`` round."""
        if job.job_id in self._placed or job.job_id in self._queue:
            raise InputError(f"job {job.job_id} is already known")
        self._queue.add(job)

    def schedule(self, *, now: float | None = None, preempt: bool = False) -> list[Decision]:
        """One placement round over the queue: inference, training, batch, dev; within a class
        evicted work first, then tenants in turn (``queue.py``). A job that does not fit waits;
        smaller ones behind it may still start. With ``preempt``, inference jobs may preempt
        (see ``place``); the jobs they push out wait for the next round.

        Returns a decision for each job the round tried or refused. Placement is deterministic,
        so a job refused before is passed over, without a decision, until room may have been
        made (or, for inference that may preempt, until placements changed), and a job of a
        shape refused under the same inputs is refused with that reason without a try. The
        round spends at most ``round_budget`` task tries: a tenant whose next job would pass
        what is left waits for the next round with its turn kept, and the round ends when the
        budget is spent. A long queue of one tenant, or jobs that are costly to try, cost each
        round no more than that.
        """
        now = self._clock() if now is None else now
        self._queue.forget_refusals((self._freed, self.quotas.version))
        start, decisions = self.task_tries, []
        waiting: set[str] = set()  # tenants whose next job waits for the next round's budget

        def inputs(job: Job) -> Inputs:
            preempting = preempt and job.priority is PriorityClass.INFERENCE
            return Inputs((self._freed, self.quotas.version), self._moved, preempting)

        for job in self._queue.ready(inputs):
            if job.tenant in waiting:
                continue
            tried = inputs(job)
            reason = self._queue.refused_shape(job, tried)
            if reason is not None:
                decisions.append(Decision(job.job_id, reason=reason))
                self._queue.refuse(job, tried, reason)
                continue
            spent = self.task_tries - start
            if spent >= self.round_budget:
                break
            if spent and spent + job.tasks + 1 > self.round_budget:
                waiting.add(job.tenant)
                continue
            decision = self.place(job, now=now, preempt=preempt)
            self._queue.took_turn(job.tenant)
            decisions.append(decision)
            if not decision.placed:
                self._queue.refuse(job, inputs(job), decision.reason)
        return decisions

    def release(self, job_id: str) -> Placement | None:
        """A job finished or was cancelled: free what it holds (or drop it from the queue)."""
        if self._queue.remove(job_id) is not None:
            return None
        if job_id not in self._placed:
            raise InputError(f"no job {job_id} is placed or queued")
        self._runtime.pop(job_id, None)
        self._freed += 1
        return self._detach(job_id)[0]

    def note_started(self, job_id: str, at: float) -> None:
        """The agent started placed job ``job_id`` at ``at``; its last checkpoint is then."""
        self.runtime(job_id)
        self._runtime[job_id] = Runtime(at, at)

    def note_checkpoint(self, job_id: str, at: float) -> None:
        """Placed job ``job_id`` saved a checkpoint at ``at``: work before it is safe."""
        started = self.runtime(job_id).started_at
        self._runtime[job_id] = Runtime(started, at)

    def adopt(
        self,
        job: Job,
        tasks: Sequence[TaskPlacement],
        *,
        started_at: float | None = None,
        last_checkpoint_at: float | None = None,
    ) -> Placement:
        """Put back a placement known from a database after a restart: the same nodes, GPUs,
        shares and MIG instances, charged to quotas as ``place`` charges (a quota lowered since
        does not evict it). ``InputError`` naming the problem, and nothing held, when it does
        not fit (unknown node, GPU busy or not usable, wrong shape)."""
        if job.job_id in self._placed:
            raise InputError(f"job {job.job_id} is already placed")
        if len(tasks) != job.tasks:
            raise InputError(
                f"job {job.job_id}: has {job.tasks} tasks, placement names {len(tasks)}"
            )
        allocs: list[TaskAlloc] = []
        try:
            for t in tasks:
                allocs.append(self._adopt_task(job, t))
        except InputError:
            for a in reversed(allocs):
                self.cluster.undo(a)
            raise
        charged = _memory_charged(allocs)
        q = self.quotas.quota(job.tenant)
        after = self.quotas.usage(job.tenant).gpu_milli + job.total_gpu_milli
        borrowed = q is not None and q.gpu_milli is not None and after > q.gpu_milli
        start = self._clock() if started_at is None else started_at
        placement = self._commit(job, allocs, charged, Admission(True, borrowed), started_at=start)
        if last_checkpoint_at is not None:
            self.note_checkpoint(job.job_id, last_checkpoint_at)
        return placement

    # ---- placing, the parts ----------------------------------------------------------------

    def _allocate(self, job: Job, *, probe: bool = False) -> _Allocated | str:
        """Apply every task of ``job`` (the policy chooses, or first fit when ``probe``, which
        leaves the policy's learnt state alone); undo all and return why when one does not fit.

        At-risk GPUs are the last resort of interruptible work: it goes to healthy GPUs when
        they can take all of it, so a GPU that does fail costs as little work as it can."""
        admission = self.quotas.admit(job)
        if not admission.ok:
            return admission.reason
        room = self.quotas.memory_room(job.tenant)
        if job.interruptible and not probe and self.spot_first and self.cluster.spot.any():
            got = _spot.on_spot(self.cluster, lambda: self._apply_tasks(job, job, room, probe))
            if not isinstance(got, str):
                return (*got, admission)
        if job.interruptible and not probe and self.cluster.any_at_risk():
            got = self._apply_tasks(job, replace(job, interruptible=False), room, probe)
            if not isinstance(got, str):
                return (*got, admission)
        got = self._apply_tasks(job, job, room, probe)
        return got if isinstance(got, str) else (*got, admission)

    def _apply_tasks(
        self, job: Job, view: Job, room: float, probe: bool
    ) -> tuple[list[TaskAlloc], float] | str:
        """Choose the GPUs of each task as ``view`` (``job``, or ``job`` kept off at-risk GPUs)
        and apply them as ``job``; all undone, and why, when one task does not fit."""
        cluster, charged = self.cluster, 0.0
        self.task_tries += 1
        fit, _, counts = self._fit(view, room)
        if fit < job.tasks:  # refused from the counts alone: no task is placed and undone
            if fit == 0:
                return why_not(cluster, view, room, placed_tasks=0)
            return why_too_few(cluster, view, room, counts, fit)
        allocs: list[TaskAlloc] = []
        for _ in range(job.tasks):
            self.task_tries += 1
            feasible = cluster.feasible(view, room - charged)
            if not feasible.any():
                reason = why_not(self.cluster, view, room - charged, placed_tasks=len(allocs))
                for alloc in reversed(allocs):
                    cluster.undo(alloc)
                return reason
            if probe:
                node = int(feasible.argmax())
                gpus, start = cluster.default_gpus(view, node)
            else:
                cluster.prefer = self._cached.get(job.model) if job.model else None
                try:
                    choice = self.policy.choose(cluster, view, feasible)
                finally:
                    cluster.prefer = None
                node, gpus, start = choice.node, choice.gpus, choice.mig_start
            alloc = cluster.apply(job, node, gpus, start)
            allocs.append(alloc)
            charged += _memory_charged([alloc])
        return allocs, charged

    def _fit(self, job: Job, room: float) -> tuple[int, bool, tuple[np.ndarray, ...]]:
        """How many tasks of ``job`` fit at once (``ClusterState.fit_counts``) within ``room``
        MiB of GPU-memory quota; whether that number is exact; the per-node counts.

        Exact unless a memory quota charges the tasks different amounts on different nodes
        (a whole GPU is charged its framebuffer): then it is an upper bound, as a knapsack
        would be needed, and only trying the tasks tells."""
        counts = self.cluster.fit_counts(job)
        per_node = np.minimum(np.minimum(counts[0], counts[1]), counts[2])
        if room == math.inf:
            return int(per_node.sum()), True, counts
        charge = self.cluster.memory_charge(job)
        with np.errstate(invalid="ignore"):
            per_node = np.where(charge <= room, per_node, 0)  # NaN (unknown memory) is False
            paid = (charge > 0) & (per_node > 0)
        if not paid.any():
            return int(per_node.sum()), True, counts
        per_node[paid] = np.minimum(per_node[paid], (room // charge[paid]).astype(np.int64))
        cheapest, dearest = float(charge[paid].min()), float(charge[paid].max())
        fit = int(per_node[~paid].sum()) + min(int(per_node[paid].sum()), int(room // cheapest))
        return fit, cheapest == dearest, counts

    def _fits(self, job: Job) -> bool:
        """Whether all of ``job`` fits now; changes nothing. Answered by the counts alone
        unless they are only an upper bound (``_fit``); then by a first-fit trial, undone."""
        if not self.quotas.admit(job).ok:
            return False
        room = self.quotas.memory_room(job.tenant)
        self.task_tries += 1
        fit, exact, _ = self._fit(job, room)
        if fit < job.tasks or exact:
            return fit >= job.tasks
        got = self._apply_tasks(job, job, room, probe=True)
        if isinstance(got, str):
            return False
        for a in reversed(got[0]):
            self.cluster.undo(a)
        return True

    def _commit(
        self,
        job: Job,
        allocs: list[TaskAlloc],
        charged: float,
        admission: Admission,
        *,
        started_at: float,
    ) -> Placement:
        """Record applied ``allocs`` as the placement of ``job`` and charge its quota."""
        placement = Placement(
            job,
            tuple(self._task_placement(a) for a in allocs),
            borrowed=admission.borrowed,
            gpu_memory_mib=charged,
        )
        self._attach(placement, allocs)
        self._runtime[job.job_id] = Runtime(started_at, started_at)
        self._queue.remove(job.job_id)
        self._moved += 1
        return placement

    def _attach(self, placement: Placement, allocs: list[TaskAlloc]) -> None:
        job = placement.job
        self.quotas.charge(job.job_id, job.tenant, job.total_gpu_milli, placement.gpu_memory_mib)
        self._placed[job.job_id] = (placement, allocs)
        for a in allocs:
            for g in a.gpus:
                self._on_gpu.setdefault((a.node, g), set()).add(job.job_id)

    def _detach(self, job_id: str) -> tuple[Placement, list[TaskAlloc]]:
        """Free what ``job_id`` holds, keeping the record so ``_reattach`` can put it back."""
        placement, allocs = self._placed.pop(job_id)
        for a in reversed(allocs):
            self.cluster.undo(a)
            for g in a.gpus:
                self._on_gpu[(a.node, g)].discard(job_id)
        self.quotas.release(job_id)
        return placement, allocs

    def _reattach(self, placement: Placement, allocs: list[TaskAlloc]) -> None:
        for a in allocs:
            self.cluster.redo(a)
        self._attach(placement, allocs)

    def _place_preempting(self, job: Job, now: float, reason: str) -> Decision:
        """Evict the cheapest victims that make room for inference ``job``, then place it."""
        candidates = _preempt.candidates(self, job, now)
        # one task needs room on one node only, unless freeing its own tenant's quota helps
        one_node = job.tasks == 1 and self.quotas.quota(job.tenant) is None
        victims = _preempt.cheapest_victims(
            candidates, lambda ids: self._fits_without(job, ids), one_node=one_node
        )
        if victims is None:
            return Decision(job.job_id, reason=reason + "; preempting would not make room")
        held = [self._detach(v) for v in victims.job_ids]
        got = self._allocate(job)
        if isinstance(got, str):  # the policy chose differently from the trial: use first fit
            got = self._allocate(job, probe=True)
        if isinstance(got, str):  # cannot happen while trials are deterministic; be safe
            for placement, allocs in reversed(held):
                self._reattach(placement, allocs)
            return Decision(job.job_id, reason=got)
        evictions = []
        for placement, allocs in held:
            victim = placement.job
            self._runtime.pop(victim.job_id, None)
            self._queue.add(victim, evicted=True)  # first in its class, like evictions
            first = allocs[0]
            evictions.append(
                Eviction(
                    victim,
                    self.cluster.names[first.node],
                    first.gpus[0] if first.gpus else -1,
                    f"preempted by inference job {job.job_id}",
                )
            )
        self._freed += 1  # the victims may have left more room than the job took
        placement = self._commit(job, *got, started_at=now)
        return Decision(job.job_id, placement, evictions=tuple(evictions))

    def _fits_without(self, job: Job, victims: Sequence[str]) -> bool:
        """Whether ``job`` would fit with ``victims`` gone; changes nothing."""
        held = [self._detach(v) for v in victims]
        try:
            return self._fits(job)
        finally:
            for placement, allocs in reversed(held):
                self._reattach(placement, allocs)

    def _adopt_task(self, job: Job, t: TaskPlacement) -> TaskAlloc:
        """Apply one task exactly as ``t`` says, or raise ``InputError`` saying why not."""
        name = job.job_id
        if t.node not in self.cluster.index:
            raise InputError(f"job {name}: no node {t.node!r} in the cluster")
        n = self.cluster.index[t.node]
        for g in t.gpus:
            if not 0 <= g < self.cluster.n_gpus[n]:
                raise InputError(f"job {name}: node {t.node} has no GPU {g}")
            health = self.gpu_health(t.node, g)
            if health is Health.UNHEALTHY or (health is Health.AT_RISK and not job.interruptible):
                raise InputError(f"job {name}: GPU {g} of {t.node} is {health}")
        if job.kind == "mig":
            if t.mig is None or t.mig.profile != job.mig_profile:
                raise InputError(f"job {name}: placement must name a {job.mig_profile} instance")
        elif t.mig is not None or (t.gpus and t.gpu_milli != job.gpu_milli):
            raise InputError(f"job {name}: placement share does not match the job's gpu_milli")
        try:
            return self.cluster.apply(job, n, tuple(t.gpus), _start(t.mig), t.sharing)
        except InputError as exc:
            busy = [g for g in t.gpus if self._on_gpu.get((n, g))]
            if busy:
                holders = ", ".join(sorted(set().union(*(self._on_gpu[(n, g)] for g in busy))))
                raise InputError(
                    f"job {name}: {plural(len(busy), 'GPU')} {busy} of {t.node} busy with {holders}"
                ) from exc
            raise InputError(f"job {name}: {exc}") from exc

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
        self._freed += 1
        evictions = []
        for job_id in sorted(self._on_gpu.get((n, gpu), ())):
            job = self._placed[job_id][0].job
            if health is Health.UNHEALTHY or (health is Health.AT_RISK and not job.interruptible):
                self.release(job_id)
                self._queue.add(job, evicted=True)  # evicted work goes first in its class
                evictions.append(Eviction(job, node, gpu, f"GPU {gpu} of {node} is {health}"))
        return evictions

    def set_open(self, node: str, is_open: bool) -> None:
        """Let ``node`` take new work or not: closed while it drains, sleeps or is reclaimed
        (``sleep.py``, ``spot.py``); what already runs there stays."""
        n = self.node_index(node)
        if is_open and not self.cluster.open[n]:
            self._freed += 1  # room may have been made
        self.cluster.set_open(n, is_open)

    def is_open(self, node: str) -> bool:
        return bool(self.cluster.open[self.node_index(node)])

    def jobs_on(self, node: str) -> list[str]:
        """Ids of the placed jobs with a task on ``node``."""
        n = self.node_index(node)
        return sorted(
            j for j, (_, allocs) in self._placed.items() if any(a.node == n for a in allocs)
        )

    def node_busy(self, node: str) -> bool:
        """Whether anything is placed on ``node`` (from the arrays: cheap, for every node)."""
        c, n = self.cluster, self.node_index(node)
        return bool(
            c.cpu_free[n] < c.cpu_cap[n]
            or c.mem_free[n] < c.mem_cap[n]
            or (c.exists[n] & (c.free[n] < GPU_MILLI)).any()
        )

    def reclaim(self, node: str, reason: str) -> list[Eviction]:
        """``node`` is going away (a spot reclaim, a drain with a deadline): close it and evict
        every job with a task there, queued again first in its class, as ``set_health`` does.
        Returns the evictions, for the agent to checkpoint and stop them."""
        self.set_open(node, False)
        evictions = []
        for job_id in self.jobs_on(node):
            placement = self._placed[job_id][0]
            job = placement.job
            gpu = next((g for t in placement.tasks if t.node == node for g in t.gpus), -1)
            self.release(job_id)
            self._queue.add(job, evicted=True)
            evictions.append(Eviction(job, node, gpu, reason))
        return evictions

    def set_model_cache(self, node: str, models: Iterable[str]) -> None:
        """What ``node``'s local cache holds (model weight names, as jobs name them); replaces
        what it held before. Placement prefers these nodes for jobs naming those models."""
        n = self.node_index(node)
        wanted = set(models)
        for model, mask in list(self._cached.items()):
            if mask[n] and model not in wanted:
                mask[n] = False
                if not mask.any():
                    del self._cached[model]
        for model in wanted:
            self._cached.setdefault(model, np.zeros(self.cluster.n_nodes, dtype=bool))[n] = True

    def cached_on(self, model: str) -> list[str]:
        """Nodes whose cache holds ``model``."""
        mask = self._cached.get(model)
        return [] if mask is None else [self.cluster.names[i] for i in np.flatnonzero(mask)]

    def set_sharing_mode(self, node: str, gpu: int, mode: SharingMode | str) -> None:
        """Switch an idle GPU between whole, fractional and MIG."""
        try:
            mode = SharingMode(mode)
        except ValueError:
            raise InputError(f"sharing mode must be whole, fractional or mig: {mode!r}") from None
        self.cluster.set_mode(self._gpu(node, gpu), gpu, mode)
        self._freed += 1

    # ---- helpers ---------------------------------------------------------------------------

    def _task_placement(self, a: TaskAlloc) -> TaskPlacement:
        milli = a.milli if a.mig is None else 0
        return TaskPlacement(self.cluster.names[a.node], a.gpus, milli, a.mig, a.sharing)


def _memory_charged(allocs: Iterable[TaskAlloc]) -> float:
    """GPU memory (MiB) charged for ``allocs``; unknown (NaN) framebuffers charge nothing."""
    return math.fsum(m for a in allocs for m in a.gpu_memory_mib if not math.isnan(m))


def _start(inst: MigInstance | None) -> int | None:
    return None if inst is None else inst.start
