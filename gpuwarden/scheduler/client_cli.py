"""``gpuwarden jobs | nodes | quota | billing``: the scheduler service from the command line.

The service's URL comes from ``--url`` or ``$GPUWARDEN_SCHEDULER_URL`` (default
http://127.0.0.1:8477), the token from ``$GPUWARDEN_SCHEDULER_TOKEN`` or ``--token-file``, never
from an option (it would land in shell history). Server errors become one line and exit 1.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from gpuwarden.cliutil import DomainErrorGroup, billing_window, domain_errors, window_words
from gpuwarden.scheduler.billing import BillRow, EnergyRow, energy_totals, tenant_totals, write_csv
from gpuwarden.scheduler.client import DEFAULT_URL, URL_ENV, SchedulerClient, read_token
from gpuwarden.wording import counted, figure

F = TypeVar("F", bound=Callable[..., Any])
PRIORITIES = ("inference", "training", "batch", "dev")
STATES = ("queued", "running", "checkpointing", "succeeded", "failed", "cancelled")


def _connection(f: F) -> F:
    f = click.option(
        "--token-file",
        type=click.Path(dir_okay=False, exists=True),
        default=None,
        help="File holding the bearer token (default: $GPUWARDEN_SCHEDULER_TOKEN).",
    )(f)
    f = click.option(
        "--url",
        envvar=URL_ENV,
        default=DEFAULT_URL,
        show_default=True,
        help=f"Scheduler service URL (or ${URL_ENV}).",
    )(f)
    return f


def _client(url: str, token_file: str | None) -> SchedulerClient:
    return SchedulerClient(url, read_token(token_file))


def _fmt_option(f: F) -> F:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="Output format.",
    )(f)


# ---- jobs ------------------------------------------------------------------------------------


@click.group(cls=DomainErrorGroup)
def jobs() -> None:
    """Submit, list, cancel jobs and read their logs on the scheduler service."""


@jobs.command(context_settings={"allow_interspersed_args": False})
@click.option("--name", default="", help="Job name (default: the command's first word).")
@click.option("--priority", type=click.Choice(PRIORITIES), default="batch", show_default=True)
@click.option("--interruptible", is_flag=True, help="May be preempted or moved (checkpoints).")
@click.option("--tasks", type=click.IntRange(1), default=1, show_default=True, help="Gang size.")
@click.option("--gpus", type=click.IntRange(0), default=1, show_default=True, help="GPUs per task.")
@click.option(
    "--gpu-milli", type=click.IntRange(1, 1000), default=1000, show_default=True,
    help="Share of one GPU in thousandths (with --gpus 1).",
)  # fmt: skip
@click.option("--mig", "mig_profile", default=None, help="One MIG instance per task (3g.40gb).")
@click.option("--gpu-model", multiple=True, help="Allowed GPU model; repeatable (any if none).")
@click.option("--gpu-memory", "gpu_memory", default=None, help="GPU memory needed (80Gi, MiB).")
@click.option("--cpu", default="0", show_default=True, help="CPU per task: cores (2) or 500m.")
@click.option("--memory", default="0", show_default=True, help="Memory per task: 16Gi, 512Mi.")
@click.option("--checkpoint-signal", default=None, help="Signal asking for a checkpoint (SIGUSR1).")
@click.option("--checkpoint-command", default=None, help="Command run to checkpoint instead.")
@click.option("--checkpoint-url", default=None, help="URL POSTed to checkpoint instead.")
@click.option("--grace", type=click.FloatRange(0), default=30.0, show_default=True,
              help="Seconds between the checkpoint request and the stop.")  # fmt: skip
@click.option("--model", default=None, help="Model weights the job loads (placement prefers "
              "nodes whose cache holds them).")  # fmt: skip
@click.option("--idempotency-key", default=None, help="Resubmitting with it returns the same job.")
@click.option("--tenant", default=None, help="Submit for this tenant (admin token only).")
@_connection
@click.argument("command", nargs=-1, required=True)
def submit(
    command: tuple[str, ...],
    url: str,
    token_file: str | None,
    **opts: Any,
) -> None:
    """Submit COMMAND (after --) as a job; prints its id and state.

    \b
    gpuwarden jobs submit --priority training --interruptible --gpus 2
    --checkpoint-signal SIGUSR1 -- python train.py --epochs 10
    """
    spec = job_spec(list(command), **opts)
    with _client(url, token_file) as c:
        job = c.submit(spec)
    click.echo(f"{job['job_id']}  {job.get('state', '?')}")


def job_spec(command: list[str], **o: Any) -> dict[str, Any]:
    """The ``POST /v1/jobs`` body for the ``submit`` options."""
    hooks = [
        (kind, o[f"checkpoint_{kind}"])
        for kind in ("signal", "command", "url")
        if o.get(f"checkpoint_{kind}")
    ]
    if len(hooks) > 1:
        raise click.UsageError(
            "give one of --checkpoint-signal, --checkpoint-command, --checkpoint-url"
        )
    spec: dict[str, Any] = {
        "name": o["name"] or command[0].rsplit("/", 1)[-1],
        "command": command,
        "priority": o["priority"],
        "interruptible": o["interruptible"],
        "tasks": o["tasks"],
        "gpus_per_task": o["gpus"],
        "gpu_milli": o["gpu_milli"],
        "mig_profile": o["mig_profile"],
        "gpu_models": list(o["gpu_model"]),
        "gpu_memory_mib": parse_mib(o["gpu_memory"], "--gpu-memory") if o["gpu_memory"] else None,
        "cpu_milli": parse_cpu_milli(o["cpu"]),
        "memory_mib": parse_mib(o["memory"], "--memory"),
        "checkpoint": {"kind": hooks[0][0], "target": hooks[0][1]} if hooks else None,
        "grace_period_s": o["grace"],
        "idempotency_key": o["idempotency_key"],
    }
    if o.get("model"):
        spec["model"] = o["model"]
    if o.get("tenant"):
        spec["tenant"] = o["tenant"]
    return spec


@jobs.command("list")
@click.option("--state", "states", multiple=True, type=click.Choice(STATES),
              help="Only jobs in this state; repeatable.")  # fmt: skip
@_fmt_option
@_connection
def list_jobs(states: tuple[str, ...], fmt: str, url: str, token_file: str | None) -> None:
    """List jobs (a tenant token sees its own, an admin token all)."""
    with _client(url, token_file) as c:
        rows = c.jobs(states)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    header = (
        "JOB", "TENANT", "NAME", "PRIORITY", "STATE", "TRY", "ASKS", "WHERE", "STARTED", "WHY",
    )  # fmt: skip
    table = [
        (
            j["job_id"],
            j.get("tenant", "-"),
            j.get("name", "-"),
            j.get("priority", "-"),
            j.get("state", "-"),
            str(j.get("attempt", "-")),
            _asks(j),
            _where(j),
            _when(j.get("started_at")),
            # why it waits, or why it stopped (squeue's REASON), without the row's own job id
            (j.get("reason") or "").removeprefix(f"job {j['job_id']}: ") or "-",
        )  # fmt: skip
        for j in rows
    ]
    _echo_table(header, table)


@jobs.command()
@click.argument("job_id")
@_connection
def cancel(job_id: str, url: str, token_file: str | None) -> None:
    """Cancel JOB_ID (it shows "cancelled" once its node agent has stopped it)."""
    with _client(url, token_file) as c:
        job = c.cancel(job_id)
    click.echo(f"{job['job_id']}  {job.get('state', '?')}")


@jobs.command()
@click.argument("job_id")
@click.option("--task", type=click.IntRange(0), default=None, help="Only this task of the gang.")
@click.option(
    "--attempt", type=click.IntRange(1), default=None, help="This attempt (default: last)."
)
@_connection
def logs(
    job_id: str, task: int | None, attempt: int | None, url: str, token_file: str | None
) -> None:
    """Print the stdout and stderr the node agent captured for JOB_ID."""
    with _client(url, token_file) as c:
        text = c.logs(job_id, task=task, attempt=attempt)
    click.echo(text, nl=not text.endswith("\n") and bool(text))


# ---- cluster, quota, billing -------------------------------------------------------------


@click.command()
@click.argument("node")
@click.option("--in", "in_s", type=click.FloatRange(0), default=120.0, show_default=True,
              help="Seconds until the node goes away (AWS gives 120).")  # fmt: skip
@click.option("--reason", default="spot reclaim", show_default=True, help="Shown in the audit log.")
@_connection
@domain_errors()
def reclaim(node: str, in_s: float, reason: str, url: str, token_file: str | None) -> None:
    """Tell the scheduler NODE is being reclaimed (admin token): it takes no new work, and its
    jobs checkpoint within the notice and go back to the queue."""
    with _client(url, token_file) as c:
        out = c.reclaim(node, time.time() + in_s, reason)
    evicted = out.get("evicted") or []
    click.echo(f"{node}: reclaimed; {counted(len(evicted), 'job')} checkpointing and requeued"
               + (f": {', '.join(evicted)}" if evicted else ""))  # fmt: skip


@click.command()
@_fmt_option
@_connection
@domain_errors()
def nodes(fmt: str, url: str, token_file: str | None) -> None:
    """List the nodes the scheduler knows, one line per GPU: the node's state (ok, or lost
    when its agent stopped syncing), seconds since its agent's last sync, and each GPU's
    measured utilisation over the service's usage window ("-" where the agent has no NVML: the
    sleep controller then goes by allocation, UTIL_FROM); the node's cost class, idle-sleep
    state (off: the service runs no sleep policy) and the seconds left of a spot reclaim."""
    with _client(url, token_file) as c:
        rows = c.nodes()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    header = ("NODE", "STATE", "SINCE_SYNC_S", "GPU", "MODEL", "MEMORY_MIB", "HEALTH", "MODE",
              "COST", "SLEEP", "RECLAIM_IN_S", "USED", "UTIL_PCT", "UTIL_FROM")  # fmt: skip
    table = []
    now = time.time()
    for n in rows:
        since, deadline = n.get("since_sync_s"), n.get("reclaim_deadline")
        for g in n.get("gpus", []) or [{}]:
            used, util = g.get("used_milli"), g.get("util_pct")
            table.append(
                (
                    n["node"],
                    _s(n.get("state")),
                    "-" if since is None else f"{since:.0f}",
                    _s(g.get("index")),
                    _s(g.get("model")),
                    _s(g.get("memory_mib")),
                    _s(g.get("health")),
                    _s(g.get("mode")),
                    _s(n.get("cost_class")),
                    _s(n.get("sleep")),
                    "-" if deadline is None else f"{max(0.0, deadline - now):.0f}",
                    "-" if used is None else f"{used / 1000:.3g}",
                    "-" if util is None else f"{util:.0f}",
                    _s(n.get("utilisation_from")),
                )  # fmt: skip
            )
    _echo_table(header, table)


@click.command()
@_fmt_option
@_connection
@domain_errors()
def quota(fmt: str, url: str, token_file: str | None) -> None:
    """Show GPU quotas and use per tenant (a tenant token sees its own row)."""
    with _client(url, token_file) as c:
        rows = c.quota()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    header = ("TENANT", "GPUS", "GUARANTEED", "USED_GPUS", "GPU_MEMORY_MIB", "USED_MEMORY_MIB")
    table = [
        (
            q["tenant"],
            _n(q.get("gpus"), "unlimited"),
            _n(q.get("guaranteed_gpus")),
            _n(q.get("used_gpus")),
            _n(q.get("gpu_memory_mib"), "unlimited"),
            _n(q.get("used_gpu_memory_mib")),
        )  # fmt: skip
        for q in rows
    ]
    _echo_table(header, table)


@click.command()
@click.option("--since", default=None, help="Start: ISO date/time (UTC) or unix seconds (default: "
              "the 1st of this month).")  # fmt: skip
@click.option("--until", default=None, help="End (exclusive), same forms (default: now).")
@click.option("--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write CSV (tenant,job_id,name,gpu_hours) to this file.")  # fmt: skip
@_fmt_option
@_connection
@domain_errors()
def billing(
    since: str | None,
    until: str | None,
    output: str | None,
    fmt: str,
    url: str,
    token_file: str | None,
) -> None:
    """GPU-hours per job and tenant in a window; shares and MIG instances count fractionally.
    KWH_FROM says whether a job's kWh was measured by its GPUs' energy counters, partly
    measured, or estimated from board power (agents without NVML)."""
    since_s, until_s = billing_window(since, until)
    with _client(url, token_file) as c:
        raw = c.billing(since_s, until_s)
    rows = [BillRow(r["tenant"], r["job_id"], r["name"], float(r["gpu_hours"])) for r in raw]
    if output:
        write_csv(rows, output)
        click.echo(f"wrote {counted(len(rows), 'row')} to {output}", err=True)
    if fmt == "json":
        click.echo(json.dumps(raw, indent=2))
        return
    power = [EnergyRow(r["tenant"], r["job_id"], r.get("kwh"), r.get("co2_kg"),
                       r.get("kwh_source", "estimated")) for r in raw]  # fmt: skip
    table = [(r.tenant, r.job_id, r.name, f"{r.gpu_hours:.4f}", _num(e.kwh), e.source,
              _num(e.co2_kg)) for r, e in zip(rows, power, strict=True)]  # fmt: skip
    watts = energy_totals(power)
    table += [(t, "(total)", "", f"{h:.4f}", _num(watts[t][0]), "", _num(watts[t][1]))
              for t, h in tenant_totals(rows).items()]  # fmt: skip
    _echo_table(("TENANT", "JOB", "NAME", "GPU_HOURS", "KWH", "KWH_FROM", "CO2_KG"), table)
    click.echo(f"window: {window_words(since_s, until_s)}", err=True)  # stdout stays the table


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


COMMANDS = [jobs, nodes, quota, billing, reclaim]


# ---- parsing and printing ----------------------------------------------------------------

_MIB = {"": 1, "mi": 1, "mib": 1, "gi": 1024, "gib": 1024, "ti": 1 << 20, "tib": 1 << 20}


def parse_mib(text: str, option: str) -> int:
    """``16Gi`` / ``512Mi`` / ``1024`` (MiB) -> MiB."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _MIB:
        raise click.BadParameter(f"{text!r}: use MiB or a size like 512Mi, 16Gi", param_hint=option)
    return round(float(m.group(1)) * _MIB[unit])


