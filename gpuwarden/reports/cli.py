"""``gpuwarden report``: the weekly cluster report (docs/report.md)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from gpuwarden.cliutil import maybe_time, open_store, progress_option, settings, store_option
from gpuwarden.config import grid_intensity


def with_verdicts(store: Any, url: str | None, cfg: dict[str, Any]) -> Any:
    """``store``, reading its verdicts from ``url`` when given; a store that takes no writes
    reads them from serve's default verdict file when that exists."""
    from gpuwarden.store.base import WritableStore
    from gpuwarden.store.split import DEFAULT_VERDICTS, WithVerdicts

    if not url and not isinstance(store, WritableStore) and Path(DEFAULT_VERDICTS).is_file():
        url = f"sqlite:///{DEFAULT_VERDICTS}"
    if not url:
        return store
    try:
        return WithVerdicts(store, open_store(url, cfg))
    except BaseException:
        store.close()
        raise


@click.command("report")
@store_option
@click.option("--since", help="Start of the period, UTC (default: Monday 00:00 of last week).")
@click.option(
    "--until",
    help="End of the period, UTC (default: the Monday 00:00 after --since, or this Monday).",
)
@click.option("--facts-only", is_flag=True, help="Print the facts document (JSON) and stop.")
@click.option(
    "--out", "out_dir", default=None, help="Folder for the report (default: setting report_dir)."
)
@click.option(
    "--scheduler-db",
    default=None,
    help="The bundled scheduler's SQLite file (setting scheduler_db).",
)
@click.option("--audit", "audit_db", default=None, help="The audit log (setting audit_db).")
@click.option(
    "--verdicts",
    "verdicts_url",
    default=None,
    help="Store the verdicts are read from, where serve --verdicts wrote them (default: the "
    "--store; for a store that takes no writes, serve's sqlite:///gpuwarden-verdicts.db if it "
    "exists).",
)
@click.option(
    "--pseudonymise", is_flag=True, help="Replace hosts, tenants and ids before the LLM sees them."
)
@click.option("--no-llm", is_flag=True, help="Template text only, even when an LLM is configured.")
@click.option(
    "--slack/--no-slack", default=True, help="Post to Slack when a webhook or bot token is set."
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be sent to the LLM and Slack; send and write nothing.",
)
@progress_option("A progress bar")
@click.pass_context
def report(
    ctx: click.Context,
    store_url: str | None,
    since: str | None,
    until: str | None,
    facts_only: bool,
    out_dir: str | None,
    scheduler_db: str | None,
    audit_db: str | None,
    verdicts_url: str | None,
    pseudonymise: bool,
    no_llm: bool,
    slack: bool,
    dry_run: bool,
    progress: bool,
) -> None:
    """Write the weekly cluster report: facts from code, prose from an LLM with every number
    checked (or templates), Markdown and HTML with charts, posted to Slack."""
    import os

    from gpuwarden.reports import FactSources, build_facts, last_full_week
    from gpuwarden.reports.build import prose_for, write_report
    from gpuwarden.reports.slack import ENV_BOT_TOKEN, ENV_WEBHOOK_URL, summary_blocks

    cfg = settings(ctx)
    start, end = maybe_time(since, "--since"), maybe_time(until, "--until")
    if start is None and end is None:
        start, end = last_full_week(time.time())
    elif start is None:
        start = end - 7 * 86400  # type: ignore[operator]
    elif end is None:
        end = start + 7 * 86400
    sources = FactSources(
        audit_db=cfg["audit_db"] if audit_db is None else audit_db,
        scheduler_db=cfg["scheduler_db"] if scheduler_db is None else scheduler_db,
        gpu_hour_price=cfg["gpu_hour_price"],
        currency=cfg["currency"],
        grid_g_co2_per_kwh=grid_intensity(cfg) or 0.0,
        capacity_buffer=cfg["capacity_buffer"],
        prices=cfg["tco_prices"],
    )
    previous = _previous_facts(Path(out_dir or cfg["report_dir"]), start, end)  # type: ignore[arg-type]
    store = with_verdicts(open_store(store_url, cfg, reading=True), verdicts_url, cfg)
    try:
        facts = build_facts(
            store,
            start,
            end,  # type: ignore[arg-type]
            sources=sources,
            previous=previous,
            progress=progress,
        )
    finally:
        store.close()
    if facts_only:
        click.echo(facts.model_dump_json(indent=2))
        return
    if dry_run:
        from gpuwarden.reports.llm import llm_config
        from gpuwarden.reports.pseudonym import Pseudonyms
        from gpuwarden.reports.recommend import recommend
        from gpuwarden.reports.writer import messages, template_prose

        recs = recommend(facts)
        config = None if no_llm else llm_config(cfg)
        if config is None:
            click.echo("LLM: none configured; the report would be template text only.")
        else:
            names = Pseudonyms.of(facts) if pseudonymise else None
            click.echo(f"LLM: would send to {config.describe()}:")
            click.echo(json.dumps(messages(facts, recs, names), indent=2))
        text, blocks = summary_blocks(facts, template_prose(facts, recs))
        hook = "set" if os.environ.get(ENV_WEBHOOK_URL) else "not set"
        click.echo(f"Slack webhook ({ENV_WEBHOOK_URL} {hook}): would post:")
        click.echo(json.dumps({"text": text, "blocks": blocks}, indent=2))
        upload = (
            "would upload report.md and report.html"
            if os.environ.get(ENV_BOT_TOKEN)
            else "no bot token"
        )
        click.echo(f"Slack upload to {cfg['report_slack_channel'] or '(no channel)'}: {upload}")
        return
    prose, llm = prose_for(facts, cfg, pseudonymise=pseudonymise, use_llm=not no_llm)
    files = write_report(facts, prose, Path(out_dir or cfg["report_dir"]), llm)
    click.echo(f"report: {files.markdown}")
    click.echo(f"        {files.html}")
    for note in prose.notes:
        click.echo(f"note: {note}", err=True)
    if slack:
        _post(facts, prose, files, cfg)


def _previous_facts(out: Path, since: float, until: float):
    """The facts.json of the report of the period before, when it is in ``out`` and readable:
    the comparison then costs no second read of the store."""

    from pydantic import ValidationError

    from gpuwarden.reports import FACTS_VERSION, Facts

    day = datetime.fromtimestamp(since - (until - since), UTC).strftime("%Y-%m-%d")
    path = out / f"report-{day}" / "facts.json"
    try:
        facts = Facts.model_validate_json(path.read_text())
    except (OSError, ValidationError):
        return None
    return facts if facts.version == FACTS_VERSION else None


def _post(facts, prose, files, cfg) -> None:
    import os

    from gpuwarden.reports.slack import (
        ENV_BOT_TOKEN,
        ENV_WEBHOOK_URL,
        post_summary,
        summary_blocks,
        upload_files,
    )
    from gpuwarden.wording import counted

    if os.environ.get(ENV_WEBHOOK_URL):
        text, blocks = summary_blocks(facts, prose, f"Full report: {files.html}")
        post_summary(text, blocks)
        click.echo("posted the summary to Slack")
    if os.environ.get(ENV_BOT_TOKEN) and cfg["report_slack_channel"]:
        ids = upload_files(
            [files.html, files.markdown],
            cfg["report_slack_channel"],
            base_url=cfg["slack_api_url"],
            comment=f"GPU cluster report, week of {facts.period.since[:10]}",
        )
        click.echo(f"uploaded {counted(len(ids), 'file')} to Slack")


COMMANDS = [report]
