"""What every ``gpuwarden`` command shares: settings, store and collector URLs, error handling.

    @click.command()
    @cliutil.store_option
    @click.pass_context
    @cliutil.domain_errors()
    def mycommand(ctx, store_url):
        cfg = cliutil.settings(ctx)
        store = cliutil.open_store(store_url, cfg)

A command reads its defaults from the settings the main group loaded (``gpuwarden.config``),
or loads them itself when it runs alone (tests invoke commands through ``CliRunner``). A
``GpuwardenError`` becomes a ``click.ClickException``: one line on stderr and exit status 1.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import click

from gpuwarden.errors import GpuwardenError

#: ``--store`` and ``--collector`` as most commands take them (default: the setting).
store_option = click.option("--store", "store_url", help="Store URL (default: setting `store`).")
collector_option = click.option(
    "--collector", "collector_url", help="Collector URL (default: setting `collector`)."
)


def parse_time(text: str, option: str) -> float:
    """Unix seconds, or an ISO 8601 date or date-time (``2026-01-31``, ``2026-01-31T12:00``,
    ``2026-01-31T12:00:00Z``, ``+01:00``; UTC unless it carries an offset) -> Unix seconds.
    Every command's time options take these forms; anything else is a ``click.BadParameter``
    naming ``option``."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a time: use 2026-01-31, 2026-01-31T12:00, "
            "2026-01-31T12:00:00Z or Unix seconds",
            param_hint=option,
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def maybe_time(text: str | None, option: str) -> float | None:
    """``parse_time``, or None for an option not given."""
    return None if text is None else parse_time(text, option)


def billing_window(since: str | None, until: str | None) -> tuple[float, float]:
    """``--since``/``--until`` of a billing command as Unix seconds: by default from 00:00 UTC
    on the 1st of this month until now; a window that ends before it starts is refused."""
    now = time.time()
    first = datetime.fromtimestamp(now, UTC).replace(
        day=1, hour=0, minute=0, second=0, microsecond=0
    )
    start = parse_time(since, "--since") if since else first.timestamp()
    end = parse_time(until, "--until") if until else now
    if start > end:
        raise click.BadParameter("the window starts after it ends", param_hint="--since")
    return start, end


def window_words(start: float, end: float) -> str:
    """A billing window as its footer says it: "2026-12-01 00:00 .. 2026-12-07 13:05 UTC"."""
    day = "%Y-%m-%d %H:%M"
    return (
        f"{datetime.fromtimestamp(start, UTC).strftime(day)} .. "
        f"{datetime.fromtimestamp(end, UTC).strftime(day)} UTC"
    )


def progress_option(what: str = "Progress bars") -> Any:
    """``--progress/--no-progress``: on when stderr is a terminal, so a command run from cron
    or a timer writes no bar into its log unless asked."""

    def resolve(_ctx: click.Context, _param: click.Parameter, value: bool | None) -> bool:
        return sys.stderr.isatty() if value is None else bool(value)

    return click.option(
        "--progress/--no-progress",
        default=None,
        callback=resolve,
        help=f"{what} on stderr (default: when stderr is a terminal).",
    )


def spool_options(command: Any) -> Any:
    """``--spool DIR``, ``--spool-max-mb``, ``--spool-max-age`` (``collect``, ``serve``)."""
    for option in reversed(
        [
            click.option(
                "--spool",
                "spool_dir",
                type=click.Path(file_okay=False),
                default=None,
                help="Directory where writes wait on disk while the store is down; they are "
                "replayed in order once it is back (default: no spool, a failed write is retried "
                "from memory).",
            ),
            click.option(
                "--spool-max-mb",
                type=float,
                default=512.0,
                show_default=True,
                help="Most disk the spool may use (MB); beyond it the oldest writes are dropped.",
            ),
            click.option(
                "--spool-max-age",
                default="7d",
                show_default=True,
                help="Spooled writes older than this are dropped (e.g. 36h, 7d).",
            ),
        ]
    ):
        command = option(command)
    return command


def spooled(store: Any, directory: str | None, max_mb: float, max_age: str) -> Any:
    """``store`` behind a ``Spool`` in ``directory``; ``store`` itself when there is none."""
    if not directory:
        return store
    from gpuwarden.config import parse_duration
    from gpuwarden.store.spool import Spool

    if not max_mb > 0:
        raise click.BadParameter(f"must be positive, not {max_mb!r}", param_hint="--spool-max-mb")
    try:
        return Spool(
            store,
            directory,
            max_bytes=int(max_mb * 1_000_000),
            max_age_s=parse_duration(max_age, "--spool-max-age"),
        )
    except BaseException:
        store.close()
        raise


