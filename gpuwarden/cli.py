"""The ``gpuwarden`` command line.

Every command reads its defaults from the settings (``gpuwarden config`` shows them); options
on the command line win. A ``GpuwardenError`` (a user mistake or a source that is not there)
becomes one line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuwarden import __version__
from gpuwarden.cliutil import (
    DomainErrorGroup,
    collector_option,
    domain_errors,
    maybe_time,
    open_collector,
    open_store,
    progress_option,
    settings,
    spool_options,
    spool_summary,
    spooled,
    store_option,
)
from gpuwarden.cliutil import collector_url as _collector_url  # noqa: F401  (tests/test_cli.py)
from gpuwarden.config import SETTINGS, load_settings, parse_listen, redact_url
from gpuwarden.wording import counted

if TYPE_CHECKING:
    from gpuwarden.collectors.memory_errors import EventWriter
    from gpuwarden.store.base import Store


@click.group(cls=DomainErrorGroup)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML settings file (default: $GPUWARDEN_CONFIG or /etc/gpuwarden/gpuwarden.toml).",
)
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.version_option(__version__, prog_name="gpuwarden")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, verbose: int) -> None:
    """Watch every GPU, predict which ones are about to fail, and move them to interruptible work."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with domain_errors():
        ctx.obj = load_settings(config_path)
        from gpuwarden.health import use_at_risk_threshold, use_xid_severity

        use_xid_severity(ctx.obj.get("xid_severity") or None)
        use_at_risk_threshold(ctx.obj.get("at_risk_threshold") or None)
        link_rules = str(ctx.obj.get("link_rules", "on")).strip()
        if link_rules not in ("", "on"):  # the default needs no import (pandas) at start
            from gpuwarden.models.rules import use_link_rules

            use_link_rules(link_rules)
        from gpuwarden import tuning

        tuning.apply(ctx.obj)


@main.command()
def fields() -> None:
    """List the telemetry catalogue: our names, dcgm-exporter names, kinds, units, DCGM value
    types and the readings each field can take (anything else is stored as missing)."""
    from gpuwarden.readings import plausible
    from gpuwarden.telemetry import FIELDS

    width = max(len(f.name) for f in FIELDS)
    dwidth = max(len(f.dcgm) for f in FIELDS)
    valid = {f.name: plausible(f) for f in FIELDS}
    vwidth = max(len("READINGS"), *map(len, valid.values()))
    click.echo(
        f"{'FIELD':<{width}}  {'DCGM-EXPORTER METRIC':<{dwidth}}  {'KIND':<7}  {'UNIT':<7}  "
        f"{'TYPE':<5}  {'READINGS':<{vwidth}}  DESCRIPTION"
    )
    for f in FIELDS:
        resets = " (resets on driver reload)" if f.resets else ""
        click.echo(
            f"{f.name:<{width}}  {f.dcgm:<{dwidth}}  {f.kind:<7}  {f.unit:<7}  {f.dcgm_type:<5}  "
            f"{valid[f.name]:<{vwidth}}  {f.help}{resets}"
        )


@main.command("config")
@click.pass_context
def show_config(ctx: click.Context) -> None:
    """Show every setting, its effective value and where to set it (passwords in URLs
    masked, as in logs and /metrics)."""
    values = settings(ctx)
    for s in SETTINGS:
        value = values[s.name]
        shown = redact_url(value) if isinstance(value, str) else value
        click.echo(f"{s.name} = {shown!r}    # {s.help} [{s.env}]")


