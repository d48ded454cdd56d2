"""Tag GPUs in gpuwarden's own scheduler (``gpuwarden.scheduler``).

The bundled scheduler keeps health per GPU, not per node: an at-risk GPU takes only
interruptible work, an unhealthy one takes nothing, and work that may no longer run there is
evicted (released, queued again, and told to checkpoint and leave through its checkpoint hook).

The tagger talks to a small interface, ``GpuHealthTarget``: ``SchedulerTarget`` adapts the
in-process ``gpuwarden.scheduler.Scheduler``, ``ServiceTarget`` a scheduler service in another
process (``gpuwarden scheduler serve``) over HTTP with the admin token, so ``gpuwarden serve
--tagger bundled+http://HOST:8477`` re-tags GPUs there and the service evicts through its
checkpoint path.

    from gpuwarden.scheduler import NodeSpec, Scheduler
    from gpuwarden.scheduler_hooks.bundled import BundledTagger, SchedulerTarget
    tagger = BundledTagger(SchedulerTarget(Scheduler([NodeSpec.uniform("n1", 64000, 262144, 8, "H100")])))
    tagger = BundledTagger.from_url("bundled+http://sched:8477")  # $GPUWARDEN_SCHEDULER_ADMIN_TOKEN
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from gpuwarden.errors import GpuwardenError, HookError
from gpuwarden.health import GpuState
from gpuwarden.scheduler_hooks.base import Echo, NodeHealth, TagResult, default_echo

ENV_ADMIN_TOKEN = "GPUWARDEN_SCHEDULER_ADMIN_TOKEN"


@runtime_checkable
class GpuHealthTarget(Protocol):
    """What the bundled tagger needs from a scheduler."""

    def gpu_health(self, hostname: str, index: int) -> str:
        """``"ok"``, ``"at-risk"`` or ``"unhealthy"``; raises for an unknown GPU."""
        ...

    def set_gpu_health(self, hostname: str, index: int, health: str, reason: str) -> Sequence[str]:
        """Set one GPU's health; returns one line per job told to checkpoint and leave."""
        ...


class SchedulerTarget:
    """``GpuHealthTarget`` over an in-process ``gpuwarden.scheduler.Scheduler``."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def gpu_health(self, hostname: str, index: int) -> str:
        from gpuwarden.scheduler import Health

        n = self.scheduler.node_index(hostname)
        if not 0 <= index < int(self.scheduler.cluster.n_gpus[n]):
            raise HookError(f"node {hostname} has no GPU {index} in the bundled scheduler")
        # ClusterState keeps health as 0/1/2 in Health's declaration order (ok, at-risk, unhealthy)
        return str(list(Health)[int(self.scheduler.cluster.health[n, index])])

    def set_gpu_health(self, hostname: str, index: int, health: str, reason: str) -> list[str]:
        evictions = self.scheduler.set_health(hostname, index, health)
        return [f"job {e.job.job_id} told to checkpoint and leave ({e.reason})" for e in evictions]


class ServiceTarget:
    """``GpuHealthTarget`` over the scheduler service's HTTP API (``GET /v1/nodes``, ``POST
    /v1/nodes/{node}/gpus/{i}/health``); ``token`` is the admin token (default from
    $GPUWARDEN_SCHEDULER_ADMIN_TOKEN, never logged)."""

    def __init__(self, url: str, token: str | None = None, *, timeout_s: float = 10.0) -> None:
        import httpx

        token = token if token is not None else os.environ.get(ENV_ADMIN_TOKEN, "")
        if not token:
            raise HookError(f"bundled scheduler at {url}: set {ENV_ADMIN_TOKEN}")
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s
        )

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        import httpx

        try:
            r = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise HookError(f"bundled scheduler at {self.url}: {exc}") from exc
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            raise HookError(f"bundled scheduler at {self.url}: HTTP {r.status_code}: {detail}")
        return r.json()

    def gpu_health(self, hostname: str, index: int) -> str:
        for node in self._call("GET", "/v1/nodes"):
            if node["node"] == hostname:
                for gpu in node["gpus"]:
                    if gpu["index"] == index:
                        return str(gpu["health"])
                raise HookError(f"node {hostname} has no GPU {index} in the bundled scheduler")
        raise HookError(f"node {hostname} is not registered with the bundled scheduler")

    def set_gpu_health(self, hostname: str, index: int, health: str, reason: str) -> list[str]:
        out = self._call(
            "POST",
            f"/v1/nodes/{hostname}/gpus/{index}/health",
            {"health": health, "reason": reason or "gpuwarden serve"},
        )
        return [f"job {job_id} told to checkpoint and leave" for job_id in out["evicted"]]

    def close(self) -> None:
        self._http.close()


class BundledTagger:
    """Sets each GPU's health in the bundled scheduler; only GPUs whose health differs are
    touched, so applying the same ``NodeHealth`` twice does nothing the second time."""

    name = "bundled"

    def __init__(
        self, target: GpuHealthTarget, *, dry_run: bool = False, echo: Echo = default_echo
    ) -> None:
        self.target = target
        self.dry_run = dry_run
        self._echo = echo

    @classmethod
    def from_url(cls, url: str, *, dry_run: bool = False) -> BundledTagger:
        """``bundled+http://HOST:PORT`` (or ``bundled+https://``): a scheduler service."""
        return cls(ServiceTarget(url.removeprefix("bundled+")), dry_run=dry_run)

    def apply(self, node: NodeHealth) -> TagResult:
        done: list[str] = []
        try:
            for index, state in sorted(node.gpus.items()):
                current = GpuState.parse(self.target.gpu_health(node.hostname, index))
                if current is state:
                    continue
                step = f"{node.hostname} GPU {index}: {current} -> {state}"
                if self.dry_run:
                    self._echo(f"[dry-run] bundled scheduler: set {step} ({node.reason})")
                    done.append(step)
                    continue
                evicted = self.target.set_gpu_health(node.hostname, index, str(state), node.reason)
                done.append(step + "".join(f"; {line}" for line in evicted))
        except HookError:
            raise
        except GpuwardenError as exc:
            raise HookError(f"bundled scheduler, node {node.hostname}: {exc}") from exc
        if not done:
            return TagResult(False, f"{node.hostname} already {node.state}", self.dry_run)
        return TagResult(True, "; ".join(done), self.dry_run)


__all__ = ["BundledTagger", "GpuHealthTarget", "SchedulerTarget", "ServiceTarget"]
