"""Scheduler facts from the bundled scheduler's SQLite file, and the alert log's re-tags.

Queue wait is ``started_at - queued_at`` of the jobs that started in the period; GPU-hours are
the service's own bill (``scheduler.billing.gpu_hours``), so the report and ``gpuwarden
billing`` never disagree. Capacity is the GPUs the scheduler's nodes registered times the hours.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from gpuwarden.alerts.audit import AuditLog
from gpuwarden.errors import InputError
from gpuwarden.health import GpuState
from gpuwarden.reports.model import Alerts, Cost, Scheduler, TenantUsage
from gpuwarden.scheduler.billing import UsageInterval, gpu_hours, tenant_totals
from gpuwarden.scheduler.state import SchedulerDB

#: The audit log holds at most this many rows per report period before the count says so.
AUDIT_LIMIT = 10_000


def alerts(transitions: pd.DataFrame, audit_path: str | None, since: float, until: float) -> Alerts:
    """Transitions from the stored verdicts; re-tags (hook rows) from the audit log if any."""
    states = transitions["state"].astype(str)
    retags_ok = retags_failed = None
    by_hook: dict[str, int] | None = None
    if audit_path and Path(audit_path).is_file():
        log = AuditLog(audit_path)
        try:
            rows = [r for r in log.rows(limit=AUDIT_LIMIT, since=since) if r.ts < until]
        finally:
            log.close()
        hooks = [r for r in rows if r.hook is not None and r.hook != "slack"]
        retags_ok = sum(r.result.startswith("ok") for r in hooks)
        retags_failed = len(hooks) - retags_ok
        by_hook = {}
        for r in hooks:
            by_hook[str(r.hook)] = by_hook.get(str(r.hook), 0) + 1
    return Alerts(
        transitions=len(transitions),
        to_at_risk=int((states == str(GpuState.AT_RISK)).sum()),
        to_unhealthy=int((states == str(GpuState.UNHEALTHY)).sum()),
        to_ok=int((states == str(GpuState.OK)).sum()),
        hard_signal_transitions=int((transitions["cause"] == "hard-signal").sum()),
        retags_ok=retags_ok,
        retags_failed=retags_failed,
        retags_by_hook=by_hook,
    )


def scheduler(
    path: str, since: float, until: float, now: float, hourly: pd.DataFrame | None = None
) -> Scheduler:
    """``hourly``: the store's hourly telemetry; with it, each tenant's GPU utilisation and
    memory use on the GPUs its tasks held (the scheduler's node names are the hostnames)."""
    if not Path(path).is_file():
        raise InputError(f"scheduler database {path} does not exist")
    db = SchedulerDB(path)
    try:
        jobs = db.jobs()
        usage = [UsageInterval(*r) for r in db.usage_rows()]
        preempts = [
            r for r in db.audit_rows(limit=1_000_000, since=since, action="preempt") if r.at < until
        ]
        quotas = {str(r["tenant"]): r["gpus"] for r in db.quotas()}
        capacity_gpus = sum(len(n.gpus) for n in db.nodes())
        tenant_of = {j.job_id: j.tenant for j in jobs}
        held = [
            (tenant_of.get(t.job_id, ""), t.node, gpu, t.started_at, t.ended_at or now)
            for t in db.tasks()
            if t.started_at is not None and t.started_at < until and (t.ended_at or now) > since
            for gpu in t.gpus
        ]
    finally:
        db.close()
    waits = [
        (j.started_at - j.queued_at) / 60.0
        for j in jobs
        if j.started_at is not None and since <= j.started_at < until
    ]
    hours = (until - since) / 3600.0
    totals = tenant_totals(gpu_hours(usage, since, until, min(now, until)))
    used = sum(totals.values())
    capacity = capacity_gpus * hours
    use = _tenant_use(hourly, held)
    tenants = []
    for tenant, h in sorted(totals.items(), key=lambda kv: -kv[1]):
        quota = quotas.get(tenant)
        quota_used = 100.0 * (h / hours) / quota if quota and hours else None
        tenants.append(
            TenantUsage(
                tenant=tenant, gpu_hours=round(h, 1),
                share_pct=round(100.0 * h / used, 1) if used else 0.0,
                quota_gpus=float(quota) if quota is not None else None,
                quota_used_pct=round(quota_used, 1) if quota_used is not None else None,
                gpu_util_pct=use.get(tenant, (None, None))[0],
                memory_used_pct=use.get(tenant, (None, None))[1],
            )
        )  # fmt: skip
    return Scheduler(
        jobs_started=len(waits),
        queue_wait_median_min=round(float(np.median(waits)), 1) if waits else None,
        queue_wait_p95_min=round(float(np.percentile(waits, 95)), 1) if waits else None,
        jobs_waiting=sum(j.state == "queued" for j in jobs),
        preemptions=len(preempts),
        gpu_hours=round(used, 1),
        capacity_gpu_hours=round(capacity, 1),
        allocated_pct=round(100.0 * used / capacity, 1) if capacity else 0.0,
        by_tenant=tenants,
    )


def _tenant_use(
    hourly: pd.DataFrame | None,
    held: list[tuple[str, str, int, float, float]],
) -> dict[str, tuple[float | None, float | None]]:
    """Per tenant: mean utilisation and memory use of the hourly rows of the GPUs its tasks
    held (tenant, hostname, gpu, start, end), inside the hours they held them."""
    if hourly is None or hourly.empty or not held:
        return {}
    spans = pd.DataFrame(held, columns=["tenant", "hostname", "gpu", "start", "end"])
    return use_during(hourly, spans, ["hostname", "gpu"])


def use_during(
    hourly: pd.DataFrame, spans: pd.DataFrame, keys: list[str]
) -> dict[str, tuple[float | None, float | None]]:
    """Mean utilisation and memory use per ``spans.tenant`` of the hourly rows matching a span
    on ``keys`` whose middle falls in its [start, end)."""
    rows = hourly[[*keys, "ts", "gpu_util_pct", "fb_used_mib", "fb_total_mib"]]
    rows = rows.astype({k: str for k in keys if k != "gpu"})
    joined = rows.merge(spans.astype({k: str for k in keys if k != "gpu"}), on=keys)
    mid = joined["ts"] + 1800.0  # the middle of the hour
    joined = joined[(mid >= joined["start"]) & (mid < joined["end"])]
    joined = joined.assign(mem=100.0 * joined["fb_used_mib"] / joined["fb_total_mib"])
    out: dict[str, tuple[float | None, float | None]] = {}
    for tenant, g in joined.groupby("tenant"):
        util, mem = g["gpu_util_pct"].dropna(), g["mem"].dropna()
        out[str(tenant)] = (
            round(float(util.mean()), 1) if len(util) else None,
            round(float(mem.mean()), 1) if len(mem) else None,
        )
    return out


def namespaces(
    assignments: pd.DataFrame, hourly: pd.DataFrame, since: float, until: float
) -> list[TenantUsage] | None:
    """Kubernetes namespaces as tenants, from the GPUs' assignments (dcgm-exporter's pod
    labels): GPU-hours held in the period, and utilisation and memory use while held. A GPU
    shared by two pods counts for both. None when no GPU was assigned to a namespace."""
    a = assignments[assignments["namespace"].astype(str) != ""]
    if a.empty:
        return None
    end = a["ts_to"].where(a["ts_to"].notna(), a["last_seen"])
    spans = pd.DataFrame({
        "tenant": a["namespace"].astype(str), "uuid": a["uuid"].astype(str),
        "start": a["ts_from"].clip(lower=since), "end": end.clip(upper=until),
    })  # fmt: skip
    spans = spans[spans["end"] > spans["start"]]
    hours = ((spans["end"] - spans["start"]) / 3600.0).groupby(spans["tenant"]).sum()
    total = float(hours.sum())
    use = use_during(hourly, spans, ["uuid"]) if len(hourly) else {}
    return [
        TenantUsage(
            tenant=str(ns), gpu_hours=round(float(h), 1),
            share_pct=round(100.0 * float(h) / total, 1) if total else 0.0,
            quota_gpus=None, quota_used_pct=None,
            gpu_util_pct=use.get(str(ns), (None, None))[0],
            memory_used_pct=use.get(str(ns), (None, None))[1],
        )
        for ns, h in hours.sort_values(ascending=False).items()
    ]  # fmt: skip


def cost(sched: Scheduler, price: float, currency: str) -> Cost | None:
    """Cost per tenant at one price per GPU-hour; None (left out) when no price is set."""
    if not (price > 0 and math.isfinite(price)):
        return None
    by_tenant = {t.tenant: round(t.gpu_hours * price, 2) for t in sched.by_tenant}
    return Cost(
        currency=currency,
        price_per_gpu_hour=price,
        total=round(sum(by_tenant.values()), 2),
        by_tenant=by_tenant,
    )