@main.command()
@collector_option
@store_option
@click.option("--interval", "interval_s", type=float, help="Seconds between collections.")
@click.option(
    "--iterations", type=int, default=None, help="Stop after N collections (default: run forever)."
)
@spool_options
@click.pass_context
def collect(
    ctx: click.Context,
    collector_url: str | None,
    store_url: str | None,
    interval_s: float | None,
    iterations: int | None,
    spool_dir: str | None,
    spool_max_mb: float,
    spool_max_age: str,
) -> None:
    """Run a collector into a store on an interval; survives collector errors, and with
    --spool keeps every batch on disk while the store is down."""
    from gpuwarden.collect import CollectLoop

    cfg = settings(ctx)
    collector = open_collector(collector_url, cfg)
    try:
        store = spooled(open_store(store_url, cfg), spool_dir, spool_max_mb, spool_max_age)
    except BaseException:
        collector.close()
        raise
    loop = CollectLoop(
        collector,
        store,
        interval_s=cfg["interval_s"] if interval_s is None else interval_s,
        compact_every_s=cfg["compact_every_s"],
    )
    try:
        stats = loop.run(iterations)
    except KeyboardInterrupt:
        stats = loop.stats
    finally:
        collector.close()
        store.close()
    problems = (
        f", {counted(stats.problem_count, 'collector problem')}" if stats.problem_count else ""
    )
    click.echo(
        f"{counted(stats.ticks, 'collection')}: {counted(stats.samples, 'sample')}, "
        f"{counted(stats.events, 'event')}, {counted(stats.collect_errors, 'collector error')}"
        f"{problems}, {counted(stats.store_errors, 'store error')}" + spool_summary(store)
    )
    if (
        iterations is not None
        and not stats.samples
        and not stats.events  # kmsg:// and journal:// give events only
        and (stats.collect_errors or stats.problem_count)
    ):
        # a bounded run (cron, a check) that read nothing: say so in the exit status
        raise click.ClickException(
            "no sample or event collected: the collector failed or reported problems every "
            "time (see the warnings above)"
        )


@main.command()
@collector_option
@click.option("--listen", help="HOST:PORT to serve /metrics on (default: setting `listen`).")
@click.option("--interval", "interval_s", type=float, help="Seconds between collections.")
@click.option(
    "--store", "store_url", default=None, help="Also write every collection into this store."
)
@click.pass_context
def exporter(
    ctx: click.Context,
    collector_url: str | None,
    listen: str | None,
    interval_s: float | None,
    store_url: str | None,
) -> None:
    """Serve /metrics for any collector, with dcgm-exporter names plus gpuwarden_* series."""
    from gpuwarden.exporter import run_exporter

    cfg = settings(ctx)
    host, port = parse_listen(listen or cfg["listen"])
    collector = open_collector(collector_url, cfg)
    store = open_store(store_url, cfg) if store_url else None
    try:
        run_exporter(collector, host, port, interval_s or cfg["interval_s"], store=store)
    finally:
        collector.close()
        if store is not None:
            store.close()


