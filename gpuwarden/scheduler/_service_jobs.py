"""Jobs between their three shapes: a submitted spec (JSON), a stored ``JobRow``, a ``Job``.

The spec is checked by building the ``Job`` it describes, so the service refuses exactly what the
scheduler core refuses, with the core's message naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuwarden.errors import InputError
from gpuwarden.scheduler.jobs import CheckpointHook, Job, Placement, TaskPlacement
from gpuwarden.scheduler.mig import MigInstance
from gpuwarden.scheduler.state import JobRow

#: spec fields a submission may carry, with their defaults (the ``Job`` defaults, plus name,
#: command and idempotency_key that only the service knows about)
SPEC_FIELDS: dict[str, Any] = {
    "name": None,
    "command": None,
    "priority": "batch",
    "interruptible": False,
    "tasks": 1,
    "gpus_per_task": 1,
    "gpu_milli": 1000,
    "mig_profile": None,
    "gpu_models": [],
    "gpu_memory_mib": None,
    "cpu_milli": 0,
    "memory_mib": 0,
    "checkpoint": None,
    "grace_period_s": 30.0,
}

#: job states the service ends in; nothing moves a job out of them
FINISHED = ("succeeded", "failed", "cancelled")


def normalise_spec(body: Mapping[str, Any]) -> dict[str, Any]:
    """The stored spec of a submission: known fields only, defaults filled, command checked."""
    unknown = set(body) - set(SPEC_FIELDS) - {"tenant", "idempotency_key"}
    if unknown:
        raise InputError(f"unknown job fields: {', '.join(sorted(unknown))}")
    spec = {k: body.get(k, default) for k, default in SPEC_FIELDS.items()}
    if spec["priority"] is None:
        spec["priority"] = "batch"
    name = spec["name"]
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise InputError("name: a job needs a name of 1..200 characters")
    command = spec["command"]
    if isinstance(command, str):
        if not command.strip():
            raise InputError("command: must not be empty")
    elif not (isinstance(command, list) and command and all(isinstance(c, str) for c in command)):
        raise InputError("command: must be a string or a non-empty list of strings")
    if isinstance(spec["gpu_models"], str):
        spec["gpu_models"] = [m for m in spec["gpu_models"].split("|") if m]
    for attr in ("interruptible",):
        if not isinstance(spec[attr], bool):
            raise InputError(f"{attr}: must be true or false")
    grace = spec["grace_period_s"]
    if not isinstance(grace, int | float) or isinstance(grace, bool):
        raise InputError("grace_period_s: must be a number of seconds")
    if not 0 <= grace <= MAX_GRACE_S:  # NaN and inf fail too: a job must not keep its GPUs
        raise InputError(f"grace_period_s: must be within 0..{MAX_GRACE_S:g} s, got {grace!r}")
    return spec


#: The longest a preempted job may take to checkpoint before it is stopped; past it a tenant
#: could hold GPUs that inference is waiting for.
MAX_GRACE_S = 3600.0


def job_of(job_id: str, tenant: str, spec: Mapping[str, Any]) -> Job:
    """The scheduler's ``Job`` for a stored spec; raises ``InputError`` naming a bad field."""
    hook = spec.get("checkpoint")
    checkpoint = None
    if hook is not None:
        if not isinstance(hook, Mapping) or set(hook) != {"kind", "target"}:
            raise InputError('checkpoint: must be {"kind": "signal|command|url", "target": ...}')
        checkpoint = CheckpointHook(str(hook["kind"]), str(hook["target"]))  # type: ignore[arg-type]
    try:
        return Job(
            job_id,
            tenant=tenant,
            priority=spec["priority"],
            interruptible=spec["interruptible"],
            tasks=spec["tasks"],
            gpus_per_task=spec["gpus_per_task"],
            gpu_milli=spec["gpu_milli"],
            mig_profile=spec["mig_profile"],
            gpu_models=frozenset(spec["gpu_models"] or ()),
            gpu_memory_mib=spec["gpu_memory_mib"],
            cpu_milli=spec["cpu_milli"],
            memory_mib=spec["memory_mib"],
            checkpoint=checkpoint,
            grace_period_s=float(spec["grace_period_s"]),
        )
    except TypeError as exc:  # e.g. a list where a number belongs
        raise InputError(f"job {job_id}: {exc}") from exc


def argv_of(command: str | Sequence[str]) -> list[str]:
    """What the agent executes: a string runs under ``/bin/sh -c``, a list as given."""
    return ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)


def placement_json(placement: Placement) -> list[dict[str, Any]]:
    """Stored form of a placement, one entry per task, enough to adopt it again after a restart."""
    out = []
    for t in placement.tasks:
        entry: dict[str, Any] = {
            "node": t.node,
            "gpus": list(t.gpus),
            "gpu_milli": t.gpu_milli,
            "mig": None,
        }
        if t.mig is not None:
            entry.update(mig=t.mig.profile, mig_start=t.mig.start, mig_slices=t.mig.memory_slices)
        out.append(entry)
    return out


def task_placements(stored: Sequence[Mapping[str, Any]]) -> tuple[TaskPlacement, ...]:
    """Inverse of ``placement_json``."""
    out = []
    for t in stored:
        inst = None
        if t.get("mig"):
            inst = MigInstance(t["mig"], int(t["mig_start"]), int(t["mig_slices"]))
        out.append(TaskPlacement(t["node"], tuple(t["gpus"]), int(t["gpu_milli"]), inst))
    return tuple(out)


def job_json(row: JobRow) -> dict[str, Any]:
    """The API's job object (docs/scheduler.md, "Running the scheduler")."""
    s = row.spec
    return {
        "job_id": row.job_id,
        "tenant": row.tenant,
        "name": row.name,
        "priority": s["priority"],
        "interruptible": s["interruptible"],
        "state": row.state,
        "attempt": row.attempt,
        "tasks": s["tasks"],
        "gpus_per_task": s["gpus_per_task"],
        "gpu_milli": s["gpu_milli"],
        "mig_profile": s["mig_profile"],
        "command": s["command"],
        "submitted_at": row.submitted_at,
        "started_at": row.started_at,
        "ended_at": row.ended_at,
        "exit_code": row.exit_code,
        "reason": row.reason,
        "last_checkpoint_at": row.last_checkpoint_at,
        "preemptions": row.preemptions,
        "placement": [
            {"node": t["node"], "gpus": t["gpus"], "gpu_milli": t["gpu_milli"], "mig": t["mig"]}
            for t in row.placement or ()
        ],
    }


def task_env(row: JobRow, task: int) -> dict[str, str]:
    """Environment of one task beyond what the agent adds (GPUs, checkpoint directory)."""
    return {
        "GPUWARDEN_JOB_ID": row.job_id,
        "GPUWARDEN_JOB_NAME": row.name,
        "GPUWARDEN_TENANT": row.tenant,
        "GPUWARDEN_ATTEMPT": str(row.attempt),
        "GPUWARDEN_RESUME": "1" if row.attempt > 1 else "0",
        "GPUWARDEN_TASK_INDEX": str(task),
        "GPUWARDEN_NUM_TASKS": str(row.spec["tasks"]),
    }


__all__ = [
    "FINISHED",
    "SPEC_FIELDS",
    "argv_of",
    "job_json",
    "job_of",
    "normalise_spec",
    "placement_json",
    "task_env",
    "task_placements",
]
