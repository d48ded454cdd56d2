"""``gpuwarden energy ...`` and ``gpuwarden spot ...``: what sleeping, capping and spot save.

gpuwarden energy sleep-replay --days 34          # kWh saved vs always-on, and the wait
gpuwarden energy advise --store URL             # power caps per job class, from the store
gpuwarden energy advise samples.csv              # ... or from a CSV of samples
gpuwarden energy wake 00:11:22:33:44:55          # send a Wake-on-LAN magic packet
gpuwarden spot simulate --seeds 20               # cost saved vs all on demand, work lost
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gpuwarden.cliutil import DomainErrorGroup, domain_errors, open_store, settings, store_option


@click.group(cls=DomainErrorGroup)
def energy() -> None:
    """Energy: idle-node sleep, power caps and clocks, Wake-on-LAN (docs/planning.md)."""


@energy.command("sleep-replay")
@click.option("--nodes", "nodes_path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="openb node list (default: the shared data's).")  # fmt: skip
@click.option("--pods", "pods_path", type=click.Path(dir_okay=False, exists=True), default=None,
              help="openb pod list with creation/deletion times (default: the default trace).")  # fmt: skip
@click.option("--days", type=click.FloatRange(0, min_open=True), default=None,
              help="Replay only this many days.")  # fmt: skip
@click.option(
    "--window", default="02:00-06:00", show_default=True, help="Sleep window, HH:MM-HH:MM."
)
@click.option("--weekends/--no-weekends", default=True, show_default=True,
              help="Also sleep all weekend.")  # fmt: skip
@click.option("--below", type=click.FloatRange(0, 1), default=0.2, show_default=True,
              help="Utilisation under which a node may sleep.")  # fmt: skip
@click.option("--headroom-gpus", type=click.IntRange(0), default=8, show_default=True,
              help="Idle GPUs the awake nodes keep.")  # fmt: skip
@click.option("--cold-start", "cold_start_s", type=click.FloatRange(0), default=180.0,
              show_default=True, help="Seconds from the magic packet to taking work.")  # fmt: skip
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Also draw fleet power and nodes asleep over the replay to this PNG.")  # fmt: skip
def sleep_replay(
    nodes_path: str | None,
    pods_path: str | None,
    days: float | None,
    window: str,
    weekends: bool,
    below: float,
    headroom_gpus: int,
    cold_start_s: float,
    plot: str | None,
) -> None:
    """Replay a real trace always-on and with idle-node sleep; print kWh and queue wait."""
    from gpuwarden.planning.energy import (
        DEFAULT_TRACE,
        PowerModel,
        plot_sleep,
        render_sleep,
        replay_sleep,
    )
    from gpuwarden.scheduler import openb
    from gpuwarden.scheduler.sleep import SleepPolicy, SleepWindow

    with domain_errors():
        if nodes_path is None or pods_path is None:
            default_nodes, default_pods = openb.default_paths()
        nodes = openb.load_nodes(nodes_path or default_nodes)
        pods = openb.load_pods(pods_path or default_pods)
        policy = SleepPolicy(SleepWindow.parse(window, weekends=weekends), below=below,
                             headroom_gpus=headroom_gpus, cold_start_s=cold_start_s,
                             dry_run=False)  # fmt: skip
        power = PowerModel()
        bar: Any
        with click.progressbar(length=2, label="replaying", file=sys.stderr) as bar:
            on = replay_sleep(nodes, pods, None, power=power, days=days)
            bar.update(1)
            slept = replay_sleep(nodes, pods, policy, power=power, days=days)
            bar.update(1)
    trace = DEFAULT_TRACE if pods_path is None else Path(pods_path).name
    click.echo(render_sleep(on, slept, power, trace))
    if plot:
        click.echo(f"wrote {plot_sleep(on, slept, plot, trace)}", err=True)


@energy.command()
@click.argument("samples", type=click.Path(dir_okay=False, exists=True), required=False)
@store_option
@click.option("--days", type=click.FloatRange(0, min_open=True), default=7.0, show_default=True,
              help="Read the store's last DAYS.")  # fmt: skip
@click.option("--scheduler-db", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Job classes from the bundled scheduler's database (its jobs' priority); "
                   "without it, the store's Kubernetes namespaces.")  # fmt: skip
@click.option("--clock-cut", type=click.FloatRange(0, 1, max_open=True), default=0.2,
              show_default=True, help="Core clock cut to advise where it pays.")  # fmt: skip
@click.pass_context
def advise(
    ctx: click.Context,
    samples: str | None,
    store_url: str | None,
    days: float,
    scheduler_db: str | None,
    clock_cut: float,
) -> None:
    """Power caps per job class from measured power and utilisation: the store's last DAYS
    (``--store``, default the ``store`` setting), or SAMPLES, a CSV of
    job_class,power_w,util_pct,board_w (one row per GPU sample)."""
    import time

    from gpuwarden.planning import energy_samples

    with domain_errors():
        if samples is not None:
            if store_url or scheduler_db:
                raise click.UsageError("give SAMPLES or --store/--scheduler-db, not both")
            got = energy_samples.read_csv(Path(samples))
        else:
            store = open_store(store_url, settings(ctx))
            try:
                end = time.time()
                got = energy_samples.from_store(store, end - days * 86_400.0, end,
                                                scheduler_db=scheduler_db)  # fmt: skip
            finally:
                store.close()
        rows = got.advice(clock_cut=clock_cut)
    click.echo(energy_samples.render(rows))
    click.echo(f"classes from {got.source}", err=True)


@energy.command()
@click.argument("mac")
@click.option("--broadcast", default="255.255.255.255", show_default=True,
              help="Broadcast address of the node's subnet.")  # fmt: skip
@click.option("--port", type=click.IntRange(1, 65535), default=9, show_default=True)
def wake(mac: str, broadcast: str, port: int) -> None:
    """Send MAC's Wake-on-LAN magic packet."""
    from gpuwarden.scheduler.wol import send_magic_packet

    with domain_errors():
        send_magic_packet(mac, host=broadcast, port=port)
    click.echo(f"sent the magic packet for {mac} to {broadcast}:{port}")