@main.command()
@store_option
@click.option(
    "--telemetry",
    "telemetry_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Telemetry CSV (.csv, .csv.gz) or Parquet file; repeatable.",
)
@click.option(
    "--xids",
    "xid_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Xid events CSV: timestamp,hostname,gpu,UUID,xid; repeatable.",
)
@click.option(
    "--failures",
    "failure_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Failures CSV: timestamp,hostname,gpu,UUID,kind; repeatable.",
)
@click.option(
    "--kernel-log",
    "kernel_logs",
    multiple=True,
    type=click.Path(),
    help="Kernel log with NVRM Xid / SXid lines: dmesg, dmesg -T, syslog, journalctl -k, "
    "journalctl -o json or -o export, or a journal file or directory; repeatable. Loaded after the other files, so their GPUs' PCI bus ids are known.",
)
@click.option(
    "--smi-csv",
    "smi_csvs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="nvidia-smi's own log, --query-gpu=timestamp,uuid,... --format=csv[,nounits] "
    "(a header row; times read as UTC); repeatable. Its GPUs belong to --host.",
)
@click.option(
    "--smi-q",
    "smi_qs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="nvidia-smi -q output, as text or XML (-q -x), one or a log of -q -l N (times read "
    "as UTC); repeatable. Its GPUs belong to --host.",
)
@click.option(
    "--line-protocol",
    "line_protocols",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="InfluxDB line protocol as Telegraf writes it (its nvidia_smi input, or dcgm-exporter "
    "through its prometheus input): a file output or an InfluxDB export; repeatable. Points "
    "without a host tag belong to --host.",
)
@click.option(
    "--influxql",
    "influxqls",
    multiple=True,
    metavar="URL",
    help="An InfluxDB 1.x database Telegraf writes GPU telemetry to, read over InfluxQL: "
    "influxql://HOST:8086?db=telegraf (influxql+https://, user:password@, &rp=POLICY; or "
    "$GPUWARDEN_INFLUX_TOKEN); --since to --until; repeatable.",
)
@click.option(
    "--since",
    default=None,
    metavar="TIME",
    help="Start of what --influxql reads (RFC 3339 or Unix s; default: 30 days before --until).",
)
@click.option(
    "--until", default=None, metavar="TIME", help="End of what --influxql reads (default: now)."
)
@click.option(
    "--precision",
    type=click.Choice(["ns", "us", "ms", "s"]),
    default="ns",
    show_default=True,
    help="Time unit of --line-protocol files.",
)
@click.option(
    "--memory-errors",
    "memory_error_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Per-address HBM error log in the Calchas format (Datacenter,Server,Name,Stack,SID,"
    "PcId,BankGroup,BankArray,Col,Row,Time,EccType), stored as memory_error events; repeatable.",
)
@click.option(
    "--host",
    default=None,
    help="Host of an --smi-csv or --smi-q log (default: this machine), and of a --kernel-log's "
    "lines and --line-protocol or --influxql points without one.",
)
@click.option(
    "--boot-time",
    default=None,
    help="Boot time of a --kernel-log with dmesg seconds-since-boot stamps (RFC 3339 or Unix s).",
)
@click.option(
    "--bad-lines",
    "bad_lines",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write every line not stored to this file, as FILE:LINE: reason (default: beside each "
    "input, as INPUT.bad-lines.txt, when it has any).",
)
@progress_option("A progress bar")
@click.pass_context
def ingest(
    ctx: click.Context,
    store_url: str | None,
    telemetry_files: tuple[str, ...],
    xid_files: tuple[str, ...],
    failure_files: tuple[str, ...],
    kernel_logs: tuple[str, ...],
    smi_csvs: tuple[str, ...],
    smi_qs: tuple[str, ...],
    line_protocols: tuple[str, ...],
    influxqls: tuple[str, ...],
    since: str | None,
    until: str | None,
    precision: str,
    memory_error_files: tuple[str, ...],
    host: str | None,
    boot_time: str | None,
    bad_lines: str | None,
    progress: bool,
) -> None:
    """Load history exported from Prometheus, InfluxDB or a spreadsheet, kept by Telegraf (its
    files or its InfluxDB 1.x database), nvidia-smi's own CSV logs, or kernel logs, into a
    store.

    Every good line is stored. A line whose time, host or GPU does not read is not stored: the
    first few are shown, all of them are written to the bad-lines report, and the exit status
    is 1. An impossible reading is stored as missing and counted; it alone does not make the
    exit status non-zero.
    """
    from gpuwarden import ingest as ing

    if not (telemetry_files or xid_files or failure_files or kernel_logs or smi_csvs) and not (
        memory_error_files or smi_qs or line_protocols or influxqls
    ):
        raise click.UsageError(
            "give at least one of --telemetry, --xids, --failures, --kernel-log, --smi-csv, "
            "--smi-q, --line-protocol, --influxql, --memory-errors"
        )
    end = maybe_time(until, "--until")
    end = time.time() if end is None else end
    begin = maybe_time(since, "--since")
    begin = end - 30 * 86_400 if begin is None else begin
    boot = maybe_time(boot_time, "--boot-time")
    store = open_store(store_url, settings(ctx))
    named = ing.BadLineReport(bad_lines, always=True) if bad_lines else None
    bad = 0
    try:
        jobs: list[tuple[str, str]] = [(f, "telemetry") for f in telemetry_files]
        jobs += [(f, "xids") for f in xid_files]
        jobs += [(f, "failures") for f in failure_files]
        jobs += [(f, "smi") for f in smi_csvs]
        jobs += [(f, "smi-q") for f in smi_qs]
        jobs += [(f, "line-protocol") for f in line_protocols]
        jobs += [(f, "kernel") for f in kernel_logs]
        for url in influxqls:  # before the kernel logs: dcgm-exporter's series carry PCI ids
            bad += _ingest_influxql(store, url, begin, end, host, progress, named)
        for path, kind in jobs:
            out = named or ing.BadLineReport(ing.report_path(path))
            sink = out.sink(path)
            try:
                if kind == "telemetry":
                    report = ing.ingest_telemetry(store, path, progress=progress, on_bad_line=sink)
                    what = counted(report.rows_stored, "sample")
                elif kind == "xids":
                    report = ing.ingest_xids(store, path, on_bad_line=sink)
                    what = counted(report.rows_stored, "Xid event")
                elif kind == "smi":
                    report = ing.ingest_smi_csv(store, path, host=host, on_bad_line=sink)
                    what = (
                        f"{counted(report.rows_stored, 'sample')} (nvidia-smi CSV, "
                        f"{counted(report.lines_read, 'row')}, host {host or _here()})"
                    )
                elif kind == "smi-q":
                    report = ing.ingest_smi_query_text(store, path, host=host, on_bad_line=sink)
                    what = (
                        f"{counted(report.rows_stored, 'sample')} (nvidia-smi "
                        f"{'-q -x' if report.read_unit == 'document' else '-q'}, "
                        f"{counted(report.lines_read, report.read_unit)}, host {host or _here()})"
                    )
                elif kind == "line-protocol":
                    report = ing.ingest_line_protocol(
                        store, path, host=host, precision=precision, on_bad_line=sink
                    )
                    ignored = "".join(
                        f"; ignored {counted(n, f'{m} point')}" for m, n in report.ignored.items()
                    )
                    xids = f", {counted(report.events, 'Xid event')}" if report.events else ""
                    what = (
                        f"{counted(report.rows_stored, 'sample')}{xids} (line protocol, "
                        f"{counted(report.lines_read, 'line')}{ignored})"
                    )
                elif kind == "kernel":
                    report = ing.ingest_kernel_log(
                        store, path, host=host, boot_time=boot, on_bad_line=sink
                    )
                    what = _kernel_log_summary(path, report)
                else:
                    report = ing.ingest_failures(store, path, on_bad_line=sink)
                    what = counted(report.rows_stored, "failure")
            finally:
                if out is not named:
                    out.close()
            click.echo(f"{path}: stored {what}")
            _ingest_problems(path, report, out, stale=out is not named)
            bad += report.bad_rows_total
        for path in memory_error_files:
            bad += _ingest_memory_errors(store, path)
    finally:
        store.close()
        if named is not None:
            named.close()
    if bad:
        raise click.ClickException(f"{counted(bad, 'bad row')} skipped (the good rows were stored)")


#: Bad lines shown on the terminal per file; the report file has them all.
_SHOWN_BAD_LINES = 10


def _ingest_problems(path: str, report, out, *, stale: bool) -> None:  # ingest.IngestReport
    """Say on stderr what a file's load left out: impossible readings, unknown columns, and
    the bad lines (the first few, then where the rest are). ``stale``: a report of our own
    from an earlier load of ``path`` that found none now is removed."""
    if report.rejected:
        said = ", ".join(f"{n} {f} ({r})" for (f, r), n in sorted(report.rejected.items()))
        click.echo(f"{path}: impossible readings stored as missing: {said}", err=True)
    if report.unknown_columns:
        click.echo(
            f"{path}: ignored unknown columns: {', '.join(report.unknown_columns)}", err=True
        )
    for line, reason in report.bad_rows[:_SHOWN_BAD_LINES]:
        click.echo(f"{path}:{line}: {reason}", err=True)
    if not report.bad_rows_total:
        if stale:
            with contextlib.suppress(OSError):  # a read-only directory: leave it be
                out.path.unlink(missing_ok=True)
        return
    more = report.bad_rows_total - min(len(report.bad_rows), _SHOWN_BAD_LINES)
    where = f"; cannot write the list: {out.error}" if out.error else f"; all listed in {out.path}"
    click.echo(
        f"{path}: {report.bad_rows_total} line{'s' if report.bad_rows_total > 1 else ''} not stored"
        + (f" ({more} more than shown)" if more > 0 else "")
        + where,
        err=True,
    )


def _ingest_influxql(
    store: Store,
    url: str,
    start: float,
    end: float,
    host: str | None,
    progress: bool,
    named,  # ingest.BadLineReport | None: --bad-lines FILE, which lists the bad points too
) -> int:
    """Copy one InfluxDB 1.x database's GPU telemetry; say what it held. Returns its bad
    points."""
    from gpuwarden import ingest as ing
    from gpuwarden.store.influxql import InfluxQLSource

    shown = InfluxQLSource.shown_url(url)
    report = ing.ingest_influxql(
        store, url, start=start, end=end, host=host, progress=progress,
        on_bad_line=named.sink(shown) if named is not None else None,
    )  # fmt: skip
    window = f"{_utc(start)} to {_utc(end)}"
    xids = f", {counted(report.events, 'Xid event')}" if report.events else ""
    click.echo(
        f"{shown}: stored {counted(report.rows_stored, 'sample')}{xids} "
        f"({counted(report.lines_read, 'point')} read, {window})"
    )
    if report.rejected:
        said = ", ".join(f"{n} {f} ({r})" for (f, r), n in sorted(report.rejected.items()))
        click.echo(f"{shown}: impossible readings stored as missing: {said}", err=True)
    for n, reason in report.bad_rows[:_SHOWN_BAD_LINES]:
        click.echo(f"{shown}: point {n}: {reason}", err=True)
    if report.bad_rows_total:
        where = f"all listed in {named.path}" if named is not None else "--bad-lines FILE lists all"
        click.echo(
            f"{shown}: {counted(report.bad_rows_total, 'point')} not stored; {where}", err=True
        )
    return report.bad_rows_total


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _ingest_memory_errors(store: EventWriter, path: str) -> int:
    """Load one Calchas HBM error log; say what it held. Returns its bad lines."""
    from gpuwarden.collectors.memory_errors import ingest_memory_errors

    log = ingest_memory_errors(store, path)
    kinds = ", ".join(f"{n} {t}" for t, n in log.counts().items())
    gpus = len({e.gpu.uuid for e in log.errors})
    click.echo(
        f"{path}: stored {counted(len(log.errors), 'memory error')} ({kinds}) of "
        f"{counted(gpus, 'accelerator')}"
    )
    if log.repeats:
        click.echo(
            f"{path}: {log.repeats} repeated lines (same accelerator, time, type and "
            "address) stored once",
            err=True,
        )
    for note in log.notes:
        click.echo(f"{path}: {note}", err=True)
    for line, reason in log.bad_rows[:_SHOWN_BAD_LINES]:
        click.echo(f"{path}:{line}: {reason}", err=True)
    if log.bad_rows_total > _SHOWN_BAD_LINES:
        more = log.bad_rows_total - _SHOWN_BAD_LINES
        click.echo(f"{path}: ... and {more} more bad lines", err=True)
    return log.bad_rows_total


def _here() -> str:
    import socket

    return socket.gethostname()


def _kernel_log_summary(path: str, report) -> str:  # report: ingest.IngestReport
    """What a kernel log gave; its unmatched Xids and an Xid-free log are said on stderr."""
    for line, bus, host in report.unmatched[:50]:
        click.echo(
            f"{path}:{line}: no known GPU at PCI {bus} on {host}; stored as xid_unmatched "
            "(load its telemetry with pci_bus_id first, then load the log again)",
            err=True,
        )
    if report.unmatched_total > 50:
        click.echo(f"{path}: ... and {report.unmatched_total - 50} more unmatched", err=True)
    if report.rows_stored == 0 and not report.bad_rows_total:
        click.echo(
            f"{path}: no NVRM Xid or SXid line in {counted(report.lines_read, report.read_unit)}",
            err=True,
        )
    for what, n in report.ignored.items():
        click.echo(f"{path}: skipped {counted(n, what)} (the kernel's own are read)", err=True)
    xids = report.rows_stored - report.sxids - report.unmatched_total
    return (
        f"{counted(report.rows_stored, 'kernel-log event')} ({xids} Xid, {report.sxids} SXid, "
        f"{report.unmatched_total} unmatched Xid)"
    )


@main.command()
@store_option
@click.option("--nodes", type=int, default=16, show_default=True, help="Nodes in the fleet.")
@click.option(
    "--gpus", "gpus_per_node", type=int, default=8, show_default=True, help="GPUs per node."
)
@click.option(
    "--models",
    default="H100-80GB,A100-80GB,H200",
    show_default=True,
    help="GPU models, comma-separated, assigned to nodes in turn.",
)
@click.option("--days", type=float, default=30.0, show_default=True, help="Days of history.")
@click.option(
    "--step", "step_s", type=int, default=300, show_default=True, help="Seconds between samples."
)
@click.option("--seed", type=int, default=1, show_default=True, help="Random seed.")
@click.option(
    "--accel",
    type=float,
    default=1.0,
    show_default=True,
    help="Failure-rate multiplier (1 = real-world rate, about 0.0003 per GPU-day).",
)
@click.option("--end", "end", default=None, help="When the history ends (default: now).")
@progress_option("A progress bar")
@click.pass_context
def simulate(
    ctx: click.Context,
    store_url: str | None,
    nodes: int,
    gpus_per_node: int,
    models: str,
    days: float,
    step_s: int,
    seed: int,
    accel: float,
    end: str | None,
    progress: bool,
) -> None:
    """Write a simulated fleet's history, Xids and failures (ground truth) into a store."""
    from gpuwarden.demo import fleet_spec, simulate_into

    spec = fleet_spec(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        models=models,
        days=days,
        step_s=step_s,
        seed=seed,
        accel=accel,
        end_ts=maybe_time(end, "--end"),
    )
    store = open_store(store_url, settings(ctx))
    try:
        n_samples, n_events, n_failures = simulate_into(store, spec, progress=progress)
    finally:
        store.close()
    click.echo(
        f"stored {counted(n_samples, 'sample')}, {counted(n_events, 'event')}, "
        f"{counted(n_failures, 'failure')} in {store.url}"
    )


@main.command()
@store_option
@click.option(
    "--window",
    "window_h",
    type=float,
    default=168.0,
    show_default=True,
    help="Hours of history to summarise.",
)
@click.option("--top", type=int, default=10, show_default=True, help="GPUs to list.")
@click.pass_context
def summary(ctx: click.Context, store_url: str | None, window_h: float, top: int) -> None:
    """Print a readable fleet summary: inventory, missing GPUs, failures, Xids, GPUs to watch."""
    from gpuwarden.summary import fleet_summary

    store = open_store(store_url, settings(ctx), reading=True)
    try:
        click.echo(fleet_summary(store, window_s=window_h * 3600).render(top=top))
    finally:
        store.close()


@main.command()
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default="demo-out",
    show_default=True,
    help="Folder for the demo's SQLite file.",
)
@click.option(
    "--nodes", type=int, default=8, show_default=True, help="Nodes in the simulated fleet."
)
@click.option(
    "--gpus", "gpus_per_node", type=int, default=8, show_default=True, help="GPUs per node."
)
@click.option("--days", type=float, default=30.0, show_default=True, help="Days of history.")
@click.option(
    "--accel",
    type=float,
    default=40.0,
    show_default=True,
    help="Failure-rate multiplier, so a small fleet shows failures in a short history.",
)
@click.option("--seed", type=int, default=7, show_default=True, help="Random seed.")
@click.option(
    "--serve-seconds",
    type=float,
    default=6.0,
    show_default=True,
    help="How long to serve the exporter on the live simulated fleet.",
)
@click.option(
    "--listen",
    default="127.0.0.1:0",
    show_default=True,
    help="Exporter address (port 0: any free port).",
)
def demo(
    out_dir: str,
    nodes: int,
    gpus_per_node: int,
    days: float,
    accel: float,
    seed: int,
    serve_seconds: float,
    listen: str,
) -> None:
    """Simulate a fleet with failures, store it, serve the exporter, print a fleet summary."""
    from gpuwarden.demo import run_demo

    run_demo(
        Path(out_dir),
        keep_serving=sys.stdin.isatty() and sys.stdout.isatty(),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        days=days,
        accel=accel,
        seed=seed,
        serve_seconds=serve_seconds,
        listen=listen,
        echo=click.echo,
    )


def _register_subcommands() -> None:
    """Commands that live beside the code they drive (each module imports its weight lazily)."""
    from gpuwarden.closedloop.cli import closed_loop
    from gpuwarden.dashboard.cli import dashboard
    from gpuwarden.models.cli import COMMANDS, evaluate
    from gpuwarden.planning.cli import plan
    from gpuwarden.planning.energy_cli import energy, spot
    from gpuwarden.reports.cli import report
    from gpuwarden.scheduler.client_cli import COMMANDS as SCHEDULER_CLIENT
    from gpuwarden.scheduler.server_cli import agent, scheduler
    from gpuwarden.scheduler_hooks.k8s_cli import COMMANDS as K8S
    from gpuwarden.serve.cli import serve

    evaluate.add_command(closed_loop)
    main.add_command(serve)
    main.add_command(dashboard)
    main.add_command(scheduler)
    main.add_command(agent)
    main.add_command(energy)
    main.add_command(spot)
    main.add_command(plan)
    main.add_command(report)
    for command in [*COMMANDS, *SCHEDULER_CLIENT, *K8S]:
        main.add_command(command)


_register_subcommands()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
