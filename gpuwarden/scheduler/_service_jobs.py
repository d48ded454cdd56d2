"""Jobs between their three shapes: a submitted spec (JSON), a stored ``JobRow``, a ``Job``.

The spec is checked by building the ``Job`` it describes, so the service refuses exactly what the
scheduler core refuses, with the core's message naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuwarden.errors import InputError
from gpuwarden.scheduler.jobs import CheckpointHook, Job, Placement, TaskPlacement
from gpuwarden.scheduler.mig import MigInstance
from gpuwarden.scheduler.resources import GPU_MILLI
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
    "sharing": "any",
    "min_cuda": None,
    "min_driver": None,
    "gpu_arch": [],
    "ptx_jit": False,
}

#: job states the service ends in; nothing moves a job out of them
FINISHED = ("succeeded", "failed", "cancelled")


#: The largest whole number a request may carry: exact as a JSON number (a double) and far
#: inside SQLite's int64, so no count, size or id overflows on its way into the database.
MAX_INT = 2**53 - 1
#: Tasks in one gang: a placement tries each in turn under the service's lock.
MAX_TASKS = 4096
#: A command's characters in all: one exec argument must stay under Linux's 128 KiB.
MAX_COMMAND_CHARS = 65_536

#: The whole-number spec fields and their ranges; only ``gpu_memory_mib`` may be null. A node
#: registers at most 64 GPUs, so a task never needs more.
_WHOLE = {
    "tasks": (1, MAX_TASKS),
    "gpus_per_task": (0, 64),
    "gpu_milli": (0, GPU_MILLI),
    "cpu_milli": (0, MAX_INT),
    "memory_mib": (0, MAX_INT),
    "gpu_memory_mib": (1, MAX_INT),
}


def normalise_spec(body: Mapping[str, Any]) -> dict[str, Any]:
    """The stored spec of a submission: known fields only, defaults filled, every field's type
    and range checked (the ``Job`` checks the rules between fields)."""
    unknown = set(body) - set(SPEC_FIELDS) - {"tenant", "idempotency_key"}
    if unknown:
        names = ", ".join(sorted(k if is_utf8(k) else repr(k) for k in unknown))
        raise InputError(f"unknown job fields: {names}")
    spec = {k: body.get(k, default) for k, default in SPEC_FIELDS.items()}
    if spec["priority"] is None:
        spec["priority"] = "batch"
    check_text("name", spec["name"], max_chars=200)
    command = spec["command"]
    if isinstance(command, str):
        check_text("command", command, max_chars=MAX_COMMAND_CHARS)
    elif not (isinstance(command, list) and command and all(isinstance(c, str) for c in command)):
        raise InputError("command: must be a string or a non-empty list of strings")
    else:
        check_text("command", "".join(command), max_chars=MAX_COMMAND_CHARS)
    check_text("priority", spec["priority"], max_chars=20)
    if spec["mig_profile"] is not None:
        check_text("mig_profile", spec["mig_profile"], max_chars=20)
    _names(spec, "gpu_models", 64, 100, "model names, or 'A|B'")
    for attr, (lo, hi) in _WHOLE.items():
        value = spec[attr]
        if value is None and attr == "gpu_memory_mib":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise InputError(f"{attr} must be a whole number in {lo}..{hi}, got {value!r}")
    for flag in ("interruptible", "ptx_jit"):
        if not isinstance(spec[flag], bool):
            raise InputError(f"{flag}: must be true or false")
    check_text("sharing", spec["sharing"], max_chars=20)
    for attr in ("min_cuda", "min_driver"):
        if spec[attr] is not None:
            check_text(attr, spec[attr], max_chars=20)
    _names(spec, "gpu_arch", 16, 20, "architectures, or 'ampere|hopper'")
    hook = spec["checkpoint"]
    if hook is not None:
        if not isinstance(hook, Mapping) or set(hook) != {"kind", "target"}:
            raise InputError('checkpoint: must be {"kind": "signal|command|url", "target": ...}')
        check_text("checkpoint kind", hook["kind"], max_chars=20)
        check_text("checkpoint target", hook["target"], max_chars=4096)
    grace = spec["grace_period_s"]
    if not isinstance(grace, int | float) or isinstance(grace, bool):
        raise InputError("grace_period_s: must be a number of seconds")
    if not 0 <= grace <= MAX_GRACE_S:  # NaN and inf fail too: a job must not keep its GPUs
        raise InputError(f"grace_period_s: must be within 0..{MAX_GRACE_S:g} s, got {grace!r}")
    return spec


def _names(spec: dict[str, Any], field: str, most: int, chars: int, what: str) -> None:
    """``spec[field]`` as a list of at most ``most`` names ("A|B" is split), each checked."""
    names = spec[field]
    if isinstance(names, str):
        names = spec[field] = [n for n in names.split("|") if n]
    if not isinstance(names, list) or len(names) > most:
        raise InputError(f"{field}: must be a list of up to {most} {what}")
    for name in names:
        check_text(field, name, max_chars=chars)


def check_text(field: str, value: object, *, max_chars: int) -> str:
    """``value`` as a non-blank string of at most ``max_chars`` characters without NUL (a task's
    name, tenant and command reach its argv and environment, where NUL cannot go) or lone
    surrogates (SQLite stores UTF-8)."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{field}: must be a non-empty string")
    if len(value) > max_chars:
        raise InputError(f"{field}: at most {max_chars} characters, got {len(value)}")
    if "\0" in value:
        raise InputError(f"{field}: must not contain NUL characters")
    if not is_utf8(value):
        raise InputError(f"{field}: must be valid Unicode text, not a lone surrogate")
    return value


