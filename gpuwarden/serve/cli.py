"""The ``gpuwarden serve`` command (registered by ``gpuwarden.cli``: ``main.add_command(serve)``)."""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import click

from gpuwarden import cliutil
from gpuwarden.health import DEFAULT_AT_RISK
from gpuwarden.store.shard import HostShard, parse_shard
from gpuwarden.wording import counted

logger = logging.getLogger("gpuwarden.serve")


@click.command()
@cliutil.collector_option
@click.option(
    "--no-collect", is_flag=True, help="Do not collect: score what others write into the store."
)
@cliutil.store_option
@click.option("--interval", "interval_s", type=float, help="Seconds between two scoring runs.")
@click.option(
    "--listen",
    default="127.0.0.1:9401",
    show_default=True,
    help="HOST:PORT of the API, /metrics and the Alertmanager receiver.",
)
@click.option(
    "--tagger",
    "tagger_urls",
    multiple=True,
    help="Scheduler hook URL, repeatable: slurm://?feature=gpuwarden_healthy, k8s://.",
)
@click.option("--dry-run", is_flag=True, help="Hooks print what they would do and change nothing.")
@click.option(
    "--assess",
    "assess_spec",
    default=None,
    help="Risk scorer as package.module:function, combined with the hard signals "
    "(default: the shipped model).",
)
@click.option(
    "--verdicts",
    "verdicts_url",
    default=None,
    help="Store URL the verdicts are written to (default: the --store, when it takes writes; "
    "else sqlite:///gpuwarden-verdicts.db).",
)
@cliutil.spool_options
@click.option(
    "--shard",
    default=None,
    help="i/n: score only the racks (hosts without one) whose stable hash mod n is i, "
    "one of n replicas reading the same store (use with --no-collect).",
)
@click.option(
    "--audit",
    "audit_path",
    default="gpuwarden-audit.db",
    show_default=True,
    help="SQLite file of the audit log.",
)
@click.option(
    "--enter-at",
    type=float,
    default=None,
    help="Risk that makes a GPU at-risk (default: the at_risk_threshold setting, else the "
    f"model card's threshold; {DEFAULT_AT_RISK:g} without one).",
)
@click.option(
    "--exit-below",
    type=float,
    default=None,
    help="Risk to stay under to be ok again (default: 0.5, or --enter-at if lower).",
)
@click.option(
    "--hold",
    "hold_h",
    type=float,
    default=24.0,
    show_default=True,
    help="Hours below --exit-below before ok.",
)
@click.option(
    "--manual-hold",
    "manual_hold_h",
    type=float,
    default=24.0,
    show_default=True,
    help="Hours a person's decision holds against the scorer.",
)
@click.option(
    "--breaker-share",
    type=float,
    default=0.1,
    show_default=True,
    help="Most nodes one hook may newly tag per window, as a share of the fleet.",
)
@click.option(
    "--breaker-window",
    "breaker_window_s",
    type=float,
    default=3600.0,
    show_default=True,
    help="Circuit breaker window, seconds.",
)
@click.option(
    "--fleet-nodes",
    type=int,
    default=None,
    help="Nodes in the fleet, for the breaker's share (default: the most nodes seen).",
)
@click.option(
    "--dashboard-url",
    default="",
    help="Link for each GPU in Slack messages, with {uuid}, {hostname}, {gpu}.",
)
@click.option(
    "--once", is_flag=True, help="Collect, score, decide and act once, print the decisions, exit."
)
@click.option(
    "--at",
    "at",
    default=None,
    help="With --once: score at this time (RFC 3339 or Unix s; default: now), as score --at.",
)
@click.pass_context
def serve(ctx: click.Context, **opts: Any) -> None:
    """Collect, score every interval, decide with hysteresis, re-tag nodes, alert people.

    Serves /metrics, the API (/v1/gpus, /v1/audit, overrides) and Alertmanager's webhook
    (/alertmanager). POSTs need the bearer token in $GPUWARDEN_API_TOKEN; Slack messages go to
    $GPUWARDEN_SLACK_WEBHOOK_URL when it is set.
    """
    with cliutil.domain_errors():
        _serve(ctx, **opts)


def verdict_store(store: Any, url: str | None, cfg: dict[str, Any]) -> Any:
    """Where serve writes verdicts: ``url``; else the telemetry store when it takes writes (a
    Prometheus server does not), else a SQLite file in the working directory."""
    from gpuwarden.store.base import WritableStore
    from gpuwarden.store.split import DEFAULT_VERDICTS

    if url:
        return cliutil.open_store(url, cfg)
    if isinstance(store, WritableStore):
        return store
    return cliutil.open_store(f"sqlite:///{DEFAULT_VERDICTS}", cfg)