def parse_cpu_milli(text: str) -> int:
    """``2`` / ``0.5`` cores or ``500m`` -> milli-cores (Kubernetes' notation)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)(m?)\s*", text)
    if m is None:
        raise click.BadParameter(
            f"{text!r}: use cores (2, 0.5) or milli-cores (500m)", param_hint="--cpu"
        )
    value = float(m.group(1))
    return round(value if m.group(2) else value * 1000)


def _asks(j: dict[str, Any]) -> str:
    tasks = j.get("tasks", 1)
    if j.get("mig_profile"):
        each = str(j["mig_profile"])
    elif not j.get("gpus_per_task"):
        each = "cpu"
    elif (j.get("gpu_milli") or 1000) < 1000:
        each = f"{j['gpu_milli']}m"
    else:
        each = f"{j['gpus_per_task']}gpu"
    return f"{tasks}x{each}"


def _where(j: dict[str, Any]) -> str:
    placement = j.get("placement") or []
    parts = []
    for t in placement:
        gpus = ",".join(str(g) for g in t.get("gpus", []))
        parts.append(f"{t['node']}:{gpus}" + (f"/{t['mig']}" if t.get("mig") else ""))
    return " ".join(parts) or "-"


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M:%S")


def _s(value: Any, missing: str = "-") -> str:
    return missing if value is None else str(value)


def _n(value: float | None, missing: str = "-") -> str:
    """A figure of a table: 2, not 2.0; 163,840, not 163840.0."""
    return missing if value is None else figure(float(value))


def _echo_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    if not rows:
        click.echo("(none)")
        return
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        click.echo("  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
