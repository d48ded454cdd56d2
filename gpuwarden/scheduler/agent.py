"""The node agent: registers a node with the scheduler service, then syncs every second.

    gpuwarden agent --node n1 --service http://10.0.0.5:8477 --workdir /var/lib/gpuwarden-agent
    gpuwarden agent --node n1 --fake-gpus 4 --gpu-model H100-80GB --workdir /tmp/n1   # no GPUs

Each sync reports every task's state, exit code and newest checkpoint file, plus new log text,
and gets back what to start, checkpoint and stop (docs/scheduler.md). The agent survives the
service being down: its tasks keep running and it retries until the service answers again.
A token the service refuses (401, 403) is not an outage: ``run`` raises ``ConfigError`` saying
so, and the command exits non-zero (its tasks keep running, and a restarted agent adopts them).
Nor does it need to outlive its tasks: each runs under ``_task_wrapper``, which writes the exit
status under ``WORKDIR/tasks``, so an agent restarted on the same ``--workdir`` adopts them and
reports how they ended.
GPUs come from NVML through ``gpuwarden.collectors`` unless ``--fake-gpus`` is given.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from gpuwarden.collectors.base import Collector
from gpuwarden.errors import CollectorError, ConfigError, InputError
from gpuwarden.outbound import OutboundPolicy
from gpuwarden.scheduler._agent_sharing import GpuSharing
from gpuwarden.scheduler._agent_tasks import TaskTable
from gpuwarden.scheduler.meter import GpuMeter
from gpuwarden.scheduler.modelcache import CacheWatcher
from gpuwarden.scheduler.power import PowerGovernor
from gpuwarden.scheduler.resources import GPU_MEMORY_MIB
from gpuwarden.scheduler.spot import NoticeFile, ReclaimNotice
from gpuwarden.wording import plural

logger = logging.getLogger("gpuwarden.scheduler.agent")

ENV_AGENT_TOKEN = "GPUWARDEN_AGENT_TOKEN"


@dataclass(frozen=True)
class Inventory:
    """What the agent registers: allocatable CPU (milli-cores), memory (MiB) and GPUs."""

    cpu_milli: int
    memory_mib: int
    gpus: tuple[dict[str, Any], ...]

    def body(self) -> dict[str, Any]:
        return {"cpu_milli": self.cpu_milli, "memory_mib": self.memory_mib, "gpus": list(self.gpus)}


def host_inventory(
    node: str,
    *,
    fake_gpus: int | None,
    gpu_model: str,
    collector: Collector | None = None,
    versions: tuple[str | None, str | None] = (None, None),
    cuda_compat: str | None = None,
) -> Inventory:
    """This machine's CPUs and memory, and its GPUs from NVML (or ``fake_gpus`` of
    ``gpu_model``, whose driver and CUDA ``versions`` are given; ``collector`` replaces
    ``nvml://`` in tests), each with the driver and CUDA versions placement checks jobs
    against and the CUDA version of a forward compatibility package (``cuda_compat``). Command
    line equivalent: ``nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version``."""
    cpu = (os.cpu_count() or 1) * 1000
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    if fake_gpus is not None:
        mem = GPU_MEMORY_MIB.get(gpu_model)
        env = _versions(*versions, cuda_compat)
        gpus = tuple({"index": i, "uuid": f"GPU-fake-{node}-{i}", "model": gpu_model,
                      "memory_mib": mem, **env} for i in range(fake_gpus))  # fmt: skip
        return Inventory(cpu, memory, gpus)
    from gpuwarden.collectors import open_collector

    collector = collector or open_collector(f"nvml://?hostname={node}")
    try:
        batch = collector.collect()
    except CollectorError as exc:
        raise ConfigError(f"cannot read this node's GPUs ({exc}); use --fake-gpus N") from exc
    finally:
        collector.close()
    seen: dict[int, dict[str, Any]] = {}
    info = next(iter(batch.nodes), None)  # the collectors' NodeInfo: driver and CUDA versions
    driver, cuda = (info.driver_version, info.cuda_driver_version) if info else (None, None)
    env = _versions(driver, cuda, cuda_compat)
    for s in batch.samples:
        total = s.values.get("fb_total_mib")
        seen[s.gpu.index] = {"index": s.gpu.index, "uuid": s.gpu.uuid, "model": s.gpu.model,
                             "memory_mib": int(total) if total and total == total else None,
                             **env}  # fmt: skip
    return Inventory(cpu, memory, tuple(seen[i] for i in sorted(seen)))


def with_mig(inventory: Inventory, spec: str) -> Inventory:
    """``inventory`` with the GPUs ``spec`` names ("0,1", "all", "" for none) registered in MIG
    mode: the scheduler places only MIG profiles there, and the agent turns MIG on at the
    first instance (root, an idle GPU; docs/sharing.md). ``ConfigError`` for a GPU it lacks."""
    if not spec.strip():
        return inventory
    have = {int(g["index"]) for g in inventory.gpus}
    if spec.strip() == "all":
        wanted = have
    else:
        try:
            wanted = {int(part) for part in spec.split(",") if part.strip()}
        except ValueError:
            raise ConfigError(f"--mig-gpus must be GPU indices like 0,1 or all: {spec!r}") from None
    if wanted - have:
        raise ConfigError(
            f"--mig-gpus names {plural(len(wanted - have), 'GPU')} {sorted(wanted - have)} this node lacks"
        )
    gpus = tuple({**g, "mode": "mig"} if g["index"] in wanted else g for g in inventory.gpus)
    return Inventory(inventory.cpu_milli, inventory.memory_mib, gpus)


def _versions(driver: str | None, cuda: str | None, compat: str | None) -> dict[str, str]:
    """The version fields a GPU registers with; unknown ones are left out, never ""."""
    got = {"driver_version": driver, "cuda_version": cuda, "cuda_compat": compat}
    return {k: v for k, v in got.items() if v}


def find_cuda_compat(root: Path = Path("/usr/local")) -> str | None:
    """The newest CUDA version whose forward compatibility package is installed: the
    ``cuda-compat-X-Y`` package puts ``libcuda.so.*`` in ``/usr/local/cuda-X.Y/compat``."""
    found = []
    for d in root.glob("cuda-*/compat"):
        version = d.parent.name.removeprefix("cuda-")
        parts = version.split(".")
        if all(p.isdigit() for p in parts) and any(d.glob("libcuda.so*")):
            found.append((tuple(int(p) for p in parts), version))
    return max(found)[1] if found else None


#: prctl(2) option that makes a process's /proc files root's (and stops core dumps, ptrace)
PR_SET_DUMPABLE = 4


def hide_environment() -> bool:
    """Make this process non-dumpable, so a task running as the same user cannot read the
    agent token from ``/proc/<agent pid>/environ`` (stripping it from the task's own
    environment does not hide the parent's). Linux only; False where it cannot be done. A task
    running as root still can: run tasks as another user where that matters."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class Agent:
    """Registers ``node`` with the service at ``url`` and runs what it says, every ``interval_s``.
    ``hook_policy``: where checkpoint hooks of kind ``url`` may POST (setting ``hook_allow``).
    ``power``: caps and clocks per job class, applied at task start and reverted at its end
    (``power.py``). ``notice``: a file a cloud hook writes a spot reclaim notice to
    (``spot.py``); the agent forwards it to the service, which checkpoints and requeues.
    ``cost_class``: owned, reserved or spot, registered with the node. ``model_cache``: the
    local weights cache, reported when it changes (``modelcache.py``). ``meter``: the GPUs'
    utilisation and energy, sampled every step and sent with each sync (``meter.py``); None
    where there is no NVML (``--fake-gpus``): the service then judges the node by allocation."""

    def __init__(
        self,
        node: str,
        url: str,
        workdir: Path,
        inventory: Inventory,
        *,
        token: str | None = None,
        interval_s: float = 1.0,
        kill_after_s: float = 5.0,
        hook_policy: OutboundPolicy | None = None,
        sharing: GpuSharing | None = None,
        power: PowerGovernor | None = None,
        notice: NoticeFile | None = None,
        cost_class: str = "owned",
        model_cache: CacheWatcher | None = None,
        mac: str | None = None,
        sleep_command: Sequence[str] = (),
        meter: GpuMeter | None = None,
    ) -> None:
        self.node = node or socket.gethostname()
        self.url = url.rstrip("/")
        self.inventory = inventory
        self.interval_s = interval_s
        token = token if token is not None else os.environ.get(ENV_AGENT_TOKEN)
        if not token:
            raise ConfigError(f"set {ENV_AGENT_TOKEN} to the scheduler service's agent token")
        self._http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        workdir.mkdir(parents=True, exist_ok=True)
        self.sharing = sharing
        self.tasks = TaskTable(workdir, kill_after_s=kill_after_s, hook_policy=hook_policy,
                               sharing=sharing, n_gpus=len(inventory.gpus))  # fmt: skip
        self.registered = False
        self._down_since: float | None = None
        self.power = power
        self.notice = notice
        self.cost_class = cost_class
        self.model_cache = model_cache
        self.mac = mac
        self.sleep_command = tuple(sleep_command)
        self._pending_notice: ReclaimNotice | None = None
        self.meter = meter
        if meter is None:
            logger.warning("%s: GPU utilisation and energy not measured (no NVML)", self.node)

    def run(self, stop: threading.Event | None = None) -> None:
        """Register and sync until ``stop`` is set (Ctrl-C in the command). ``ConfigError``
        when the service refuses the agent's token: retrying would never help."""
        stop = stop or threading.Event()
        while not stop.is_set():
            began = time.monotonic()
            try:
                self.step()
            except ConfigError as exc:
                logger.error("%s", exc)
                raise
            stop.wait(max(0.0, self.interval_s - (time.monotonic() - began)))

    def step(self) -> None:
        """One round: poll processes, sync, carry out the orders. Never raises for the service
        being away; the next step tries again. ``ConfigError`` when the token is refused."""
        self.tasks.poll()
        if self.power is not None:
            self.power.settle(k for k, t in self.tasks.tasks.items() if t.state != "exited")
        self._read_notice()
        if self.meter is not None:
            self.meter.sample()
        try:
            if self._pending_notice is not None and self.registered:
                n = self._pending_notice
                self._post(f"/v1/agents/{self.node}/reclaim",
                           {"deadline": n.deadline, "reason": n.reason})  # fmt: skip
                self._pending_notice = None
            if not self.registered:
                body = {**self.inventory.body(), "cost_class": self.cost_class}
                if self.mac:
                    body["mac"] = self.mac
                if self.model_cache is not None:
                    self.model_cache.forget()
                    body["models"] = self.model_cache.poll()
                self._post(f"/v1/agents/{self.node}/register", body)
                self.registered = True
                logger.warning("registered %s with %s", self.node, self.url)
            report = self.tasks.report()
            body = {"tasks": report["tasks"],
                    "logs": [{k: v for k, v in c.items() if k != "size"} for c in report["logs"]]}  # fmt: skip
            models = self.model_cache.poll() if self.model_cache is not None else None
            if models is not None:
                body["models"] = models
            if self.meter is not None:
                body["gpus"] = self.meter.report()
            orders = self._post(f"/v1/agents/{self.node}/sync", body)
        except _ServiceAway as exc:
            if self.model_cache is not None:
                self.model_cache.forget()  # the service may not have its list: send it again
            if self._down_since is None:
                self._down_since = time.monotonic()
                logger.warning("scheduler service unavailable (%s); tasks keep running", exc)
            return
        if self._down_since is not None:
            logger.warning(
                "scheduler service back after %.0f s", time.monotonic() - self._down_since
            )
            self._down_since = None
        self.tasks.acknowledged(report)
        if self.meter is not None:
            self.meter.acknowledged()
        for order in orders.get("start", ()):
            self.tasks.start(order)
            if self.power is not None:
                key = (order["job_id"], int(order["attempt"]), int(order["task"]))
                self.power.apply(key, order.get("gpus", ()), str(order.get("priority", "")))
        for order in orders.get("checkpoint", ()):
            self.tasks.checkpoint(order)
        for order in orders.get("stop", ()):
            self.tasks.stop(order)
        if orders.get("sleep"):
            self._go_to_sleep()

    def _go_to_sleep(self) -> None:
        """The service put this node to sleep (it is drained): run the sleep command."""
        if not self.sleep_command:
            logger.warning("the service put %s to sleep, but no --sleep-command is set", self.node)
            return
        logger.warning("going to sleep: %s", " ".join(self.sleep_command))
        try:
            subprocess.run(self.sleep_command, check=False, timeout=60)  # noqa: S603
        except (OSError, subprocess.TimeoutExpired) as exc:
            logger.error("sleep command failed: %s", exc)

    def _read_notice(self) -> None:
        if self.notice is None:
            return
        try:
            got = self.notice.poll()
        except InputError as exc:
            logger.error("%s", exc)
            return
        if got is not None:
            logger.warning("reclaim notice: %s at %.0f (%s)", got.node, got.deadline, got.reason)
            self._pending_notice = got

    def close(self) -> None:
        self._http.close()
        if self.meter is not None:
            self.meter.close()
        if self.sharing is not None:
            self.sharing.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise _ServiceAway(str(exc) or type(exc).__name__) from exc
        if r.status_code in (401, 403):
            raise ConfigError(
                f"the scheduler service at {self.url} refused this agent's token "
                f"(HTTP {r.status_code}: {_detail(r)}); set {ENV_AGENT_TOKEN} to the token "
                f"`gpuwarden scheduler agent-token {self.node}` prints on the service host"
            )
        if r.status_code == 404 and path.endswith("/sync"):
            self.registered = False  # the service lost this node (a new database): register again
        if r.status_code >= 400:
            raise _ServiceAway(f"{path}: HTTP {r.status_code}: {r.text[:200]}")
        result: dict[str, Any] = r.json()
        return result


def _detail(r: httpx.Response) -> str:
    """The service's reason for a refusal (its JSON ``detail``), short."""
    try:
        detail = r.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail if detail is not None else r.text)[:200]


class _ServiceAway(Exception):
    """The service did not take a request; the agent retries next round."""


__all__ = ["Agent", "Inventory", "find_cuda_compat", "host_inventory", "with_mig"]
