"""What the scheduler service's parts and its API share: who asks, the errors, checked quotas.

This module sits below every part of the service (``_service_lifecycle`` reads quotas back
with ``quota_of``, ``_service_sync`` refuses an unregistered node with ``NotFoundError``), so
none of them imports the ``service`` facade; ``service`` re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwarden.errors import InputError
from gpuwarden.scheduler._service_jobs import MAX_INT, check_text
from gpuwarden.scheduler.quota import Quota
from gpuwarden.scheduler.resources import GPU_MILLI


class NotFoundError(InputError):
    """No such job, node or GPU (or one another tenant owns): HTTP 404."""


class ConflictError(InputError):
    """The job cannot do that in its state (cancelling a finished job): HTTP 409."""


class QueueFullError(InputError):
    """The tenant has as many tasks queued as it may (``max_queued_tasks``): HTTP 429."""


@dataclass(frozen=True)
class Principal:
    """Who is asking: ``kind`` tenant, admin or agent; ``name`` the tenant or node."""

    kind: str
    name: str = ""

    @property
    def actor(self) -> str:
        return "admin" if self.kind == "admin" else f"{self.kind}:{self.name}"

    def sees(self, tenant: str) -> bool:
        return self.kind == "admin" or (self.kind == "tenant" and self.name == tenant)


def tenant_for(who: Principal, named: object) -> str:
    """The tenant a job ``who`` submits belongs to: the one the admin names, or the tenant's
    own (naming another is refused)."""
    if who.kind == "admin":
        if not isinstance(named, str) or not named:
            raise InputError("tenant: the admin token must name the tenant of the job")
        return check_text("tenant", named, max_chars=200)
    if named not in (None, who.name):
        raise InputError("tenant: a tenant token submits for its own tenant only")
    return who.name


#: The most GPUs a quota may name: far beyond any cluster, and small enough that its GPU
#: thousandths stay exact integers.
MAX_QUOTA_GPUS = 1_000_000.0


def quota_of(
    tenant: str, gpus: float | None, gpu_memory_mib: int | None, guaranteed_gpus: float | None
) -> Quota:
    """The scheduler's ``Quota``: ``guaranteed_gpus`` is the guarantee, ``gpus`` the limit up to
    which interruptible jobs may borrow (no guarantee given: ``gpus`` is both). Every value is
    checked here, whether it came over HTTP, from ``--quotas`` or from the database."""
    check_text("tenant", tenant, max_chars=200)
    for name, value in (("gpus", gpus), ("guaranteed_gpus", guaranteed_gpus)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(f"quota of {tenant}: {name} must be a number of GPUs, got {value!r}")
        if not 0 <= value <= MAX_QUOTA_GPUS:  # NaN and inf fail too
            raise InputError(
                f"quota of {tenant}: {name} must be within 0..{MAX_QUOTA_GPUS:g}, got {value!r}"
            )
    mem = gpu_memory_mib
    if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int)
                            or not 0 <= mem <= MAX_INT):  # fmt: skip
        raise InputError(
            f"quota of {tenant}: gpu_memory_mib must be a whole number in 0..{MAX_INT}, got {mem!r}"
        )
    if gpus is not None and guaranteed_gpus is not None and guaranteed_gpus > gpus:
        raise InputError(f"quota of {tenant}: guaranteed_gpus {guaranteed_gpus} > gpus {gpus}")
    guarantee = guaranteed_gpus if guaranteed_gpus is not None else gpus
    if guarantee is None:
        return Quota(tenant, None, gpu_memory_mib)
    borrow = 0.0 if gpus is None else gpus - guarantee
    return Quota(tenant, round(guarantee * GPU_MILLI), gpu_memory_mib, round(borrow * GPU_MILLI))


__all__ = [
    "MAX_QUOTA_GPUS",
    "ConflictError",
    "NotFoundError",
    "QueueFullError",
    "Principal",
    "quota_of",
    "tenant_for",
]
