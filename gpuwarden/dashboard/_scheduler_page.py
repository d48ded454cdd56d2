"""The Scheduler page: the bundled scheduler's queue, tenants, quotas, GPU-hours, preemptions.

Reads ``gpuwarden scheduler serve``'s API (``/v1/jobs``, ``/v1/quota``, ``/v1/billing``,
``/v1/audit``) with ``GPUWARDEN_SCHEDULER_TOKEN`` (an admin token sees every tenant) through
``_cache.api_get``, so a page rerun does not call the scheduler again within ``API_TTL_S``.
The frame functions take the API's JSON and are what the tests check. A job's GPUs count by
compute (a share or a MIG slice is its fraction of a GPU; see ``_gpus``). The week's
preemptions are counted exactly: ``/v1/audit?action=preempt&since=MONDAY``, paged back with
``before_id`` while a page is full, at most ``AUDIT_PAGES`` pages (then "at least N"). A
scheduler older than paging ignores those parameters and sends rows without ``id``: then the
count comes from its newest ``AUDIT_LIMIT`` rows, "at least" when they do not reach Monday.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from gpuwarden.dashboard import _cache
from gpuwarden.dashboard._api import Api, ApiError
from gpuwarden.dashboard._charts import bars_height
from gpuwarden.dashboard._decisions import fmt_utc
from gpuwarden.errors import InputError
from gpuwarden.scheduler.billing import billed_gpu_milli
from gpuwarden.scheduler.jobs import Job
from gpuwarden.scheduler.resources import GPU_MILLI

PRIORITIES = ("inference", "training", "batch", "dev")  # highest first
WEEK_S = 7 * 86400.0
AUDIT_LIMIT = 5000  # rows per /v1/audit request
AUDIT_PAGES = 20  # requests for one week's preemptions, at most


def week_start(now: float) -> float:
    """Monday 00:00 UTC of the week holding ``now`` (Unix s): "this week" for GPU-hours."""
    day = pd.Timestamp(now, unit="s", tz="UTC").normalize()
    return float((day - pd.Timedelta(days=day.day_of_week)).timestamp())


def queue_frame(jobs: list[dict[str, Any]], now: float) -> pd.DataFrame:
    """Queued jobs per priority (highest first): jobs, GPUs asked for, oldest wait (h)."""
    rows = []
    queued = [j for j in jobs if j["state"] == "queued"]
    for prio in PRIORITIES:
        mine = [j for j in queued if j["priority"] == prio]
        waits = [now - j["submitted_at"] for j in mine if j.get("submitted_at") is not None]
        rows.append(
            {
                "priority": prio,
                "jobs": len(mine),
                "gpus": sum(_gpus(j) for j in mine),
                "oldest_wait_h": max(waits) / 3600.0 if waits else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def _gpus(job: dict[str, Any]) -> float:
    """GPUs a job holds or asks for, all tasks together, by compute as the scheduler bills
    shares that declare no GPU memory (``billing.billed_gpu_milli``): a 250-milli share is
    0.25, a MIG 1g instance 1/7 of a GPU. A share that declares most of a GPU's memory is
    billed by that larger share (the job list carries no GPU sizes), so it counts low here.
    NaN for a job whose shape this version does not know (a MIG profile newer than it): the
    totals it is part of read "unknown" rather than too low."""
    try:
        shape = Job(
            job_id=str(job["job_id"]),
            tasks=job["tasks"],
            gpus_per_task=job["gpus_per_task"],
            gpu_milli=job["gpu_milli"],
            mig_profile=job.get("mig_profile"),
        )
    except (KeyError, InputError):
        return float("nan")
    return billed_gpu_milli(shape) / GPU_MILLI


def running_frame(jobs: list[dict[str, Any]]) -> pd.DataFrame:
    """Running jobs per tenant: jobs, GPUs held, interruptible jobs among them."""
    live = [j for j in jobs if j["state"] in ("running", "checkpointing")]
    if not live:
        return pd.DataFrame(columns=["tenant", "jobs", "gpus", "interruptible"])
    frame = pd.DataFrame(
        {
            "tenant": [j["tenant"] for j in live],
            "gpus": [_gpus(j) for j in live],
            "interruptible": [bool(j.get("interruptible")) for j in live],
        }
    )
    out = frame.groupby("tenant").agg(
        jobs=("gpus", "size"),
        gpus=("gpus", lambda g: g.sum(skipna=False)),  # a job of unknown shape: unknown, not 0
        interruptible=("interruptible", "sum"),
    )
    return out.reset_index().sort_values(["gpus", "tenant"], ascending=[False, True])


def quota_frame(quota: list[dict[str, Any]]) -> pd.DataFrame:
    """Per tenant: GPUs used, the quota, the guaranteed share and use as % of the quota."""
    if not quota:
        return pd.DataFrame(columns=["tenant", "used_gpus", "gpus", "guaranteed_gpus", "use_pct"])
    frame = pd.DataFrame(quota)[["tenant", "used_gpus", "gpus", "guaranteed_gpus"]]
    limit = frame["gpus"].astype(float)
    frame["use_pct"] = (100.0 * frame["used_gpus"] / limit.where(limit > 0)).round(1)
    return frame.sort_values("tenant").reset_index(drop=True)


def billing_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """GPU-hours per tenant (fractional shares and MIG slices count their part), most first."""
    if not rows:
        return pd.DataFrame(columns=["tenant", "gpu_hours", "jobs"])
    frame = pd.DataFrame(rows)
    out = frame.groupby("tenant").agg(gpu_hours=("gpu_hours", "sum"), jobs=("job_id", "nunique"))
    return out.reset_index().sort_values("gpu_hours", ascending=False).reset_index(drop=True)


def audit_reaches(audit: list[dict[str, Any]], since: float, limit: int) -> bool:
    """Whether ``audit`` (the newest ``limit`` rows an older ``/v1/audit`` gave) holds every row
    since ``since``: the log had fewer rows, or they reach back before ``since``. Such a
    scheduler has no cursor to read further back, so when this is False a count is a bound."""
    return len(audit) < limit or any(r["at"] < since for r in audit)


@dataclass(frozen=True)
class AuditRead:
    """Audit rows read for a count. ``whole``: every matching row is in ``rows``; ``paged``:
    the scheduler pages (its rows carry ``id``), so when not whole the page cap was hit."""

    rows: list[dict[str, Any]]
    whole: bool
    paged: bool


def read_preemptions(get: Callable[..., Any], since: float) -> AuditRead:
    """The preempt rows since ``since`` through ``get(path, *params)``: page after page while
    pages are full, up to ``AUDIT_PAGES``. An older scheduler ignores the filters (FastAPI
    drops unknown query parameters) and its rows have no ``id``: its newest ``AUDIT_LIMIT``
    rows of any action are all there is, whole only when they reach back to ``since``."""
    query = (("limit", AUDIT_LIMIT), ("action", "preempt"), ("since", since))
    page = get("/v1/audit", *query)
    if page and "id" not in page[0]:
        return AuditRead(page, audit_reaches(page, since, AUDIT_LIMIT), paged=False)
    rows = list(page)
    for _ in range(AUDIT_PAGES - 1):
        if len(page) < AUDIT_LIMIT:
            return AuditRead(rows, True, paged=True)
        page = get("/v1/audit", *query, ("before_id", rows[-1]["id"]))
        rows += page
    return AuditRead(rows, len(page) < AUDIT_LIMIT, paged=True)


def preemptions_frame(audit: list[dict[str, Any]], since: float) -> pd.DataFrame:
    """The scheduler's preempt actions since ``since``, newest first."""
    rows = [r for r in audit if r["action"] == "preempt" and r["at"] >= since]
    rows.sort(key=lambda r: r["at"], reverse=True)
    return pd.DataFrame(
        {
            "time": [fmt_utc(r["at"]) for r in rows],
            "job_id": [r.get("job_id") for r in rows],
            "node": [r.get("node") for r in rows],
            "gpu": [r.get("gpu") for r in rows],
            "actor": [r["actor"] for r in rows],
            "reason": [r.get("reason") or "" for r in rows],
        }
    )