def spooled_stores(cfg: dict[str, Any], o: dict[str, Any]) -> tuple[Any, Any]:
    """The telemetry store and the verdict store; with ``--spool DIR`` each writable one behind
    a spool of its own (``DIR/telemetry``, ``DIR/verdicts``; one when they are the same store)."""
    from pathlib import Path

    from gpuwarden.store.base import WritableStore

    store = cliutil.open_store(o["store_url"], cfg)
    spool = o["spool_dir"]
    limits = (o["spool_max_mb"], o["spool_max_age"])
    try:
        if spool and isinstance(store, WritableStore):
            store = cliutil.spooled(store, str(Path(spool) / "telemetry"), *limits)
        verdicts = verdict_store(store, o["verdicts_url"], cfg)
        if spool and verdicts is not store:
            verdicts = cliutil.spooled(verdicts, str(Path(spool) / "verdicts"), *limits)
    except BaseException:
        store.close()
        raise
    return store, verdicts


def _serve(ctx: click.Context, **o: Any) -> None:
    from gpuwarden.alerts.audit import AuditLog
    from gpuwarden.alerts.decision import DecisionEngine
    from gpuwarden.alerts.hard_signals import HardSignalAssessor
    from gpuwarden.alerts.slack import ENV_WEBHOOK_URL, SlackNotifier
    from gpuwarden.config import parse_listen
    from gpuwarden.exporter import Exporter
    from gpuwarden.scheduler_hooks import open_tagger
    from gpuwarden.serve.api import ENV_API_TOKEN
    from gpuwarden.serve.assessors import (
        combine,
        decision_lines,
        default_assessor,
        load_assessor,
    )
    from gpuwarden.serve.server import ServeHandle, run_serve
    from gpuwarden.serve.service import RiskService

    cfg = cliutil.settings(ctx)
    if o["at"] is not None and not o["once"]:
        raise click.UsageError("--at scores one round: give it with --once")
    at = cliutil.maybe_time(o["at"], "--at")
    host, port = parse_listen(o["listen"])
    interval = o["interval_s"] or cfg["interval_s"]
    enter_at, exit_below = decision_lines(o["enter_at"], o["exit_below"])
    engine = DecisionEngine(
        enter_at=enter_at,
        exit_below=exit_below,
        hold_s=o["hold_h"] * 3600,
        manual_hold_s=o["manual_hold_h"] * 3600,
    )
    taggers = [open_tagger(url, dry_run=o["dry_run"]) for url in o["tagger_urls"]]
    notifiers = []
    if os.environ.get(ENV_WEBHOOK_URL):
        notifiers.append(SlackNotifier(dashboard_url=o["dashboard_url"]))
    # a hard signal must be seen even when rounds are further apart than the default lookback,
    # and a scorer of the user's own never switches the hard signals off
    lookback = max(900.0, 2 * float(interval))
    assess = default_assessor(lookback)
    if o["assess_spec"]:
        assess = combine(load_assessor(o["assess_spec"]), HardSignalAssessor(lookback))
    token = os.environ.get(ENV_API_TOKEN) or None
    if token is None and not o["once"]:
        click.echo(f"{ENV_API_TOKEN} is not set: overrides and /alertmanager are refused", err=True)
    part = parse_shard(o["shard"]) if o.get("shard") else None
    store, verdicts = spooled_stores(cfg, o)
    collector = None if o["no_collect"] else cliutil.open_collector(o["collector_url"], cfg)
    audit = AuditLog(o["audit_path"])
    try:
        exporter = (
            Exporter(collector, interval_s=interval, store=store) if collector is not None else None
        )
        service = RiskService(
            store if part is None else HostShard(store, *part),
            assess=assess,
            engine=engine,
            audit=audit,
            taggers=taggers,
            notifiers=notifiers,
            interval_s=interval,
            exporter=exporter,
            breaker_share=o["breaker_share"],
            breaker_window_s=o["breaker_window_s"],
            fleet_nodes=o["fleet_nodes"],
            verdicts=verdicts,
        )
        service.restore()
        if o["once"]:
            if exporter is not None:
                exporter.poll_once()
            changes = service.tick(at)
            service.flush_notifiers()
            for t in changes:
                risk = "unknown" if math.isnan(t.risk) else f"{t.risk:.2f}"
                click.echo(
                    f"{t.gpu.hostname}/{t.gpu.index} {t.gpu.uuid}: {t.old} -> {t.new} "
                    f"(risk {risk}; {'; '.join(t.reasons)})"
                )
            scored = counted(len(service.engine.statuses()), "GPU")
            click.echo(f"{scored} scored, {len(changes)} changed")
            return
        run_serve(ServeHandle(service, token=token), host, port)
    finally:
        audit.close()
        if collector is not None:
            collector.close()
        if verdicts is not store:
            verdicts.close()
        store.close()


__all__ = ["serve"]
