"""``gpuwarden train``, ``gpuwarden score`` and ``gpuwarden evaluate``.

Click commands the main CLI registers with ``main.add_command(...)``; each also runs alone
(tests invoke them through ``CliRunner``). The store defaults to the ``store`` setting when
the main group has loaded settings. A ``GpuwardenError`` becomes one line and exit status 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np
import pandas as pd

from gpuwarden import cliutil
from gpuwarden.cliutil import domain_errors, maybe_time, progress_option, store_option
from gpuwarden.config import parse_duration
from gpuwarden.errors import InputError
from gpuwarden.wording import counted


def parse_span(text: str, name: str) -> float:
    """ "6h", "30m", "7d", "600s" or plain seconds -> seconds."""
    value = parse_duration(text, name)
    if value <= 0:
        raise InputError(f"{name}={text!r} must be positive")
    return value


def read_failures_file(path: str) -> pd.DataFrame:
    """A failures file (``timestamp,hostname,gpu,UUID,kind``) in the store's failure layout,
    read through an in-memory store so the user's store is left as it is."""
    from gpuwarden.ingest import ingest_failures
    from gpuwarden.store.sqlite import SqliteStore

    with SqliteStore(":memory:") as scratch:
        report = ingest_failures(scratch, path)
        for line, reason in report.bad_rows[:20]:
            click.echo(f"{path}:{line}: {reason} (row skipped)", err=True)
        failures = scratch.read_failures()
    if failures.empty:
        raise InputError(f"{path} holds no usable failure record")
    return failures


def _model(path: str | None):
    from gpuwarden.models.artifact import load_model

    return load_model(path)