def not_configured() -> None:
    st.info("No scheduler is configured: this page shows gpuwarden's bundled scheduler.")
    st.markdown("Point the dashboard at `gpuwarden scheduler serve` with an admin token:")
    st.code(
        "export GPUWARDEN_SCHEDULER_TOKEN=$GPUWARDEN_SCHEDULER_ADMIN_TOKEN\n"
        "gpuwarden dashboard --store sqlite:///gpuwarden.db --scheduler-url http://127.0.0.1:8477",
        language="sh",
    )


def page(api: Api | None, now: float) -> None:
    st.title("Scheduler")
    if api is None:
        not_configured()
        return
    if not api.token:
        st.warning(
            f"The scheduler at `{api.base_url}` needs a token for every read: "
            "set GPUWARDEN_SCHEDULER_TOKEN (an admin token sees every tenant)."
        )
        return
    since = week_start(now)
    try:
        get = lambda path, *params: _cache.api_get(api.base_url, path, params, api)  # noqa: E731
        jobs = get("/v1/jobs", ("state", "queued,running,checkpointing"))
        quota = get("/v1/quota")
        billing = get("/v1/billing", ("since", since), ("until", _cache.bucket(now)))
        audit = read_preemptions(get, since)
    except ApiError as exc:
        st.error(f"Cannot read the scheduler: {exc}")
        return
    st.caption(f"`{api.base_url}` · this week from {fmt_utc(since, '%a %Y-%m-%d')} · UTC")
    queue, running = queue_frame(jobs, now), running_frame(jobs)
    preempted = preemptions_frame(audit.rows, since)
    whole = audit.whole
    in_use = float(running["gpus"].sum(skipna=False)) if len(running) else 0.0
    cols = st.columns(4)
    cols[0].metric("Queued jobs", f"{int(queue['jobs'].sum()):,}")
    cols[1].metric("Running jobs", f"{int(running['jobs'].sum()) if len(running) else 0:,}")
    cols[2].metric("GPUs in use", f"{in_use:,.2f}" if in_use == in_use else "unknown")
    cols[3].metric(
        "Preemptions this week", f"{len(preempted):,}" if whole else f"at least {len(preempted):,}"
    )

    st.subheader("Queue")
    st.dataframe(queue, hide_index=True, key="sched_queue", column_config={
        "gpus": st.column_config.NumberColumn("GPUs asked", format="%.2f"),
        "oldest_wait_h": st.column_config.NumberColumn("oldest wait (h)", format="%.1f"),
    })  # fmt: skip
    st.subheader("Running jobs per tenant")
    st.dataframe(running, hide_index=True, key="sched_running", column_config={
        "gpus": st.column_config.NumberColumn("GPUs held", format="%.2f"),
    })  # fmt: skip
    st.subheader("Quota use")
    quotas = quota_frame(quota)
    if len(quotas):
        st.altair_chart(_quota_chart(quotas), width="stretch")
    st.dataframe(quotas, hide_index=True, key="sched_quota", column_config={
        "used_gpus": "GPUs used", "gpus": "quota (GPUs)", "guaranteed_gpus": "guaranteed",
        "use_pct": st.column_config.ProgressColumn("use", min_value=0, max_value=100, format="%.0f %%"),
    })  # fmt: skip
    st.subheader("GPU-hours this week")
    st.dataframe(billing_frame(billing), hide_index=True, key="sched_billing", column_config={
        "gpu_hours": st.column_config.NumberColumn("GPU-hours", format="%.2f"),
    })  # fmt: skip
    st.subheader("Preemptions this week")
    if not whole and audit.paged:
        st.caption(
            f"At least {len(preempted):,}: the page reads at most {AUDIT_PAGES} pages of "
            f"{AUDIT_LIMIT:,} preemptions, and this week has more."
        )
    elif not whole:
        st.caption(
            f"At least {len(preempted):,}: only the newest {AUDIT_LIMIT:,} audit events were "
            "read (this scheduler's /v1/audit cannot page further back), and they do not reach "
            f"back to {fmt_utc(since, '%a %Y-%m-%d %H:%M UTC')}."
        )
    if preempted.empty and whole:
        st.success("No job was preempted this week.")
    elif not preempted.empty:
        st.dataframe(preempted, hide_index=True, key="sched_preemptions")


def _quota_chart(quotas: pd.DataFrame) -> alt.LayerChart:
    """A bar per tenant (GPUs used) with its quota as a red tick."""
    base = alt.Chart(quotas).encode(y=alt.Y("tenant:N", title=None))
    used = base.mark_bar().encode(x=alt.X("used_gpus:Q", title="GPUs"), tooltip=list(quotas))
    limit = base.mark_tick(color="#d62728", thickness=3, size=18).encode(x="gpus:Q")
    return alt.LayerChart(layer=[used, limit], height=bars_height(len(quotas)))
