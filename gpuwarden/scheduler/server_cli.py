"""``gpuwarden scheduler serve`` and ``gpuwarden agent`` (registered by ``gpuwarden.cli``)."""

from __future__ import annotations

import logging
import re
import sys
import threading
from pathlib import Path
from typing import Any

import click

from gpuwarden.cliutil import domain_errors, settings
from gpuwarden.config import grid_intensity
from gpuwarden.errors import CollectorUnavailable, ConfigError
from gpuwarden.scheduler.quota import load_quotas
from gpuwarden.wording import counted


@click.group()
def scheduler() -> None:
    """Run gpuwarden's bundled GPU scheduler as a service (jobs, quotas, preemption, billing)."""


@scheduler.command("serve")
@click.option(
    "--db", "db_path", default="gpuwarden-scheduler.db", show_default=True, help="SQLite state."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=int, default=8477, show_default=True, help="Port (0: any free one).")
@click.option(
    "--quotas", "quotas_path", type=click.Path(dir_okay=False), help="TOML: [quotas.TENANT] gpus=.."
)
@click.option("--policy", default="warden", show_default=True, help="Placement policy.")
@click.option(
    "--round-every",
    "round_every_s",
    type=float,
    default=2.0,
    show_default=True,
    help="Seconds between two placement rounds with preemption.",
)
@click.option(
    "--node-timeout",
    "node_timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds without an agent sync after which a node is lost and its jobs written off.",
)
@click.option(
    "--max-queued-tasks",
    type=click.IntRange(min=1),
    default=16_384,
    show_default=True,
    help="Tasks one tenant may have queued; a submission past that is refused with a 429.",
)
@click.option(
    "--sleep",
    type=click.Choice(["off", "dry-run", "on"]),
    default="off",
    show_default=True,
    help="Idle-node sleep (docs/planning.md): dry-run only logs what it would do.",
)
@click.option("--sleep-window", default="02:00-06:00", show_default=True,
              help="When idle nodes may sleep (UTC), and all weekend.")  # fmt: skip
@click.option("--wol-broadcast", default="255.255.255.255", show_default=True,
              help="Where Wake-on-LAN packets go: the nodes' subnet broadcast address.")  # fmt: skip
