"""``gpuwarden k8s ...`` and ``gpuwarden tenants ...``: gpuwarden's Kubernetes commands.

gpuwarden k8s extender --listen 127.0.0.1:8888        the kube-scheduler extender
gpuwarden k8s billing --store prometheus://prom:9090  GPU-hours per namespace and pod
gpuwarden tenants apply --file tenants.toml [--dry-run]
"""

from __future__ import annotations

import click

from gpuwarden.cliutil import (
    DomainErrorGroup,
    billing_window,
    open_store,
    settings,
    store_option,
    window_words,
)
from gpuwarden.wording import counted


def _cluster_options(fn):  # type: ignore[no-untyped-def]
    fn = click.option("--context", default=None, help="kubeconfig context.")(fn)
    return click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False),
        default=None,
        help="kubeconfig file (default: in-cluster service account, else ~/.kube/config).",
    )(fn)


@click.group(cls=DomainErrorGroup)
def k8s() -> None:
    """gpuwarden on Kubernetes: the scheduler extender and billing per namespace."""


@k8s.command()
@click.option(
    "--listen", default="127.0.0.1:8888", show_default=True, help="HOST:PORT to serve on."
)
@click.option(
    "--resync", "resync_s", type=float, default=5.0, show_default=True,
    help="Seconds between listings of Nodes and Pods.",
)  # fmt: skip
@_cluster_options
def extender(listen: str, resync_s: float, kubeconfig: str | None, context: str | None) -> None:
    """Serve the kube-scheduler extender (POST /filter, /prioritize): critical pods never go
    where an idle GPU is at risk; nodes are ranked by warden's packing."""
    from kubernetes import client

    from gpuwarden.config import parse_listen
    from gpuwarden.lifecycle import AppServer, wait_for_stop
    from gpuwarden.scheduler_hooks._k8s_api import api_client_from
    from gpuwarden.scheduler_hooks.k8s_extender import Extender, KubeSource, make_app

    host, port = parse_listen(listen)
    ext = Extender()
    source = KubeSource(
        client.CoreV1Api(api_client_from(kubeconfig, context)), ext.set_view, resync_s=resync_s
    )
    view = source.sync()  # a first picture before serving, or one clear error
    server = AppServer(make_app(ext), source).start(host, port)
    click.echo(
        f"gpuwarden extender: {server.url} ({counted(view.cluster.n_nodes, 'node')}, "
        f"resync every {resync_s:g} s)",
        err=True,
    )
    try:
        wait_for_stop()
    finally:
        server.stop()


@k8s.command()
@store_option
@click.option("--since", default=None, help="Start: ISO date/time (UTC) or Unix seconds (default: "
              "the 1st of this month), as `gpuwarden billing --since`.")  # fmt: skip
@click.option("--until", default=None, help="End (exclusive), same forms (default: now).")
@click.option(
    "--scrape-interval", "scrape_s", type=float, default=None,
    help="dcgm-exporter's scrape interval in s (default: read from the data).",
)  # fmt: skip
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Also write rows as CSV.")
@click.pass_context
def billing(
    ctx: click.Context,
    store_url: str | None,
    since: str | None,
    until: str | None,
    scrape_s: float | None,
    csv_path: str | None,
) -> None:
    """GPU-hours per namespace and pod from dcgm-exporter's pod labels in a Prometheus store
    (prometheus+http://..., victoriametrics://...)."""

    from gpuwarden.errors import ConfigError
    from gpuwarden.scheduler.billing import tenant_totals, write_csv
    from gpuwarden.scheduler_hooks.k8s_billing import gpu_hours

    since_s, until_s = billing_window(since, until)
    store = open_store(store_url, settings(ctx))
    try:
        if not hasattr(store, "read_pod_samples"):
            raise ConfigError("k8s billing reads a Prometheus-compatible store (PromQL)")
        rows = gpu_hours(store, since_s, until_s, scrape_interval_s=scrape_s)
    finally:
        store.close()
    totals = tenant_totals(rows)
    if totals:
        click.echo("NAMESPACE\tGPU_HOURS")
    else:
        click.echo("no pod used a GPU in the window (no pod label on any GPU series)")
    for ns, hours in totals.items():
        click.echo(f"{ns}\t{hours:.6f}")
    click.echo(f"window: {window_words(since_s, until_s)}", err=True)  # stdout stays the table
    if csv_path:
        write_csv(rows, csv_path)


@click.group(cls=DomainErrorGroup)
def tenants() -> None:
    """Tenants on Kubernetes, from the bundled scheduler's tenant file."""


@tenants.command("apply")
@click.option(
    "--file", "path", required=True, type=click.Path(dir_okay=False),
    help="The tenant file: [quotas.TENANT] tables, optional [kubernetes] settings.",
)  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Print the objects as YAML; change nothing.")
@_cluster_options
def tenants_apply(path: str, dry_run: bool, kubeconfig: str | None, context: str | None) -> None:
    """Namespace, ResourceQuota, LimitRange, NetworkPolicy and PVC per tenant, and a
    PriorityClass per job class, applied server-side (fieldManager gpuwarden)."""
    from gpuwarden.scheduler_hooks import k8s_tenants

    objects = k8s_tenants.render(path)
    if dry_run:
        click.echo(k8s_tenants.to_yaml(objects), nl=False)
        return
    from gpuwarden.scheduler_hooks._k8s_api import api_client_from

    n = k8s_tenants.apply(objects, api_client_from(kubeconfig, context), echo=click.echo)
    click.echo(f"{n} objects applied", err=True)


COMMANDS = [k8s, tenants]

__all__ = ["COMMANDS", "k8s", "tenants"]