@click.group(cls=DomainErrorGroup)
def spot() -> None:
    """Spot and hybrid capacity (docs/planning.md)."""


@spot.command()
@click.option("--owned", type=click.IntRange(1), default=16, show_default=True, help="Owned nodes.")
@click.option("--spot-nodes", type=click.IntRange(0), default=16, show_default=True,
              help="Spot nodes.")  # fmt: skip
@click.option("--days", type=click.FloatRange(0, min_open=True), default=30.0, show_default=True)
@click.option("--discount", type=click.FloatRange(0, 1, max_open=True), default=0.65,
              show_default=True, help="Spot price below on demand.")  # fmt: skip
@click.option("--bucket", "buckets", multiple=True,
              help="Spot Instance Advisor interruption bucket(s) (default: all).")  # fmt: skip
@click.option("--seeds", type=click.IntRange(1), default=10, show_default=True)
def simulate(
    owned: int, spot_nodes: int, days: float, discount: float, buckets: tuple[str, ...], seeds: int
) -> None:
    """Run the closed-loop workload on a hybrid fleet: cost saved vs all on demand, and the work
    lost and delay that spot reclaims cost, per published interruption rate."""
    from gpuwarden.closedloop.spot import ADVISOR_BUCKETS, SpotScenario, compare, render

    with domain_errors():
        sc = SpotScenario(owned_nodes=owned, spot_nodes=spot_nodes, days=days,
                          spot_discount=discount)  # fmt: skip
        chosen = list(buckets) or list(ADVISOR_BUCKETS)
        rows = compare(sc, chosen, range(1, seeds + 1))
    click.echo(render(rows, sc, seeds))


__all__ = ["energy", "spot"]
