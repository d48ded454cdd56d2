"""gpuwarden's GPU scheduler core: resource model, MIG, placement policies, gangs, quotas.

Pure and in memory: a ``Scheduler`` holds the cluster as numpy arrays and decides where jobs go;
it launches nothing. Preemption (``place(job, preempt=True)``), ``adopt`` after a restart and
the billing ledger (``billing``) are here too; the HTTP service and node agent call this API.

    from gpuwarden.scheduler import Job, NodeSpec, Scheduler
    s = Scheduler([NodeSpec.uniform("n1", 64000, 262144, 8, "A100-80GB")], policy="warden")
    s.place(Job("train-1", tasks=2, gpus_per_task=4, cpu_milli=8000, memory_mib=65536))
"""

from gpuwarden.scheduler.billing import BillRow, UsageInterval, gpu_hours
from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.jobs import (
    CheckpointHook,
    Decision,
    Eviction,
    Job,
    Placement,
    PriorityClass,
    Runtime,
    TaskPlacement,
)
from gpuwarden.scheduler.mig import MIG_PROFILES, MigInstance, MigProfile
from gpuwarden.scheduler.policies import POLICIES, Choice, PlacementPolicy, TaskMix, make_policy
from gpuwarden.scheduler.preempt import PREEMPTIBLE, Candidate, VictimSet, cheapest_victims
from gpuwarden.scheduler.quota import Quota, QuotaLedger
from gpuwarden.scheduler.resources import GpuSpec, Health, NodeSpec, SharingMode
from gpuwarden.scheduler.scheduler import Scheduler
from gpuwarden.scheduler.simulate import Arrival, ReplayResult, replay

__all__ = [
    "MIG_PROFILES",
    "POLICIES",
    "PREEMPTIBLE",
    "Arrival",
    "BillRow",
    "Candidate",
    "CheckpointHook",
    "Choice",
    "ClusterState",
    "Decision",
    "Eviction",
    "GpuSpec",
    "Health",
    "Job",
    "MigInstance",
    "MigProfile",
    "NodeSpec",
    "Placement",
    "PlacementPolicy",
    "PriorityClass",
    "Quota",
    "QuotaLedger",
    "ReplayResult",
    "Runtime",
    "Scheduler",
    "SharingMode",
    "TaskMix",
    "TaskPlacement",
    "UsageInterval",
    "VictimSet",
    "cheapest_victims",
    "gpu_hours",
    "make_policy",
    "replay",
]
