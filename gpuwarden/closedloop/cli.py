"""``gpuwarden evaluate closed-loop``: the four arms over simulated fleets, table and plots.

Registered under the ``evaluate`` group by the main CLI; also runs alone through ``CliRunner``.
A ``GpuwardenError`` (a bad option value, a model that will not load) becomes one line and exit
status 1.
"""

from __future__ import annotations

import os

import click

from gpuwarden.cliutil import domain_errors, progress_option
from gpuwarden.errors import InputError


def parse_shares(text: str) -> tuple[float, ...]:
    """ "0,0.3,0.5" or "0,30%,50%" -> (0.0, 0.3, 0.5)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part[:-1]) / 100 if part.endswith("%") else float(part)
        except ValueError:
            raise InputError(f"--sudden: {part!r} is not a share (0.3 or 30%)") from None
        out.append(value)
    if not out:
        raise InputError("--sudden: give at least one share, e.g. 0,0.3,0.5")
    return tuple(out)


@click.command("closed-loop")
@click.option(
    "--seeds",
    default=5,
    show_default=True,
    help="Fleets per sudden share (seeds 101.., with --family 60101..).",
)
@click.option("--days", default=90.0, show_default=True, help="Simulated days evaluated.")
@click.option("--gpus", default=512, show_default=True, help="GPUs in the fleet (8 per node).")
@click.option(
    "--sudden",
    default="0,0.3,0.5",
    show_default=True,
    help="Shares of failures with no precursor, comma-separated; one table each.",
)
@click.option(
    "--accel", default=20.0, show_default=True, help="Failure rate multiplier (the model's own)."
)
@click.option(
    "--model", "model_path", type=click.Path(exists=True), help="Model folder (default: shipped)."
)
@click.option(
    "--thermal-drift",
    default=0.0,
    show_default=True,
    help="Benign temperature drift: sd (C) per GPU on core and HBM and per node, daily knots.",
)
@click.option(
    "--family",
    is_flag=True,
    help="Members of the randomized family (seeds 60101..) instead of the default simulator.",
)
@click.option(
    "--threshold",
    type=float,
    default=None,
    help="The model arm's at-risk line (default: the model's own, from its card).",
)
@click.option(
    "--checkpoint-min", default=60.0, show_default=True, help="Training checkpoint interval."
)
@click.option(
    "--restart-min", default=15.0, show_default=True, help="Restart of an interrupted replica."
)
@click.option(
    "--jobs",
    default=min(2, os.cpu_count() or 1),
    show_default=True,
    help="Fleets simulated in parallel (worker processes).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default="closed-loop",
    show_default=True,
    help="Folder for the table, the per-seed CSV and the plots.",
)
@progress_option("A progress bar")
def closed_loop(
    seeds: int,
    days: float,
    gpus: int,
    sudden: str,
    accel: float,
    model_path: str | None,
    thermal_drift: float,
    family: bool,
    threshold: float | None,
    checkpoint_min: float,
    restart_min: float,
    jobs: int,
    out_dir: str,
    progress: bool,
) -> None:
    """No prediction, the rule baseline and the model side by side on the same simulated fleets
    and workload: inference interruptions by GPU failures, downtime, training work lost,
    capacity withheld by flags, preemptions; reductions with a 95% interval over seeds."""
    from gpuwarden.closedloop.report import render, write_report
    from gpuwarden.closedloop.run import run_closed_loop
    from gpuwarden.closedloop.workload import WorkloadSpec

    with domain_errors():
        if seeds < 1:
            raise InputError(f"--seeds must be at least 1, got {seeds}")
        if not 0 <= thermal_drift <= 10:
            raise InputError(f"--thermal-drift must be 0-10 C, got {thermal_drift}")
        result = run_closed_loop(
            seeds=seeds,
            days=days,
            gpus=gpus,
            sudden=parse_shares(sudden),
            accel=accel,
            model_path=model_path,
            workload=WorkloadSpec(checkpoint_s=checkpoint_min * 60, restart_s=restart_min * 60),
            thermal_drift_c=thermal_drift,
            threshold=threshold,
            family=family,
            jobs=jobs,
            progress=progress,
        )
        paths = write_report(result, out_dir)
    click.echo(render(result), nl=False)
    click.echo(f"wrote {', '.join(str(p) for p in paths)}")
