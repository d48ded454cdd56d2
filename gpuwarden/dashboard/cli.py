"""``gpuwarden dashboard``: serve the Streamlit health dashboard over a store.

    gpuwarden dashboard --store sqlite:///gpuwarden.db --listen 127.0.0.1:8501 \
        --serve-url http://127.0.0.1:9401 --scheduler-url http://127.0.0.1:8477

The command runs ``python -m streamlit run gpuwarden/dashboard/app.py`` in a child process with
the store URL passed through, and stops it on Ctrl-C. ``start_dashboard`` / ``wait_ready`` do
the same for the demo, the screenshot script and the browser test.

It refuses to listen beyond loopback while a service token is in its environment and no
``GPUWARDEN_DASHBOARD_PASSWORD`` is (``check_exposure``): every visitor would read with the
token, an admin token showing every tenant's jobs.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from gpuwarden.cliutil import domain_errors, settings, store_option
from gpuwarden.config import parse_listen
from gpuwarden.errors import ConfigError, GpuwardenError

APP = Path(__file__).with_name("app.py")
DEFAULT_LISTEN = "127.0.0.1:8501"
PASSWORD_ENV = "GPUWARDEN_DASHBOARD_PASSWORD"
TOKEN_ENVS = ("GPUWARDEN_SCHEDULER_TOKEN", "GPUWARDEN_SERVE_TOKEN")
INSECURE_FLAG = "--insecure-no-password"


def require_streamlit() -> None:
    """Raise a one-line ``ConfigError`` naming the extra when Streamlit is not installed."""
    if importlib.util.find_spec("streamlit") is None or importlib.util.find_spec("altair") is None:
        raise ConfigError(
            "the dashboard needs Streamlit and Altair: pip install 'gpuwarden[dashboard]'"
        )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (as ``--listen`` gives it) is reachable from this machine only:
    ``localhost``, 127.0.0.0/8 or ``::1``. Any other name may resolve to a public address."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, environ: Mapping[str, str], *, insecure: bool = False) -> None:
    """Raise a one-line ``ConfigError`` when the dashboard would listen beyond loopback with a
    service token in ``environ`` and no ``GPUWARDEN_DASHBOARD_PASSWORD`` (unless ``insecure``)."""
    tokens = [name for name in TOKEN_ENVS if environ.get(name)]
    if insecure or not tokens or environ.get(PASSWORD_ENV) or is_loopback(host):
        return
    where = "every address" if host in ("0.0.0.0", "::", "") else host
    one = len(tokens) == 1
    raise ConfigError(
        f"refusing to serve on {where} without a password: {' and '.join(tokens)} "
        f"{'is' if one else 'are'} set, so anyone who reaches the page would use "
        f"{'it' if one else 'them'}; set {PASSWORD_ENV}, or pass {INSECURE_FLAG}"
    )


def streamlit_argv(
    store_url: str, host: str, port: int, *, app: Path = APP, extra: tuple[str, ...] = ()
) -> list[str]:
    """The command line that serves the app on ``host:port`` (headless, no usage stats, no
    file watcher: the app's files do not change under a running server). ``extra``: more
    arguments for the app (``--serve-url URL``)."""
    return [
        sys.executable, "-m", "streamlit", "run", str(app),
        f"--server.address={host}",
        f"--server.port={port}",
        "--server.headless=true",
        "--browser.gatherUsageStats=false",
        "--server.fileWatcherType=none",
        "--theme.base=light",
        "--client.toolbarMode=minimal",
        "--", "--store", store_url, *extra,
    ]  # fmt: skip


def start_dashboard(
    store_url: str,
    host: str,
    port: int,
    *,
    log: Path | None = None,
    app: Path = APP,
    extra: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start the server in a child process; its output goes to ``log`` (default: ours).
    ``app`` is another Streamlit script to serve instead (tests); ``extra`` more app arguments."""
    require_streamlit()
    env = {**os.environ, "GPUWARDEN_STORE": store_url}
    out: Any = log.open("wb") if log is not None else None
    try:
        return subprocess.Popen(
            streamlit_argv(store_url, host, port, app=app, extra=extra),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT if log is not None else None,
        )
    finally:
        if log is not None:
            out.close()


def wait_ready(proc: subprocess.Popen[bytes], url: str, *, timeout_s: float = 60.0) -> None:
    """Wait until ``url/_stcore/health`` answers ok; ``GpuwardenError`` if the server exits
    or does not answer in time."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise GpuwardenError(f"the dashboard server exited with status {proc.returncode}")
        try:
            if httpx.get(f"{url}/_stcore/health", timeout=2).text.strip() == "ok":
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise GpuwardenError(f"the dashboard at {url} did not answer within {timeout_s:g} s")
        time.sleep(0.2)


def stop_dashboard(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@click.command()
@store_option
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    help="HOST:PORT to serve the dashboard on.",
)
@click.option(
    "--serve-url",
    envvar="GPUWARDEN_SERVE_URL",
    help="gpuwarden serve's API, for the Decisions page and tag status "
    "(token: $GPUWARDEN_SERVE_TOKEN).",
)
@click.option(
    "--scheduler-url",
    envvar="GPUWARDEN_SCHEDULER_URL",
    help="The bundled scheduler's API, for the Scheduler page (token: $GPUWARDEN_SCHEDULER_TOKEN).",
)
@click.option(
    "--plan-demand",
    envvar="GPUWARDEN_PLAN_DEMAND",
    help="Scheduler database or openb pod list, for the Capacity page's forecast.",
)
@click.option(
    "--plan-prices", envvar="GPUWARDEN_PLAN_PRICES", help="Price file for the Capacity page's TCO."
)
@click.option(
    "--scheduler-db",
    envvar="GPUWARDEN_SCHEDULER_DB",
    help="The scheduler's database (read only), for the Energy page's job classes.",
)
@click.option(
    INSECURE_FLAG,
    "insecure",
    is_flag=True,
    help=f"Listen beyond loopback with a service token set but no ${PASSWORD_ENV}: anyone who "
    "reaches the page reads with the token.",
)
@click.pass_context
def dashboard(
    ctx: click.Context,
    store_url: str | None,
    listen: str,
    serve_url: str | None,
    scheduler_url: str | None,
    plan_demand: str | None,
    plan_prices: str | None,
    scheduler_db: str | None,
    insecure: bool,
) -> None:
    """Serve the health dashboard (fleet overview, GPUs needing attention, GPU detail,
    serve's decisions, the scheduler, capacity, energy and spot). With $GPUWARDEN_DASHBOARD_PASSWORD set, every page
    asks for it first."""
    with domain_errors():
        cfg = settings(ctx)
        url = store_url or str(cfg["store"])
        host, port = parse_listen(listen)
        check_exposure(host, os.environ, insecure=insecure)
        require_streamlit()
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    click.echo(f"Dashboard on http://{shown}:{port}/ over {url} (Ctrl-C stops it)")
    extra: tuple[str, ...] = ()
    if serve_url:
        extra += ("--serve-url", serve_url)
    if scheduler_url:
        extra += ("--scheduler-url", scheduler_url)
    for name, value in (("--plan-demand", plan_demand), ("--plan-prices", plan_prices),
                        ("--scheduler-db", scheduler_db)):  # fmt: skip
        if value:
            extra += (name, value)
    proc = start_dashboard(url, host, port, extra=extra)
    try:
        status = proc.wait()
    except KeyboardInterrupt:
        stop_dashboard(proc)
        return
    if status != 0:
        raise click.ClickException(f"streamlit exited with status {status}")
