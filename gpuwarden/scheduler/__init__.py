"""gpuwarden's GPU scheduler core: resource model, MIG, placement policies, gangs, quotas.

Pure and in memory: a ``Scheduler`` holds the cluster as numpy arrays and decides where jobs go;
it launches nothing. A service, node agent and preemption are layered on this API later.

    from gpuwarden.scheduler import Job, NodeSpec, Scheduler
    s = Scheduler([NodeSpec.uniform("n1", 64000, 262144, 8, "A100-80GB")], policy="warden")
    s.place(Job("train-1", tasks=2, gpus_per_task=4, cpu_milli=8000, memory_mib=65536))
"""

from gpuwarden.scheduler.cluster import ClusterState
from gpuwarden.scheduler.jobs import (
    CheckpointHook,
    Decision,
    Eviction,
    Job,
    Placement,
    PriorityClass,
    TaskPlacement,
)
from gpuwarden.scheduler.mig import MIG_PROFILES, MigInstance, MigProfile
from gpuwarden.scheduler.policies import POLICIES, Choice, PlacementPolicy, TaskMix, make_policy
from gpuwarden.scheduler.quota import Quota, QuotaLedger
from gpuwarden.scheduler.resources import GpuSpec, Health, NodeSpec, SharingMode
from gpuwarden.scheduler.scheduler import Scheduler
from gpuwarden.scheduler.simulate import Arrival, ReplayResult, replay

__all__ = [
    "MIG_PROFILES",
    "POLICIES",
    "Arrival",
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
    "Scheduler",
    "SharingMode",
    "TaskMix",
    "TaskPlacement",
    "make_policy",
    "replay",
]
