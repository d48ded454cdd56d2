"""``gpuwarden energy ...`` and ``gpuwarden spot ...``: what sleeping, capping and spot save.

gpuwarden energy sleep-replay --days 34          # kWh saved vs always-on, and the wait
gpuwarden energy advise samples.csv              # power caps per job class
gpuwarden energy wake 00:11:22:33:44:55          # send a Wake-on-LAN magic packet
gpuwarden spot simulate --seeds 20               # cost saved vs all on demand, work lost
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import click

from gpuwarden.cliutil import DomainErrorGroup, domain_errors
from gpuwarden.errors import InputError


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
    from gpuwarden.planning.energy import PowerModel, plot_sleep, render_sleep, replay_sleep
    from gpuwarden.scheduler import openb
    from gpuwarden.scheduler.sleep import SleepPolicy, SleepWindow

    with domain_errors():
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
    click.echo(render_sleep(on, slept, power))
    if plot:
        click.echo(f"wrote {plot_sleep(on, slept, plot)}", err=True)


@energy.command()
@click.argument("samples", type=click.Path(dir_okay=False, exists=True))
@click.option("--clock-cut", type=click.FloatRange(0, 1, max_open=True), default=0.2,
              show_default=True, help="Core clock cut to advise where it pays.")  # fmt: skip
def advise(samples: str, clock_cut: float) -> None:
    """Power caps per job class from SAMPLES, a CSV of job_class,power_w,util_pct,board_w
    (one row per GPU sample; export from the store or DCGM)."""
    from gpuwarden.planning.energy import advise as advise_class

    with domain_errors():
        power, util, board = _read_samples(Path(samples))
        rows = [advise_class(c, power[c], util[c], board[c], clock_cut=clock_cut)
                for c in sorted(power)]  # fmt: skip
    click.echo("| class | samples | mean W | mean util % | board W | cap W | clock cut | "
               "power saved | slowdown | why |")  # fmt: skip
    click.echo("|---|---|---|---|---|---|---|---|---|---|")
    for a in rows:
        cap = "-" if a.cap_w is None else f"{a.cap_w:.0f}"
        click.echo(f"| {a.job_class} | {a.gpus} | {a.mean_power_w:.0f} | {a.mean_util_pct:.0f} | "
                   f"{a.board_w:.0f} | {cap} | {a.clock_cut_pct:.0f}% | "
                   f"{a.power_saved_pct:.0f}% | {a.slowdown_pct:.0f}% | {a.why} |")  # fmt: skip


def _read_samples(
    path: Path,
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, float]]:
    power: dict[str, list[float]] = defaultdict(list)
    util: dict[str, list[float]] = defaultdict(list)
    board: dict[str, float] = {}
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        need = {"job_class", "power_w", "util_pct", "board_w"}
        if not need <= set(reader.fieldnames or ()):
            raise InputError(f"{path}: needs the columns {', '.join(sorted(need))}")
        for line, row in enumerate(reader, start=2):
            try:
                c = row["job_class"].strip()
                power[c].append(float(row["power_w"] or "nan"))
                util[c].append(float(row["util_pct"] or "nan"))
                board[c] = float(row["board_w"])
            except ValueError as exc:
                raise InputError(f"{path}:{line}: {exc}") from None
    if not power:
        raise InputError(f"{path}: no samples")
    return power, util, board


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
