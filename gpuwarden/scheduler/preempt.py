"""Which running jobs to preempt so that an inference job fits, losing the least work.

A victim's cost is the work it loses: the GPU thousandths it holds times the seconds since its
last checkpoint (a job resumes from its checkpoint, so everything after it is redone). Among
victim sets that make room, the cheapest wins; equal costs go to the set whose victims touch
fewer nodes (fewer agents interrupted, fewer gangs torn), then to fewer victims.

The search only asks a ``fits(victims)`` oracle, so it is independent of how placement works:

1. One call with every candidate gone; if the job does not fit even then, give up at once.
2. Greedy: take candidates cheapest first until the job fits (bisecting on how many), then
   drop, dearest first, the victims the job turns out not to need (a cheap job on the wrong
   node is taken early and is not needed once a dearer one on the right node is in).
3. Exact, within a budget of oracle calls: walk victim sets in increasing total cost (each set
   once, the classic "k smallest subset sums" heap) and stop at the first that fits, or at the
   greedy set's cost. Greedy alone can be wrong: for a job needing four GPUs on one node, with
   three one-GPU jobs on node A checkpointed 100 s ago (100,000 milli-s each) and one four-GPU
   job on node B checkpointed 60 s ago (240,000), greedy takes the three cheap ones (300,000).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.jobs import Job, Placement, PriorityClass, Runtime

#: Oracle calls the exact search may make after greedy (each is one trial placement).
MAX_TRIALS = 256

Key = tuple[float, int, int]

#: Priority classes whose interruptible jobs an inference job may preempt.
PREEMPTIBLE = frozenset({PriorityClass.TRAINING, PriorityClass.BATCH, PriorityClass.DEV})


class Placed(Protocol):
    """What ``candidates`` reads of the running work; ``Scheduler`` is one. A protocol rather
    than the ``Scheduler`` itself, which calls this module: the dependency points one way."""

    @property
    def cluster(self) -> ClusterState: ...

    @property
    def placements(self) -> Mapping[str, Placement]: ...

    def runtime(self, job_id: str) -> Runtime: ...


@dataclass(frozen=True)
class Candidate:
    """A running job that may be preempted: work lost (GPU-milli x seconds since its last
    checkpoint), the number of nodes its tasks run on and, when known, their names."""

    job_id: str
    cost_milli_s: float
    nodes: int
    on: frozenset[str] = frozenset()

    @property
    def key(self) -> Key:
        return (self.cost_milli_s, self.nodes, 1)


@dataclass(frozen=True)
class VictimSet:
    """The chosen victims, their total cost and how many fit trials the search ran."""

    job_ids: tuple[str, ...]
    cost_milli_s: float
    trials: int


def candidates(scheduler: Placed, job: Job, now: float) -> list[Candidate]:
    """The placed jobs ``job`` may preempt: interruptible training, batch and dev jobs holding
    GPUs on nodes where ``job`` could run (or charged to its tenant's quota); never inference,
    and never CPU-only work, which frees no GPU."""
    cluster = scheduler.cluster
    useful = cluster.model_mask(job.gpu_models) & (cluster.n_gpus > 0)
    out = []
    for job_id, placement in scheduler.placements.items():
        other = placement.job
        if other.priority not in PREEMPTIBLE or not other.interruptible:
            continue
        if other.total_gpu_milli == 0:
            continue
        names = frozenset(t.node for t in placement.tasks)
        if other.tenant != job.tenant and not any(useful[cluster.index[n]] for n in names):
            continue
        lost_s = max(0.0, now - scheduler.runtime(job_id).last_checkpoint_at)
        out.append(Candidate(job_id, other.total_gpu_milli * lost_s, len(names), names))
    return out


def cheapest_victims(
    candidates: Sequence[Candidate],
    fits: Callable[[Sequence[str]], bool],
    *,
    max_trials: int = MAX_TRIALS,
    one_node: bool = False,
) -> VictimSet | None:
    """The cheapest set of ``candidates`` whose removal makes ``fits`` true; None if even all of
    them do not. ``fits(())`` is assumed false (the caller tried without preempting).

    ``one_node``: the job is one task that only needs room on one node, so a set whose victims
    share no node (``Candidate.on``) cannot be the cheapest (leave out the victims off the node
    the job lands on and it still fits), and the exact walk skips it without a trial.
    """
    cands = sorted(candidates, key=lambda c: (c.key, c.job_id))
    calls = 0

    def trial(ids: Sequence[str]) -> bool:
        nonlocal calls
        calls += 1
        return fits(ids)

    if not cands or not trial([c.job_id for c in cands]):
        return None
    chosen = _greedy(cands, trial)
    best, best_key = chosen, _total(chosen)
    budget = calls + max_trials
    for popped, subset in enumerate(_by_total(cands)):
        if calls >= budget or popped >= 64 * max_trials or _total(subset) >= best_key:
            break
        if one_node and not frozenset.intersection(*(c.on for c in subset)):
            continue
        if trial([c.job_id for c in subset]):
            best, best_key = subset, _total(subset)
            break
    ordered = tuple(c.job_id for c in sorted(best, key=lambda c: (c.key, c.job_id)))
    return VictimSet(ordered, best_key[0], calls)


def _greedy(cands: list[Candidate], trial: Callable[[Sequence[str]], bool]) -> list[Candidate]:
    """The shortest cheapest-first prefix that fits (found by bisection: removing more never
    makes a job fit less), less the victims it does not need."""
    lo, hi = 0, len(cands)  # the empty prefix does not fit, the full one does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if trial([c.job_id for c in cands[:mid]]):
            hi = mid
        else:
            lo = mid
    return _drop_unneeded(cands[:hi], trial)


def _drop_unneeded(
    taken: list[Candidate], trial: Callable[[Sequence[str]], bool]
) -> list[Candidate]:
    """Drop the victims the job does not need, dearest first: blocks of half the set, then
    halving (a long cheap prefix is mostly unneeded), ending one by one, so every victim left
    is needed (removing fewer victims never makes a job fit better)."""
    order = sorted(taken, key=lambda c: (c.key, c.job_id), reverse=True)
    size = max(1, len(order) // 2)
    while True:
        i = 0
        while i < len(order):
            rest = order[:i] + order[i + size :]
            if rest and trial([c.job_id for c in rest]):
                order = rest
            else:
                i += size
        if size == 1:
            return order
        size //= 2


def _total(subset: Sequence[Candidate]) -> Key:
    return (
        sum(c.cost_milli_s for c in subset),
        sum(c.nodes for c in subset),
        len(subset),
    )


def _by_total(cands: list[Candidate]) -> Iterator[list[Candidate]]:
    """Every non-empty subset of ``cands`` (sorted by key) once, in non-decreasing total key.

    From a subset whose last item is i come two children: add i+1, or replace i by i+1; both
    weigh at least as much as the parent, so a heap pops subsets in order.
    """
    heap: list[tuple[Key, tuple[int, ...]]] = [(cands[0].key, (0,))]
    while heap:
        key, idx = heapq.heappop(heap)
        yield [cands[i] for i in idx]
        last = idx[-1]
        if last + 1 < len(cands):
            nxt = cands[last + 1].key
            grown = (key[0] + nxt[0], key[1] + nxt[1], key[2] + 1)
            heapq.heappush(heap, (grown, (*idx, last + 1)))
            drop = cands[last].key
            moved = (key[0] - drop[0] + nxt[0], key[1] - drop[1] + nxt[1], key[2])
            heapq.heappush(heap, (moved, (*idx[:-1], last + 1)))