def is_utf8(value: str) -> bool:
    """Whether ``value`` can be stored: JSON's "\\ud800" decodes to a string SQLite refuses."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


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
            sharing=spec.get("sharing", "any"),  # specs stored before these fields lack them
            min_cuda=spec.get("min_cuda"),
            min_driver=spec.get("min_driver"),
            gpu_arch=frozenset(spec.get("gpu_arch") or ()),
            ptx_jit=bool(spec.get("ptx_jit", False)),
        )
    except TypeError as exc:  # e.g. a list where a number belongs
        raise InputError(f"job {job_id}: {exc}") from exc


#: The reason a job preempted for another tenant's job shows its own tenant.
PREEMPTED_BY_OTHER_TENANT = "preempted by a higher-priority inference job of another tenant"

_JOB_ID = re.compile(r"\bj-[0-9a-f]{12}\b")


def preempted_reason(victim: Job, by_job_id: str, by_tenant: str | None) -> str:
    """What the preempted job's tenant reads: the id of the job that took its GPUs only when
    that job is its own (tenants must not learn each other's jobs)."""
    if by_tenant == victim.tenant:
        return f"preempted by inference job {by_job_id}"
    return PREEMPTED_BY_OTHER_TENANT


def for_tenant(text: str, tenant: str, tenant_of: Callable[[str], str | None]) -> str:
    """``text`` with the id of every other tenant's job replaced, for a reason or audit line
    that ``tenant`` reads (the core's messages name jobs, e.g. "GPU(s) [0] of n1 busy with
    j-..." when a restart cannot adopt a placement). ``tenant_of`` looks a job id up."""

    def hide(m: re.Match[str]) -> str:
        owner = tenant_of(m.group(0))
        return m.group(0) if owner in (None, tenant) else "another tenant's job"

    return _JOB_ID.sub(hide, text)


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
        if t.sharing is not None:
            entry["sharing"] = t.sharing
        out.append(entry)
    return out


def task_placements(stored: Sequence[Mapping[str, Any]]) -> tuple[TaskPlacement, ...]:
    """Inverse of ``placement_json``."""
    out = []
    for t in stored:
        inst = None
        if t.get("mig"):
            inst = MigInstance(t["mig"], int(t["mig_start"]), int(t["mig_slices"]))
        out.append(TaskPlacement(t["node"], tuple(t["gpus"]), int(t["gpu_milli"]), inst,
                                 t.get("sharing")))  # fmt: skip
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
        "sharing": s.get("sharing", "any"),
        "min_cuda": s.get("min_cuda"),
        "min_driver": s.get("min_driver"),
        "gpu_arch": s.get("gpu_arch", []),
        "ptx_jit": s.get("ptx_jit", False),
        "command": s["command"],
        "submitted_at": row.submitted_at,
        "started_at": row.started_at,
        "ended_at": row.ended_at,
        "exit_code": row.exit_code,
        "reason": row.reason,
        "last_checkpoint_at": row.last_checkpoint_at,
        "preemptions": row.preemptions,
        "placement": [
            {
                "node": t["node"],
                "gpus": t["gpus"],
                "gpu_milli": t["gpu_milli"],
                "mig": t["mig"],
                "sharing": t.get("sharing"),
            }
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
    "MAX_INT",
    "MAX_TASKS",
    "SPEC_FIELDS",
    "argv_of",
    "check_text",
    "for_tenant",
    "is_utf8",
    "job_json",
    "job_of",
    "normalise_spec",
    "placement_json",
    "preempted_reason",
    "task_env",
    "task_placements",
]