def spool_summary(store: Any) -> str:
    """ "; spool DIR: N waiting, ..." for a command's last line ("" without a spool)."""
    stats = getattr(store, "stats", None)
    if stats is None or not hasattr(store, "directory"):
        return ""
    dropped = stats.dropped_size + stats.dropped_age + stats.rejected
    return (
        f"; spool {store.directory}: {stats.pending} waiting, {stats.spooled} spooled, "
        f"{stats.replayed} replayed, {dropped} dropped"
    )


@contextmanager
def domain_errors() -> Iterator[None]:
    """``GpuwardenError`` -> ``click.ClickException``; a ``with`` block or a decorator."""
    try:
        yield
    except GpuwardenError as exc:
        raise click.ClickException(str(exc)) from exc


class DomainErrorGroup(click.Group):
    """A group whose subcommands' ``GpuwardenError`` becomes one line and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        with domain_errors():
            return super().invoke(ctx)


def settings(ctx: click.Context) -> dict[str, Any]:
    """The settings the main group loaded, or (a command run alone) freshly loaded ones."""
    root = ctx.find_root().obj
    if isinstance(root, dict):
        return root
    from gpuwarden.config import load_settings

    return load_settings()


def store_url(ctx: click.Context, url: str | None) -> str:
    """``url``, else the ``store`` setting the main group loaded; a usage error without both
    (a command run alone does not guess a store to write into)."""
    if url:
        return url
    root = ctx.find_root().obj
    if isinstance(root, dict) and root.get("store"):
        return str(root["store"])
    raise click.UsageError("give --store URL (e.g. sqlite:///gpuwarden.db)")


def collector_url(url: str, cfg: dict[str, Any]) -> str:
    """Fill the URL parameters the settings provide (timeouts, hostname) unless the URL has them."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if parts.scheme == "smi":
        query.setdefault("timeout", str(cfg["smi_timeout_s"]))
    if parts.scheme.startswith("dcgm+"):
        query.setdefault("timeout", str(cfg["dcgm_timeout_s"]))
    if parts.scheme in ("nvml", "smi") and cfg["hostname"]:
        query.setdefault("hostname", cfg["hostname"])
    # rebuilt by hand: urlunsplit drops the "//" of "smi://" (an empty netloc)
    base = url.split("?", 1)[0]
    return f"{base}?{urlencode(query)}" if query else base


def existing_store(url: str) -> str:
    """``url``, after checking that a SQLite store it names exists: a command that only reads
    (summary, score, report, evaluate, train) would otherwise create an empty file at a typo's
    path and say the fleet has no GPU."""
    from gpuwarden.errors import ConfigError
    from gpuwarden.store import sqlite_file

    path = sqlite_file(url)
    if path is not None and not Path(path).exists():
        raise ConfigError(
            f"no store at {path}: nothing was collected or loaded there (gpuwarden collect, "
            "ingest, simulate and demo create one); check --store or the `store` setting"
        )
    return url


def open_store(url: str | None, cfg: dict[str, Any], *, reading: bool = False) -> Any:
    """Open the store (default: setting ``store``), with the retention settings unless the
    URL sets its own. ``reading``: for a command that only reads, a SQLite file that does not
    exist is an error (``existing_store``), not a new empty store."""
    from gpuwarden.store import open_store as open_url

    url = url or cfg["store"]
    if reading:
        existing_store(url)
    if url.startswith("sqlite:") or "://" not in url:
        sep = "&" if "?" in url else "?"
        if "retention=" not in url:
            url += f"{sep}retention={cfg['retention_raw_days']}d"
            sep = "&"
        if "rollup_retention=" not in url:
            url += f"{sep}rollup_retention={cfg['retention_rollup_days']}d"
    return open_url(url)


def open_collector(url: str | None, cfg: dict[str, Any]) -> Any:
    """Open the collector (default: setting ``collector``) with ``collector_url``'s parameters."""
    from gpuwarden.collectors import open_collector as open_url

    return open_url(collector_url(url or cfg["collector"], cfg))


__all__ = [
    "DomainErrorGroup",
    "collector_option",
    "collector_url",
    "domain_errors",
    "open_collector",
    "open_store",
    "settings",
    "spool_options",
    "spool_summary",
    "spooled",
    "store_option",
    "store_url",
]
