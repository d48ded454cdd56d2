"""Hand-made scored fleets for the loop tests: a few GPUs, a few hours, verdicts and failures
chosen by the test, so every count the loop reports can be worked out by hand."""

from __future__ import annotations

import numpy as np

from gpuwarden.closedloop.fleet import FleetSpecSummary, ScoredFleet, SlotFailure
from gpuwarden.closedloop.workload import Workload, WorkloadSpec, cluster_nodes
from gpuwarden.scheduler import Job, PriorityClass, Scheduler

T0 = 1_800_000_000.0  # on the hour
H = 3600.0
MODEL = "H100-80GB"


def service(job_id: str = "svc-0", gpus: int = 1) -> Job:
    return Job(job_id, priority=PriorityClass.INFERENCE, gpus_per_task=gpus)


def first_gpu_of(job: Job, gpus_per_node: int) -> int:
    """Where the bundled scheduler puts ``job`` on an empty node (the loop places it the same
    way): the tests put their failures under it."""
    sched = Scheduler(cluster_nodes([("n0", MODEL, gpus_per_node)]), policy="bestfit")
    placement = sched.place(job).placement
    assert placement is not None
    return placement.tasks[0].gpus[0]


def make_fleet(
    *,
    gpus: int = 2,
    hours: int = 24,
    risk: dict[int, dict[int, float]] | None = None,
    rule: dict[int, set[int]] | None = None,
    link: dict[int, set[int]] | None = None,
    failures: tuple[SlotFailure, ...] = (),
    threshold: float = 0.7,
) -> ScoredFleet:
    """One node ``n0`` of ``gpus`` GPUs, life ``g`` in slot ``g``, scored at ``T0 + (t+1) h``
    for t < ``hours``. ``risk[g][t]``: the model's risk (default 0.01); ``rule[g]``: hours a rule
    fires; ``link[g]``: hours a link rule holds. A life stops reporting once its failure has
    happened."""
    risk, rule, link = risk or {}, rule or {}, link or {}
    fail_at = {f.slot: f.ts for f in failures}
    at = T0 + (np.arange(hours) + 1) * H
    ptr, lives, risks, rules, links = [0], [], [], [], []
    for t in range(hours):
        for g in range(gpus):
            if fail_at.get(g, np.inf) <= at[t]:
                continue
            lives.append(g)
            risks.append(risk.get(g, {}).get(t, 0.01))
            rules.append(t in rule.get(g, set()))
            links.append("pcie_link_degraded" if t in link.get(g, set()) else "")
        ptr.append(len(lives))
    return ScoredFleet(
        FleetSpecSummary(1, gpus, hours / 24, 0.3, 1.0),
        [("n0", MODEL, gpus)],
        [("n0", g) for g in range(gpus)],
        T0,
        float(at[-1]),
        at,
        np.asarray(ptr, dtype=np.int64),
        np.asarray(lives, dtype=np.int32),
        np.asarray(risks, dtype=np.float32),
        np.asarray(rules, dtype=bool),
        np.zeros(len(lives), dtype=bool),
        np.asarray(links, dtype=object),
        np.array([f"GPU-{g}" for g in range(gpus)]),
        np.arange(gpus),
        list(failures),
        threshold,
    )


def failure(
    slot: int, hours: float, *, precursor: bool = True, repair_h: float = 48
) -> SlotFailure:
    kind = "hbm_degradation" if precursor else "gsp_error"
    return SlotFailure(T0 + hours * H, slot, f"GPU-{slot}", kind, repair_h * H, precursor)


def workload(*services: Job, restart_s: float = 900.0) -> Workload:
    return Workload(tuple(services), (), WorkloadSpec(restart_s=restart_s))
