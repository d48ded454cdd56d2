"""Per-tenant quotas on GPUs and GPU memory, checked before every placement.

A tenant's ``gpu_milli`` is its guarantee; ``borrow_gpu_milli`` more may be borrowed from idle
capacity, by interruptible jobs only, because borrowed work is what a later preemption pass
reclaims when a guaranteed tenant needs its share back (Kueue's nominal quota and borrowing
limit work the same way). ``gpu_memory_mib`` caps the framebuffer the tenant holds. Tenants
without a quota are unlimited. Usage never passes a limit: the ledger refuses, it never clips.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuwarden.errors import ConfigError, InputError
from gpuwarden.scheduler.jobs import Job
from gpuwarden.wording import figure


@dataclass(frozen=True)
class Quota:
    """Limits of one tenant; None means no limit on that resource."""

    tenant: str
    gpu_milli: int | None = None
    gpu_memory_mib: int | None = None
    borrow_gpu_milli: int = 0

    def __post_init__(self) -> None:
        if not self.tenant:
            raise InputError("a quota needs a tenant")
        for attr in ("gpu_milli", "gpu_memory_mib", "borrow_gpu_milli"):
            value = getattr(self, attr)
            if value is not None and value < 0:
                raise InputError(f"quota of {self.tenant}: {attr} must be >= 0, got {value}")
        if self.borrow_gpu_milli and self.gpu_milli is None:
            raise InputError(f"quota of {self.tenant}: borrowing needs a gpu_milli guarantee")


@dataclass(frozen=True)
class Usage:
    gpu_milli: int = 0
    gpu_memory_mib: float = 0.0


@dataclass(frozen=True)
class Admission:
    """Whether a job fits its tenant's GPU quota; ``borrowed`` when it needs the borrow limit."""

    ok: bool
    borrowed: bool = False
    reason: str = ""


class QuotaLedger:
    """Quota limits and what each tenant holds, charged per placed job."""

    def __init__(self, quotas: Iterable[Quota] = ()) -> None:
        self._quotas: dict[str, Quota] = {}
        self._used: dict[str, Usage] = {}
        self._charges: dict[str, tuple[str, int, float]] = {}
        self.version = 0  # bumped by every ``set``: a job refused for its quota may fit now
        for q in quotas:
            self.set(q)

    def set(self, quota: Quota) -> None:
        """Install or change a quota. Lowering it below current usage refuses new work only."""
        self._quotas[quota.tenant] = quota
        self.version += 1

    def quota(self, tenant: str) -> Quota | None:
        return self._quotas.get(tenant)

    def usage(self, tenant: str) -> Usage:
        return self._used.get(tenant, Usage())

    def admit(self, job: Job) -> Admission:
        """Check the job's GPU thousandths against its tenant's guarantee and borrow limit."""
        q = self._quotas.get(job.tenant)
        if q is None or q.gpu_milli is None:
            return Admission(True)
        after = self.usage(job.tenant).gpu_milli + job.total_gpu_milli
        if after <= q.gpu_milli:
            return Admission(True)
        if after <= q.gpu_milli + q.borrow_gpu_milli:
            if job.interruptible:
                return Admission(True, borrowed=True)
            return Admission(
                False, reason=f"tenant {job.tenant}: only interruptible jobs may borrow GPU quota"
            )
        limit, need = q.gpu_milli + q.borrow_gpu_milli, job.total_gpu_milli
        if need > limit:  # no release of the tenant's other jobs lets it start
            return Admission(
                False,
                reason=(
                    f"tenant {job.tenant}: the job needs {_gpus(need)}, more than the whole "
                    f"GPU quota of {_gpus(limit)}; it starts only if the quota is raised"
                ),
            )
        return Admission(
            False,
            reason=(
                f"tenant {job.tenant}: GPU quota {_gpus(limit)}, {_gpus(after - need)} in use, "
                f"the job needs {_gpus(need)}"
            ),
        )

    def memory_room(self, tenant: str) -> float:
        """GPU memory (MiB) the tenant may still take; ``inf`` when it has no memory limit."""
        q = self._quotas.get(tenant)
        if q is None or q.gpu_memory_mib is None:
            return math.inf
        return q.gpu_memory_mib - self.usage(tenant).gpu_memory_mib

    def charge(self, job_id: str, tenant: str, gpu_milli: int, gpu_memory_mib: float) -> None:
        if job_id in self._charges:
            raise InputError(f"job {job_id} is already charged to a quota")
        self._charges[job_id] = (tenant, gpu_milli, gpu_memory_mib)
        u = self.usage(tenant)
        self._used[tenant] = Usage(u.gpu_milli + gpu_milli, u.gpu_memory_mib + gpu_memory_mib)

    def release(self, job_id: str) -> None:
        """Give back what ``job_id`` was charged; a job never charged is ignored."""
        charge = self._charges.pop(job_id, None)
        if charge is None:
            return
        tenant, milli, mem = charge
        u = self.usage(tenant)
        self._used[tenant] = Usage(u.gpu_milli - milli, u.gpu_memory_mib - mem)

    def tenants(self) -> list[str]:
        return sorted(set(self._quotas) | set(self._used))


#: What a tenant's table in the tenant file may hold.
TENANT_KEYS = frozenset({"gpus", "guaranteed_gpus", "gpu_memory_mib"})


def load_tenant_file(path: str) -> dict[str, Any]:
    """The whole tenant file (TOML): ``[quotas.team-a] gpus = 8  guaranteed_gpus = 4
    gpu_memory_mib = 327680`` per tenant, which ``gpuwarden scheduler serve --quotas`` reads,
    plus any other tables (``[kubernetes]``, read by ``gpuwarden tenants apply``)."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"tenant file {path}: {exc}") from exc
    table = doc.get("quotas", {})
    if not isinstance(table, dict):
        raise ConfigError(f"tenant file {path}: [quotas] must be a table of tenants")
    for tenant, limits in table.items():
        if not isinstance(limits, dict) or set(limits) - TENANT_KEYS:
            raise ConfigError(
                f"tenant file {path}: [quotas.{tenant}] takes gpus, guaranteed_gpus, gpu_memory_mib"
            )
    return doc


def load_quotas(path: str) -> dict[str, dict[str, Any]]:
    """The ``[quotas.TENANT]`` tables of the tenant file, by tenant."""
    quotas: dict[str, dict[str, Any]] = load_tenant_file(path).get("quotas", {})
    return quotas


def _gpus(milli: int) -> str:
    """Thousandths of a GPU as people count them: "2 GPUs", "0.429 GPUs", "1 GPU"."""
    return f"{figure(milli / 1000)} {'GPU' if milli == 1000 else 'GPUs'}"