@click.command("train")
@store_option
@click.option(
    "--failures",
    "failures_file",
    type=click.Path(dir_okay=False, exists=True),
    help="Failures CSV (timestamp,hostname,gpu,UUID,kind) instead of the store's.",
)
@click.option("--until", help="Train on history before this time (RFC 3339 or Unix s).")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder to write model.skops and model_card.json into.",
)
@click.option(
    "--horizon",
    default="7d",
    show_default=True,
    help="Label: fails within this long after the scoring time.",
)
@click.option("--step", default="2h", show_default=True, help="Hours between scoring times.")
@click.option(
    "--calibration",
    type=click.Choice(["isotonic", "sigmoid"]),
    default="isotonic",
    show_default=True,
    help="Probability calibration on the later time block (isotonic is centred between its "
    "steps, so the risk keeps the trees' order).",
)
@click.option(
    "--from-shipped/--from-scratch",
    "from_base",
    default=None,
    help="Start from the shipped model (its calibration refit on this fleet; kept as it is "
    "when the history holds no failure) or grow trees from nothing.  [default: from-shipped]",
)
@click.option(
    "--base-model",
    "base_model",
    type=click.Path(exists=True),
    help="Start from this model folder instead of the shipped model.",
)
@click.option(
    "--warm-start",
    is_flag=True,
    help="From the base model: also grow trees on this fleet (kept only as far as they rank "
    "the later block better), not only refit the calibration.",
)
@click.option(
    "--draws",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="With --from-scratch: grow the trees this many times, each on its own draw of the "
    "healthy rows kept and of early stopping's split, and score the mean of their log-odds "
    "(steadier from one training to the next; the tree time times this).",
)
@progress_option()
@click.pass_context
@domain_errors()
def train(
    ctx: click.Context,
    store_url: str | None,
    failures_file: str | None,
    until: str | None,
    out_dir: str,
    horizon: str,
    step: str,
    calibration: str,
    from_base: bool | None,
    base_model: str | None,
    warm_start: bool,
    draws: int,
    progress: bool,
) -> None:
    """Train a risk model on your own fleet's history and write it to --out.

    A fleet with few failures starts from the shipped model (or --base-model); see "Training
    on your own fleet" in docs/models.md."""
    from gpuwarden.models.artifact import save_model
    from gpuwarden.models.train import TrainOptions, store_history
    from gpuwarden.models.transfer import train_user_model
    from gpuwarden.store import open_store

    if from_base is False and (base_model is not None or warm_start):
        raise click.UsageError("--base-model and --warm-start exclude --from-scratch")
    if draws > 1 and from_base is not False:
        raise click.UsageError(
            "--draws grows trees from nothing: give --from-scratch (a base model's trees are kept)"
        )
    start_from = (
        "scratch"
        if from_base is False
        else "base"
        if from_base or base_model or warm_start
        else "auto"
    )

    step_s = parse_span(step, "--step")
    if step_s % 3600:
        raise click.BadParameter("must be whole hours", param_hint="--step")
    options = TrainOptions(
        horizon_s=parse_span(horizon, "--horizon"),
        step_h=int(step_s // 3600),
        method=calibration,
        draws=draws,
    )
    failures = read_failures_file(failures_file) if failures_file else None
    store = open_store(cliutil.existing_store(cliutil.store_url(ctx, store_url)))
    try:
        panel, end = store_history(
            store, until=maybe_time(until, "--until"), failures=failures, progress=progress
        )
        done = train_user_model(
            panel,
            start_from=start_from,
            base_path=base_model,
            adapt="warm" if warm_start else "auto",
            labels_until=end,
            options=options,
            source={"store": store.url},
            progress=progress,
        )
    finally:
        store.close()
    model = done.model
    folder = save_model(model, out_dir)
    data = model.card["training_data"]
    path = model.card.get("base_model", {}).get("path", "")
    base = "shipped model" if path == "shipped" else f"model in {path}"
    click.echo(
        {
            "scratch": "trained from scratch",
            "warm": f"warm start from the {base}",
            "recalibrate": f"recalibrated the {base}",
            "shipped": f"kept the {base} as it is",
        }[done.how]
        + f": {done.why}"
    )
    click.echo(
        f"trained on {data['rows']:,} (GPU, time) rows, {counted(data['failures'], 'failure')}"
    )
    cal = model.card.get("metrics", {}).get("calibration_block")
    if cal and done.how != "shipped":
        rows = "every row" if done.how == "recalibrate" else "later block"
        click.echo(
            f"calibration rows ({rows}): PR-AUC {cal['pr_auc']:.3f}, Brier {cal['brier']:.4f}"
        )
    click.echo(f"wrote {folder}")


def _render(frame: pd.DataFrame, fmt: str, top: int) -> str:
    from gpuwarden.models.score import COLUMNS, render_table

    if fmt == "csv":
        return frame[list(COLUMNS)].to_csv(index=False)
    if fmt == "json":
        shown = frame[list(COLUMNS)].replace({np.nan: None})
        rows = shown.to_dict(orient="records")
        if "evidence" in frame:  # each reason with the features behind it
            for row, evidence in zip(rows, frame["evidence"], strict=True):
                row["evidence"] = [r.to_json() for r in evidence]
        if "missing" in frame:  # the signals the store had nothing of, left out of the risk
            for row, missing in zip(rows, frame["missing"], strict=True):
                row["missing"] = list(missing)
        return json.dumps(rows, indent=1) + "\n"
    return render_table(frame, top=top)


@click.command("score")
@store_option
@click.option(
    "--model",
    "model_path",
    type=click.Path(exists=True),
    help="Model folder from `gpuwarden train` (default: the shipped model).",
)
@click.option("--at", help="Score at this time (RFC 3339 or Unix s; default: newest sample).")
@click.option("--start", help="Backtest: first scoring time.")
@click.option("--end", help="Backtest: last scoring time (default: the newest sample).")
@click.option("--step", default="6h", show_default=True, help="Backtest: time between scores.")
@click.option(
    "--into",
    "into_url",
    help="Also store the rows as verdicts in this store (a backfill of history with --start, "
    "--end and --step 1h, for the dashboard and the weekly report).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default=None,
    help="Output format (default: table, or by --output's extension).",
)
@click.option("--output", type=click.Path(dir_okay=False), help="Write to this file.")
@click.option(
    "--shard",
    default=None,
    help="i/n: score only the racks (hosts without one) whose stable hash mod n is i, "
    "one of n replicas reading the same store.",
)
@click.option(
    "--top",
    type=int,
    default=20,
    show_default=True,
    help="Table: GPUs to list at least (every GPU not ok is listed).",
)
@click.pass_context
@domain_errors()
def score(
    ctx: click.Context,
    store_url: str | None,
    model_path: str | None,
    at: str | None,
    start: str | None,
    end: str | None,
    step: str,
    fmt: str | None,
    output: str | None,
    top: int,
    into_url: str | None,
    shard: str | None,
) -> None:
    """One row per GPU: hostname, gpu, UUID, risk, state (ok / at-risk / unhealthy), reasons.

    With --start and --end, a backtest: the same rows at every --step.
    """
    from gpuwarden.models.score import (
        backtest,
        drift_warnings,
        level_warnings,
        missing_warnings,
        score_store,
    )
    from gpuwarden.store import open_store

    if end is not None and start is None:
        raise click.UsageError("a backtest needs --start (--end defaults to the newest sample)")
    if at is not None and start is not None:
        raise click.UsageError("give either --at or --start/--end")
    from gpuwarden.store.shard import HostShard, parse_shard

    part = parse_shard(shard) if shard is not None else None
    model = _model(model_path)
    store = open_store(cliutil.existing_store(cliutil.store_url(ctx, store_url)))
    try:
        if part is not None:
            store = HostShard(store, *part)
        if start is not None:
            from gpuwarden.models.history import newest_sample_ts

            last = maybe_time(end, "--end") if end is not None else newest_sample_ts(store)
            frame = backtest(
                store,
                model,
                start=maybe_time(start, "--start") or 0.0,
                end=0.0 if last is None else last,
                step_s=parse_span(step, "--step"),
                progress=output is not None,
            )
        else:
            frame = score_store(store, model, at=maybe_time(at, "--at"))
    finally:
        store.close()
    if into_url:  # the rows just scored: the same as models.score.backfill
        from gpuwarden.models.score import before_verdicts, verdicts

        into = open_store(into_url)
        try:
            n = into.write_verdicts(verdicts(frame, model.threshold, before_verdicts(into, frame)))
        finally:
            into.close()
        click.echo(f"stored {counted(n, 'verdict')} in {into_url}", err=True)
    for line in missing_warnings(frame) + drift_warnings(frame) + level_warnings(frame):
        click.echo(f"warning: {line}", err=True)
    if fmt is None:
        fmt = Path(output).suffix.lstrip(".").lower() if output else "table"
        fmt = fmt if fmt in ("csv", "json") else "table"
    text = _render(frame, fmt, top)
    if output:
        Path(output).write_text(text)
        click.echo(f"wrote {counted(len(frame), 'row')} to {output}", err=True)
    else:
        click.echo(text, nl=False)


@click.group("evaluate", invoke_without_command=True)
@store_option
@click.option(
    "--model",
    "model_path",
    type=click.Path(exists=True),
    help="Model folder (default: the shipped model).",
)
@click.option(
    "--failures",
    "failures_file",
    type=click.Path(dir_okay=False, exists=True),
    help="Failures CSV (default: the store's failure records).",
)
@click.option("--start", help="First scoring time (default: the first sample).")
@click.option("--end", help="Last scoring time (default: the newest sample).")
@click.option("--step", default="1h", show_default=True, help="Time between scoring times.")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default="evaluation",
    show_default=True,
    help="Folder for the PNG plots and the per-failure CSV.",
)
@progress_option()
@click.pass_context
@domain_errors()
def evaluate(
    ctx: click.Context,
    store_url: str | None,
    model_path: str | None,
    failures_file: str | None,
    start: str | None,
    end: str | None,
    step: str,
    out_dir: str,
    progress: bool,
) -> None:
    """Recall at >= 24 h lead, false flags per 1,000 GPU-days and PR-AUC for the model and the
    rule baseline side by side, per failure mode, with PR, reliability and lead-time plots.
    `gpuwarden evaluate closed-loop` runs the closed-loop evaluation instead."""
    if ctx.invoked_subcommand is not None:
        return  # a subcommand (closed-loop) runs on its own options
    from gpuwarden.models.evaluate import evaluate_store
    from gpuwarden.store import open_store

    step_s = parse_span(step, "--step")
    if step_s % 3600:
        raise click.BadParameter("must be whole hours", param_hint="--step")
    failures = read_failures_file(failures_file) if failures_file else None
    model = _model(model_path)
    store = open_store(cliutil.existing_store(cliutil.store_url(ctx, store_url)))
    try:
        ev = evaluate_store(
            store,
            model,
            failures=failures,
            start=maybe_time(start, "--start"),
            end=maybe_time(end, "--end"),
            step_h=int(step_s // 3600),
            out_dir=out_dir,
            progress=progress,
        )
    finally:
        store.close()
    out = Path(out_dir)
    ev.failures.to_csv(out / "failures.csv", index=False)
    click.echo(ev.render())
    click.echo(f"per-failure lead times: {out / 'failures.csv'}")


#: What the main CLI registers: ``for c in COMMANDS: main.add_command(c)``.
COMMANDS = (train, score, evaluate)
