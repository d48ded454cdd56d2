"""The queue a placement round serves: classes in order, tenants in turn, refusals set aside.

- **Classes.** Inference, training, batch, dev: a round serves each class before the next.
- **Evicted work first.** A job evicted by a health change or preempted goes first in its class,
  in the order it was evicted.
- **Tenants take turns.** Within a class the other jobs are served one per tenant in turn, each
  tenant's own jobs first come first served. The tenant whose last turn is the oldest (or who
  never had one) goes first, and a tenant whose job is tried goes to the back, across rounds: a
  tenant with a thousand queued jobs gets one try in every round of turns, as does a tenant
  with one, so neither a long queue nor costly jobs of one tenant keep another's jobs waiting.
- **Refusals are set aside.** Placement is deterministic, so a job refused once is refused again
  until its inputs change: until room may have been made (a job left, a GPU's health or sharing
  mode changed, a quota changed), and for an inference job that may preempt, until any placement
  changed (new interruptible work is new victims). Until then rounds pass it over without trying
  it (``Inputs``), as Kubernetes keeps unschedulable pods aside until a cluster event. A job of a
  shape already refused under the same inputs is refused with the same reason without a try.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import zip_longest

from gpuwarden.scheduler.jobs import Job


@dataclass(frozen=True)
class Inputs:
    """What a refusal depended on. ``freed`` changes whenever room may have been made;
    ``moved`` whenever any placement changed; ``preempting``: the try could preempt."""

    freed: tuple[int, int]
    moved: int
    preempting: bool

    def refuses_again(self, now: Inputs) -> bool:
        """Whether a job refused under these inputs would be refused under ``now``: nothing
        freed since, and when ``now`` may preempt, the refusal was a preempting try and no
        placement changed since."""
        if self.freed != now.freed:
            return False
        return not now.preempting or (self.preempting and self.moved == now.moved)


class JobQueue:
    """Queued jobs, the tenants' turns, and the refusals set aside (see the module docstring)."""

    def __init__(self) -> None:
        self._jobs: dict[str, tuple[bool, Job]] = {}  # job id -> (evicted, job), arrival order
        self._turns = itertools.count()
        self._last_turn: dict[str, int] = {}
        self._parked: dict[str, Inputs] = {}  # refused, reason reported: not tried again yet
        self._shapes: dict[tuple[object, ...], tuple[Inputs, str, str]] = {}  # first id, reason
        self._shapes_freed: tuple[int, int] = (0, 0)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: Job, *, evicted: bool = False) -> None:
        """Queue ``job`` last among its tenant's jobs of its class, or, ``evicted``, after the
        other evicted jobs at the front of its class."""
        self._jobs.pop(job.job_id, None)
        self._parked.pop(job.job_id, None)
        self._jobs[job.job_id] = (evicted, job)

    def remove(self, job_id: str) -> Job | None:
        """Take a job out (placed, cancelled); None if it was not queued."""
        self._parked.pop(job_id, None)
        entry = self._jobs.pop(job_id, None)
        return None if entry is None else entry[1]

    def jobs(self, skip: Callable[[Job], bool] | None = None) -> list[Job]:
        """Queued jobs in the order a round serves them, less those ``skip`` says."""
        classes: dict[int, tuple[list[Job], dict[str, list[Job]]]] = {}
        for evicted, job in self._jobs.values():
            if skip is not None and skip(job):
                continue
            first, tenants = classes.setdefault(job.priority.rank, ([], {}))
            if evicted:
                first.append(job)
            else:
                tenants.setdefault(job.tenant, []).append(job)
        out: list[Job] = []
        for rank in sorted(classes):
            first, tenants = classes[rank]
            out += first
            # sorted is stable: tenants with equal turns keep the order of their first job
            turn_order = sorted(tenants, key=lambda t: self._last_turn.get(t, -1))
            for group in zip_longest(*(tenants[t] for t in turn_order)):
                out += [job for job in group if job is not None]
        return out

    def ready(self, inputs: Callable[[Job], Inputs]) -> Iterator[Job]:
        """The jobs a round should consider, in order: every job not set aside under the
        ``inputs`` it would now be tried with."""
        parked = self._parked

        def set_aside(job: Job) -> bool:
            was = parked.get(job.job_id)
            return was is not None and was.refuses_again(inputs(job))

        yield from self.jobs(set_aside)

    def took_turn(self, tenant: str) -> None:
        """``tenant``'s job was tried: it goes to the back of the turns."""
        self._last_turn[tenant] = next(self._turns)

    def refused_shape(self, job: Job, now: Inputs) -> str | None:
        """The reason ``job`` is refused without a try, naming it, when a job of its shape was
        refused under inputs that still hold; None when it must be tried."""
        seen = self._shapes.get(job.shape)
        if seen is None or not seen[0].refuses_again(now):
            return None
        _, first, reason = seen
        return reason.replace(f"job {first}: ", f"job {job.job_id}: ", 1)

    def refuse(self, job: Job, inputs: Inputs, reason: str) -> None:
        """``job`` was refused under ``inputs`` and its reason reported: set it, and its shape,
        aside until they change."""
        self._parked[job.job_id] = inputs
        self._shapes[job.shape] = (inputs, job.job_id, reason)

    def forget_refusals(self, freed: tuple[int, int]) -> None:
        """Drop the shapes refused before room was last made: they are tried again anyway, and
        the memory stays with the shapes of the present."""
        if freed != self._shapes_freed:
            self._shapes.clear()
            self._shapes_freed = freed


__all__ = ["Inputs", "JobQueue"]