@click.pass_context
def serve(
    ctx: click.Context,
    db_path: str,
    host: str,
    port: int,
    quotas_path: str | None,
    policy: str,
    round_every_s: float,
    node_timeout_s: float,
    max_queued_tasks: int,
    sleep: str,
    sleep_window: str,
    wol_broadcast: str,
) -> None:
    """Serve the scheduler API; state in --db survives restarts (even kill -9).

    Tokens come from the environment: $GPUWARDEN_SCHEDULER_TOKENS (a TOML file with a
    [tenants] table) or $GPUWARDEN_SCHEDULER_TOKENS_JSON, $GPUWARDEN_SCHEDULER_ADMIN_TOKEN,
    and $GPUWARDEN_AGENT_SECRET (or, from older setups, $GPUWARDEN_AGENT_TOKEN), the master
    secret each node's agent token is derived from (see `agent-token`).
    """
    from gpuwarden.lifecycle import wait_for_stop
    from gpuwarden.scheduler._auth import TokenBook
    from gpuwarden.scheduler.api import SchedulerServer
    from gpuwarden.scheduler.service import Principal, SchedulerService
    from gpuwarden.scheduler.sleep import SleepPolicy, SleepWindow
    from gpuwarden.scheduler.state import SchedulerDB

    with domain_errors():
        tokens = TokenBook.from_env()
        db = SchedulerDB(db_path)
        service = SchedulerService(
            db,
            policy=policy,
            round_every_s=round_every_s,
            node_timeout_s=node_timeout_s,
            max_queued_tasks=max_queued_tasks,
            grid_g_per_kwh=grid_intensity(settings(ctx)),
            sleep=None if sleep == "off" else SleepPolicy(
                SleepWindow.parse(sleep_window), dry_run=sleep == "dry-run"),
            wol_broadcast=wol_broadcast,
        )  # fmt: skip
        if quotas_path:
            for tenant, limits in load_quotas(quotas_path).items():
                service.set_quota(Principal("admin"), tenant, limits.get("gpus"),
                                  limits.get("gpu_memory_mib"), limits.get("guaranteed_gpus"))  # fmt: skip
        server = SchedulerServer(service, tokens).start(host, port)
    print(
        f"gpuwarden scheduler: {server.url} ({counted(len(tokens.tenants), 'tenant')}, db "
        f"{db_path}); Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
    for gap in tokens.gaps():  # a service nobody can use starts, but says so
        print(f"warning: {gap}", file=sys.stderr, flush=True)
    try:
        wait_for_stop()
    finally:
        server.stop()
        db.close()


@scheduler.command("agent-token")
@click.argument("node")
def agent_token(node: str) -> None:
    """Print the agent token of NODE, for $GPUWARDEN_AGENT_TOKEN on that node.

    Derived from the master secret in $GPUWARDEN_AGENT_SECRET (or $GPUWARDEN_AGENT_TOKEN) as
    the service derives it, so run it where the service's environment is. The token works for
    NODE only; the master secret itself is refused by the service.
    """
    import re

    from gpuwarden.scheduler._auth import (
        ENV_AGENT_SECRET,
        MIN_SECRET_CHARS,
        NODE_NAME,
        agent_secret_from_env,
        node_token,
    )

    if not re.fullmatch(NODE_NAME, node):
        raise click.ClickException(
            f"{node!r} is not a node name: letters, digits, '.', '_' and '-', 253 at most"
        )
    secret = agent_secret_from_env()
    if secret is None:
        raise click.ClickException(f"set {ENV_AGENT_SECRET} to the service's master secret")
    if len(secret) < MIN_SECRET_CHARS:
        raise click.ClickException(f"{ENV_AGENT_SECRET} must be {MIN_SECRET_CHARS}+ characters")
    click.echo(node_token(secret, node))


@click.command()
@click.option("--node", default="", help="This node's name (default: the hostname).")
@click.option(
    "--service", "url", default="http://127.0.0.1:8477", show_default=True, help="Scheduler URL."
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    default="gpuwarden-agent",
    show_default=True,
    help="Logs, checkpoint directories and the agent's task table.",
)
@click.option("--fake-gpus", type=int, default=None, help="Pretend to have N GPUs (no NVML).")
@click.option("--gpu-model", default="H100-80GB", show_default=True, help="Model of the fake GPUs.")
@click.option(
    "--interval", "interval_s", type=float, default=1.0, show_default=True, help="Seconds per sync."
)
@click.option(
    "--cost-class",
    type=click.Choice(["owned", "reserved", "spot"]),
    default="owned",
    show_default=True,
    help="How this node is paid for; spot nodes take only interruptible work.",
)
@click.option(
    "--reclaim-notice-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="A file a cloud hook writes a spot reclaim notice to (JSON with deadline or in_s).",
)
@click.option(
    "--model-cache",
    type=click.Path(file_okay=False),
    default=None,
    help="This node's local model-weights cache (e.g. $HF_HOME/hub), reported to placement.",
)
@click.option("--mac", default=None, help="This node's MAC address, for Wake-on-LAN.")
@click.option("--sleep-command", default=None,
              help="Run when the service puts this node to sleep, e.g. 'systemctl suspend'.")  # fmt: skip
@click.option(
    "--power-caps/--no-power-caps",
    default=False,
    show_default=True,
    help="Apply the per-class power caps and clocks through NVML (needs root); reverted at job end.",
)
@click.option(
    "--mig-gpus", default="", help="GPUs to run in MIG mode: indices like 0,1 or all (as root)."
)
@click.option(
    "--mps-control", default="nvidia-cuda-mps-control", show_default=True,
    help="The MPS control program the agent starts one daemon of per GPU running MPS shares.",
)  # fmt: skip
@click.option(
    "--driver-version", default=None, help="Driver version of the fake GPUs (with --fake-gpus)."
)
@click.option(
    "--cuda-version", default=None, help="CUDA version of the fake GPUs' driver (--fake-gpus)."
)
@click.option(
    "--cuda-compat", default=None,
    help="CUDA version of the installed forward compatibility package; default: the newest "
    "/usr/local/cuda-X.Y/compat holding libcuda.so.",
)  # fmt: skip
@click.pass_context
def agent(
    ctx: click.Context,
    node: str,
    url: str,
    workdir: str,
    fake_gpus: int | None,
    gpu_model: str,
    interval_s: float,
    mig_gpus: str,
    mps_control: str,
    driver_version: str | None,
    cuda_version: str | None,
    cuda_compat: str | None,
    cost_class: str,
    reclaim_notice_file: str | None,
    model_cache: str | None,
    power_caps: bool,
    mac: str | None,
    sleep_command: str | None,
) -> None:
    """Run a node agent: register this node's GPUs, start, checkpoint and stop tasks.

    Needs $GPUWARDEN_AGENT_TOKEN: this node's own token, from `gpuwarden scheduler
    agent-token NODE`. Tasks keep running when the service is down. Checkpoint hooks of kind
    url reach only the addresses the hook_allow setting allows (docs/security.md).
    """
    import socket

    from gpuwarden.lifecycle import wait_for_stop
    from gpuwarden.outbound import OutboundPolicy
    from gpuwarden.scheduler._agent_sharing import GpuSharing, nvml_for_mig
    from gpuwarden.scheduler.agent import (
        Agent,
        find_cuda_compat,
        hide_environment,
        host_inventory,
        with_mig,
    )
    from gpuwarden.scheduler.modelcache import CacheWatcher
    from gpuwarden.scheduler.sleep import SleepPolicy
    from gpuwarden.scheduler.spot import NoticeFile
    from gpuwarden.scheduler.wol import magic_packet

    node = node or socket.gethostname()
    with domain_errors():
        hooks = OutboundPolicy.parse(settings(ctx)["hook_allow"])
        if mac:
            magic_packet(mac)  # a bad address is an error here, not a refusal at registration
        try:
            inventory = host_inventory(
                node, fake_gpus=fake_gpus, gpu_model=gpu_model,
                versions=(driver_version, cuda_version),
                cuda_compat=cuda_compat or find_cuda_compat(),
            )  # fmt: skip
        except CollectorUnavailable as exc:
            # the collectors' advice (smi://, sim://) is no option of the agent's
            why = re.sub(r"; (?:load it or )?use \S+.*$", "", str(exc))
            raise CollectorUnavailable(
                f"{why}: the agent registers this node's GPUs through NVML "
                "(--fake-gpus N on a machine without them)"
            ) from exc
        inventory = with_mig(inventory, mig_gpus)
        gpus = inventory.gpus
        sharing = GpuSharing(
            Path(workdir), nvml=None if fake_gpus is not None else nvml_for_mig(),
            gpu_model=str(gpus[0]["model"]) if gpus else gpu_model,
            gpu_memory_mib={int(g["index"]): g.get("memory_mib") for g in gpus},
            mps_control=mps_control,
        )  # fmt: skip
        runner = Agent(
            node, url, Path(workdir), inventory, interval_s=interval_s, hook_policy=hooks,
            sharing=sharing,
            cost_class=cost_class,
            notice=NoticeFile(Path(reclaim_notice_file), node) if reclaim_notice_file else None,
            model_cache=CacheWatcher(Path(model_cache)) if model_cache else None,
            power=_power_governor() if power_caps else None,
            mac=mac,
            sleep_command=SleepPolicy.command(sleep_command) if sleep_command else (),
            meter=None if fake_gpus is not None else _meter(),
        )  # fmt: skip
    if not hide_environment():
        print(
            "gpuwarden agent: cannot make the agent non-dumpable; tasks may read its token in /proc",
            file=sys.stderr,
        )
    print(
        f"gpuwarden agent: {node} with {counted(len(inventory.gpus), 'GPU')} -> {url}; "
        "Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
    stop = threading.Event()
    failed: list[str] = []

    def run() -> None:
        try:
            runner.run(stop)
        except ConfigError as exc:  # a refused token: logged by run, and the exit says it
            failed.append(str(exc))
        except Exception as exc:  # not one to wait on forever either: exit, non-zero
            logging.getLogger("gpuwarden.scheduler.agent").exception("the agent stopped")
            failed.append(f"the agent stopped: {type(exc).__name__}: {exc}")
        finally:
            stop.set()

    thread = threading.Thread(target=run, name="gpuwarden-agent", daemon=True)
    thread.start()
    try:
        wait_for_stop(stop)
    finally:
        stop.set()
        thread.join(timeout=10)
        runner.close()
    if failed:
        raise click.ClickException(failed[0])


def _meter() -> Any:
    """The agent's utilisation and energy meter over the real NVML (None without it)."""
    from gpuwarden.collectors.libnvml import real_module
    from gpuwarden.scheduler.meter import open_meter

    return open_meter(real_module())


def _power_governor() -> Any:
    """The agent's DVFS over the real NVML (``ConfigError`` when NVML cannot start)."""
    from gpuwarden.collectors.libnvml import GpuControl, real_module
    from gpuwarden.errors import CollectorUnavailable
    from gpuwarden.scheduler.power import PowerGovernor

    try:
        return PowerGovernor(GpuControl(real_module()))
    except CollectorUnavailable as exc:
        raise ConfigError(f"--power-caps: {exc}") from exc


__all__ = ["agent", "agent_token", "load_quotas", "scheduler"]
