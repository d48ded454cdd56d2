"""``gpuwarden plan``: demand forecasts, ``should-scale`` decisions and TCO from the command line.

Demand comes from the bundled scheduler's database (``--db``) or an openb pod list
(``--openb``). A ``GpuwardenError`` (a bad file, a bad option) becomes one line on stderr and
exit status 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from gpuwarden.cliutil import domain_errors, progress_option
from gpuwarden.errors import InputError
from gpuwarden.wording import counted

if TYPE_CHECKING:
    import pandas as pd

    from gpuwarden.planning.demand import DemandRecord

_BY = {"model": ("gpu_model",), "tenant": ("tenant",), "model+tenant": ("gpu_model", "tenant")}


def _source_options(command: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "--db",
                "db_path",
                type=click.Path(dir_okay=False),
                help="Scheduler database (`gpuwarden scheduler --db`).",
            ),
            click.option(
                "--openb",
                "openb_path",
                type=click.Path(dir_okay=False),
                help="An openb pod list (creation and deletion times) instead of a database.",
            ),
        ]
    ):
        command = option(command)
    return command


train_weeks_option = click.option(
    "--train-weeks",
    default=12,
    show_default=True,
    help="Weeks of the latest history the forecast learns from (growth reads six months).",
)


class Demand(NamedTuple):
    """A demand source read: hourly demand per group, hourly mean queue wait, GPU-hours waiting
    per hour, the jobs, and the end of the history (in the jobs' clock: unix or trace
    seconds)."""

    frame: pd.DataFrame
    waits: pd.Series
    queued: pd.Series
    records: list[DemandRecord]
    end_s: float


def load_demand(db_path: str | None, openb_path: str | None, by: tuple[str, ...]) -> Demand:
    """The demand of exactly one of the two sources."""
    import time

    from gpuwarden.planning import demand as d

    if bool(db_path) == bool(openb_path):
        raise InputError("give exactly one demand source: --db FILE or --openb FILE")
    if openb_path:
        records = d.records_from_openb(openb_path)
        lo, hi = d.openb_window(records)
        start, end = math.ceil(lo / d.HOUR_S) * d.HOUR_S, math.floor(hi / d.HOUR_S) * d.HOUR_S
        frame = d.hourly_demand(records, by=by, start_s=start, end_s=end, epoch=d.TRACE_EPOCH)
        queued = d.hourly_demand(
            d.waiting(records), by=(), start_s=start, end_s=end, epoch=d.TRACE_EPOCH
        )
        waits = d.queue_wait_hourly(records, epoch=d.TRACE_EPOCH)
        return Demand(frame, waits, queued["all"], records, end)
    assert db_path is not None
    now = time.time()
    records, frame = d.scheduler_demand(db_path, by=by, now_s=now)
    start = frame.index[0].timestamp()
    end = frame.index[-1].timestamp() + d.HOUR_S
    queued = d.hourly_demand(d.waiting(records), by=(), now_s=now, start_s=start, end_s=end)
    return Demand(frame, d.queue_wait_hourly(records), queued["all"], records, end)


@click.group("plan")
def plan() -> None:
    """Capacity planning and cost: forecast demand, decide whether to scale, compare TCO."""


@plan.command("forecast")
@_source_options
@click.option("--by", type=click.Choice(list(_BY)), default="model", show_default=True,
              help="One forecast per GPU model, tenant, or both.")  # fmt: skip
@click.option("--hours", default=168, show_default=True, help="Forecast horizon in hours.")
@click.option("--level", default=0.8, show_default=True, help="Prediction interval level.")
@click.option(
    "--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the forecast as CSV."
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    help="Write a PNG of history and forecast.",
)
@progress_option("A progress bar")
@train_weeks_option
def forecast_cmd(
    db_path: str | None,
    openb_path: str | None,
    by: str,
    hours: int,
    level: float,
    train_weeks: int,
    csv_path: str | None,
    plot_path: str | None,
    progress: bool,
) -> None:
    """Hourly GPU demand (GPU-hours requested per hour) forecast with daily and weekly
    seasonality and a prediction interval, per group; queue wait of the history."""
    import pandas as pd

    from gpuwarden.planning.forecast import forecast

    with domain_errors():
        frame, waits, queued, records, end_s = load_demand(db_path, openb_path, _BY[by])
        results = {}
        columns: Iterable[str] = list(frame.columns)
        if progress and len(frame.columns) > 1:
            from tqdm import tqdm

            columns = tqdm(list(frame.columns), desc="forecast", unit="group", leave=False)
        for col in columns:
            results[col] = forecast(frame[col].iloc[-train_weeks * 168 :], hours, level=level)
        click.echo(f"history: {len(frame)} hours from {frame.index[0]:%Y-%m-%d %H:%M} UTC")
        click.echo(f"{'group':<24} {'seasons':>8} {'now':>8} {'mean':>8} {'peak':>8} "
                   f"{'low':>8} {'high':>8}  (GPUs, next {hours} h, {level:.0%} interval)")  # fmt: skip
        for col, fc in results.items():
            seasons = "+".join("d" if p == 24 else "w" if p == 168 else str(p) for p in fc.periods)
            click.echo(
                f"{col:<24} {seasons:>8} {frame[col].iloc[-1]:>8.1f} {fc.mean.mean():>8.1f} "
                f"{fc.mean.max():>8.1f} {fc.lower.min():>8.1f} {fc.upper.max():>8.1f}"
            )
        train = queued.iloc[-train_weeks * 168 :]
        if train.any():
            q = forecast(train, hours, level=level)
            click.echo(
                f"{'queued (waiting)':<24} {'':>8} {queued.iloc[-1]:>8.1f} {q.mean.mean():>8.1f} "
                f"{q.mean.max():>8.1f} {q.lower.min():>8.1f} {q.upper.max():>8.1f}"
            )
            results["queued"] = q
            frame = frame.assign(queued=queued)
        else:
            click.echo("queued (waiting): no GPU-hour waited in the history, nothing to forecast")
        measured = waits.dropna()
        if measured.empty:
            click.echo("queue wait: no job has started yet")
        else:
            click.echo(
                f"queue wait: mean {measured.mean():.0f} s over {len(measured)} hours with "
                f"starts, last 24 h {waits.iloc[-24:].mean():.0f} s"
            )
        per_model = {c: fc.mean for c, fc in results.items() if by == "model" and c != "queued"}
        for line in wait_lines(records, end_s, frame, per_model, hours, db_path):
            click.echo(line)
        if csv_path:
            parts = [fc.frame().add_prefix(f"{col}:") for col, fc in results.items()]
            pd.concat(parts, axis=1).to_csv(csv_path, index_label="hour")
            click.echo(f"wrote {csv_path}")
        if plot_path:
            from gpuwarden.planning.plots import forecast_png

            forecast_png(frame, results, plot_path)
            click.echo(f"wrote {plot_path}")


def wait_lines(
    records: list[DemandRecord],
    end_s: float,
    frame: pd.DataFrame,
    forecasts: dict[str, pd.Series],
    hours: int,
    db_path: str | None,
) -> list[str]:
    """Hours a job waits per GPU model: measured over the history's last week, and, with a
    scheduler database and per-model forecasts, forecast by replaying them on its nodes."""
    from gpuwarden.planning.queuewait import FleetHistory, forecast_waits, measured_waits

    week_s = 7 * 86400.0
    out = ["queue wait per GPU model, hours from submission to start (p50 / p90):"]
    for stats in measured_waits(records, since_s=end_s - week_s, until_s=end_s).values():
        out.append(f"  measured, jobs submitted in the last 7 days: {stats}")
    if db_path is None:
        out.append("  forecast: replaying the forecast needs the scheduler database (--db)")
    elif not forecasts:
        out.append("  forecast: replaying the forecast needs one forecast per model (--by model)")
    else:
        try:
            history = FleetHistory.from_db(db_path, end_s)
        except InputError as exc:
            return [*out, f"  forecast: not replayed: {exc}"]
        past = {c: frame[c] for c in forecasts}
        for stats in forecast_waits(history, forecasts, past, hours).values():
            out.append(f"  forecast, jobs arriving in the next {hours} h "
                       f"(replayed on {counted(len(history.nodes), 'node')}): {stats}")  # fmt: skip
    return out


def parse_current(values: tuple[str, ...]) -> dict[str, int]:
    """``("H100=64", "A100=16")`` -> ``{"H100": 64, "A100": 16}``."""
    out = {}
    for text in values:
        model, sep, count = text.partition("=")
        if not sep or not model.strip():
            raise InputError(f"--current {text!r}: write MODEL=GPUS, e.g. H100=64")
        try:
            n = int(count)
        except ValueError:
            raise InputError(f"--current {text!r}: {count!r} is not a whole number") from None
        if n < 0:
            raise InputError(f"--current {text!r}: GPUs must be >= 0")
        out[model.strip()] = n
    return out


@plan.command("should-scale")
@_source_options
@click.option("--current", multiple=True, metavar="MODEL=GPUS",
              help="GPUs the fleet has now, per model (repeat the option).")  # fmt: skip
@click.option("--launches", "launches_path", type=click.Path(dir_okay=False),
              help="TOML file of planned launches ([[launch]] tables).")  # fmt: skip
@click.option("--growth", type=float, default=None,
              help="Monthly demand growth (0.05 = 5%); default: measured over the last 6 months.")  # fmt: skip
@click.option("--efficiency-gain", default=0.0, show_default=True,
              help="Share of GPU time saved by quantization, new engines (0.2 = 20% fewer GPUs).")  # fmt: skip
@click.option("--buffer", default=1.3, show_default=True, help="Capacity = need x buffer.")
@click.option("--basis", type=click.Choice(["mean", "peak"]), default="mean", show_default=True,
              help="Plan on each week's mean forecast hour, or its peak hour.")  # fmt: skip
@click.option("--weeks", default=12, show_default=True, help="Weeks planned ahead.")
@click.option("--lead-weeks", default=4, show_default=True,
              help="Weeks between ordering GPUs and running them.")  # fmt: skip
@click.option("--release-margin", default=0.1, show_default=True,
              help="Release only when more than this share of the fleet would stay idle.")  # fmt: skip
@click.option("--level", default=0.8, show_default=True, help="Prediction interval level.")
@click.option("--max-wait-hours", default=1.0, show_default=True,
              help="With --db: add GPUs now when the replayed forecast's p90 queue wait is "
              "longer.")  # fmt: skip
@click.option("--wait-horizon", default=168, show_default=True,
              help="With --db: hours of forecast arrivals the queue replay covers.")  # fmt: skip
@train_weeks_option
def should_scale_cmd(
    db_path: str | None,
    openb_path: str | None,
    current: tuple[str, ...],
    launches_path: str | None,
    growth: float | None,
    efficiency_gain: float,
    buffer: float,
    basis: str,
    weeks: int,
    lead_weeks: int,
    release_margin: float,
    level: float,
    max_wait_hours: float,
    wait_horizon: int,
    train_weeks: int,
) -> None:
    """Per GPU model: add N GPUs now or in K weeks, release some, or hold, with the weekly plan
    (forecast mean x growth + launches, x (1 - efficiency gain) x buffer) and, with --db, the
    queue wait of the forecast replayed through the scheduler."""
    import pandas as pd

    from gpuwarden.planning.capacity import (
        FORECAST_WEEKS,
        load_launches,
        plan_model,
        should_scale,
    )
    from gpuwarden.planning.demand import ANY_MODEL
    from gpuwarden.planning.queuewait import FleetHistory, gpus_for_wait

    with domain_errors():
        fleet = parse_current(current)
        launches = load_launches(launches_path) if launches_path else []
        if not max_wait_hours > 0 or wait_horizon < 1:
            raise InputError("--max-wait-hours must be > 0 and --wait-horizon at least 1 hour")
        demand = load_demand(db_path, openb_path, ("gpu_model",))
        frame = demand.frame
        history = None
        if db_path:
            try:
                history = FleetHistory.from_db(db_path, demand.end_s)
            except InputError as exc:  # the plan stands without the queue's evidence
                click.echo(f"queue wait: not replayed: {exc}")
        else:
            click.echo("queue wait: replaying the forecast needs the scheduler database (--db)")
        models = sorted(set(frame.columns) | {lc.gpu_model for lc in launches} | set(fleet))
        missing = [m for m in models if m not in fleet]
        if missing:
            named = [f"{m} (demand that names no one GPU model)" if m == ANY_MODEL else m
                     for m in missing]  # fmt: skip
            raise InputError(
                "say how many GPUs the fleet has of " + ", ".join(named)
                + " with --current MODEL=GPUS"
            )  # fmt: skip
        start = frame.index[-1] + pd.Timedelta(hours=1)
        for model in models:
            mp = plan_model(
                frame[model] if model in frame.columns else None, model, fleet[model],
                start=start, growth=growth, launches=launches, efficiency_gain=efficiency_gain,
                buffer=buffer, basis="peak" if basis == "peak" else "mean", weeks=weeks,
                lead_weeks=lead_weeks, release_margin=release_margin, level=level,
                train_weeks=train_weeks,
            )  # fmt: skip
            rate, needs, decision = mp.growth, mp.needs, mp.decision
            if history is not None and mp.forecast is not None and history.nodes:
                queue = gpus_for_wait(history, {model: mp.forecast.mean}, {model: frame[model]},
                                      wait_horizon, model, max_wait_hours)  # fmt: skip
                decision = should_scale(needs, fleet[model], model, lead_weeks=lead_weeks,
                                        release_margin=release_margin, queue=queue)  # fmt: skip
            note = "set" if growth is not None else "measured" if rate is not None else "unknown"
            click.echo(f"{model}: growth {0.0 if rate is None else rate:+.1%}/month ({note}), "
                       f"buffer x{buffer}, efficiency gain {efficiency_gain:.0%}")  # fmt: skip
            click.echo(f"  {'week':>4} {'starts':>10} {'forecast':>9} {'launches':>9} {'need':>7}")
            for n in needs:
                click.echo(f"  {n.week:>4} {n.start!s:>10} {n.base_gpus:>9.1f} "
                           f"{n.launch_gpus:>9.1f} {n.need_gpus:>7.1f}")  # fmt: skip
            if len(needs) > FORECAST_WEEKS:
                click.echo(f"  (the forecast covers weeks 0-{FORECAST_WEEKS - 1}; later weeks "
                           f"carry week {FORECAST_WEEKS - 1}'s on at the growth above)")  # fmt: skip
            click.echo(f"  -> {decision}")


@plan.command("tco")
@click.option("--prices", "prices_path", type=click.Path(dir_okay=False),
              help="Price file (TOML); default: the shipped, dated and sourced prices.")  # fmt: skip
@click.option(
    "--gpu", "gpus", multiple=True, help="GPU model(s) to price (default: all in the file)."
)
@click.option("--chart-dir", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Folder for the tco-MODEL.png charts.")  # fmt: skip
@_source_options
@click.option("--demand-model", help="Column of the demand to split (default: all demand summed).")
def tco_cmd(
    prices_path: str | None,
    gpus: tuple[str, ...],
    chart_dir: str,
    db_path: str | None,
    openb_path: str | None,
    demand_model: str | None,
) -> None:
    """Cost per used GPU-hour of owning, bare-metal rental and cloud (reserved, on-demand,
    spot) against utilisation; break-even utilisation; with a demand source, the split into
    base load to own and an elastic part for cloud."""
    from gpuwarden.planning.tco import (
        GUIDE_HIGH,
        GUIDE_LOW,
        OPTIONS,
        TABLE_UTILISATION,
        chart,
        load_prices,
        split,
    )

    with domain_errors():
        table = load_prices(prices_path)
        chosen = list(gpus) or list(table)
        unknown = [g for g in chosen if g not in table]
        if unknown:
            raise InputError(f"no prices for {', '.join(unknown)}; the file has {', '.join(table)}")
        demand = None
        if db_path or openb_path:
            frame = load_demand(db_path, openb_path, ("gpu_model",)).frame
            if demand_model and demand_model not in frame.columns:
                raise InputError(
                    f"no demand for {demand_model!r}; there is {', '.join(frame.columns)}"
                )
            demand = frame[demand_model] if demand_model else frame.sum(axis=1)
        Path(chart_dir).mkdir(parents=True, exist_ok=True)
        for model in chosen:
            p = table[model]
            click.echo(f"{model}: USD per used GPU-hour by yearly utilisation")
            click.echo("  " + f"{'option':<16}" + "".join(f"{u:>8.0%}" for u in TABLE_UTILISATION))
            for option in OPTIONS:
                row = "".join(f"{p.per_used_hour(option, u):>8.2f}" for u in TABLE_UTILISATION)
                click.echo(f"  {option.replace('_', ' '):<16}{row}")
            for option in ("own", "bare_metal", "cloud_reserved"):
                be = p.break_even(option)
                text = "never within 0-100%" if be is None else f"{be:.0%}"
                click.echo(f"  break-even {option.replace('_', ' ')} vs cloud on-demand: {text}")
            od = p.on_demand.value
            own30 = p.per_used_hour("own", GUIDE_LOW)
            click.echo(
                "  guideline (owning is 40-60% cheaper above 70% use): own at 70% is "
                f"{p.own_against_on_demand(GUIDE_HIGH)} than on-demand; "
                f"at 30% {'cloud' if od < own30 else 'owning'} is cheaper "
                f"({own30:.2f} own vs {od:.2f} on-demand)"
            )
            if demand is not None:
                s = split(demand.to_numpy(), p)
                click.echo(
                    f"  split: own or rent long-term {counted(s.base_gpus, 'GPU')} (base load, "
                    f"{s.base_share_of_hours:.0%} of the GPU-hours); {s.elastic_gpus} more "
                    f"(up to the p99 peak of {s.peak_gpus}) on cloud spot or on-demand"
                )
            path = chart(p, Path(chart_dir) / f"tco-{model}.png")
            click.echo(f"  wrote {path}")


COMMANDS = (plan,)
