"""The facts document: everything the weekly report says, computed by code, typed and versioned.

The LLM sees this document (``Facts.model_dump_json``) and nothing else, and the claim checker
compares its text against it, so every section is plain numbers with units in the field names.
A section whose data is absent (no scheduler database, no price, no grid intensity, no audit
log) is ``None`` and listed in ``absent`` with the reason, which the report prints: missing is
never shown as zero. ``capacity`` comes from the capacity planner (``gpuwarden.planning``) on
the scheduler database's demand history, per GPU model.

Bump ``FACTS_VERSION`` when a field changes meaning or goes away; adding a field does not.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

#: 2: capacity is a typed section; 3: the sleep plan, queue wait per model; 4: a failure with no
#: verdict before it is not watched, no longer missed
FACTS_VERSION = 4


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Period(_Frozen):
    since: str  # ISO 8601, UTC
    until: str
    since_ts: float
    until_ts: float
    hours: float


class GpuRef(_Frozen):
    hostname: str
    gpu: int
    uuid: str
    model: str
    #: in the inventory: the day an added board first reported, or a missing one last did
    date: str | None = None


class Replacement(_Frozen):
    hostname: str
    gpu: int
    old_uuid: str
    new_uuid: str
    model: str
    date: str


class Inventory(_Frozen):
    gpus: int
    nodes: int
    gpus_by_model: dict[str, int]
    slots: dict[str, list[int]]  # host -> its GPU indexes
    added: list[GpuRef]
    replaced: list[Replacement]
    missing: list[GpuRef]


class NodeAvailability(_Frozen):
    hostname: str
    gpus: int
    availability_pct: float
    downtime_h: float


class ModelAvailability(_Frozen):
    model: str
    gpus: int
    availability_pct: float
    downtime_h: float


class Availability(_Frozen):
    """A GPU slot is up in an hour when it reported in that hour and its verdict was not
    unhealthy; downtime is GPU-hours of the period that were not up."""

    fleet_availability_pct: float
    fleet_downtime_h: float
    by_node: list[NodeAvailability]
    by_model: list[ModelAvailability]


class FailureFact(_Frozen):
    hostname: str
    gpu: int
    uuid: str
    model: str
    date: str
    kind: str
    xid: int | None
    caught: bool
    flagged_date: str | None
    lead_time_h: float | None
    flag_cause: str | None
    #: a verdict on this GPU was stored in the lookback before it failed (else it was not
    #: watched: neither caught nor missed)
    watched: bool = True
    #: the highest risk its verdicts held in the lookback before it failed (None: unknown)
    peak_risk: float | None = None


class Failures(_Frozen):
    failures: int
    caught: int
    missed: int  # watched, and not flagged before it failed
    unwatched: int = 0
    #: missed, but its risk came near the line (at least ``NEAR_LINE`` of it): a lower line or
    #: a model trained on the fleet might have caught it; the rest showed little before failing
    missed_near: int = 0
    median_lead_time_h: float | None
    items: list[FailureFact]


class AtRiskGpu(_Frozen):
    hostname: str
    gpu: int
    uuid: str
    model: str
    state: str
    risk: float | None
    since_date: str | None
    reasons: list[str]
    action: str


class Risk(_Frozen):
    at_risk_gpus: int
    unhealthy_gpus: int
    gpus: list[AtRiskGpu]
    #: daily counts of GPUs whose newest verdict that day was at-risk / unhealthy
    daily: list[tuple[str, int, int]]


class Alerts(_Frozen):
    """From the stored verdicts' transitions; re-tags from the audit log when there is one."""

    transitions: int
    to_at_risk: int
    to_unhealthy: int
    to_ok: int
    hard_signal_transitions: int
    retags_ok: int | None
    retags_failed: int | None
    retags_by_hook: dict[str, int] | None


class XidCount(_Frozen):
    code: int
    name: str
    xid_class: str
    count: int
    gpus: int
    action: str


class Xids(_Frozen):
    xids: int
    by_code: list[XidCount]
    by_class: dict[str, int]
    hard_signals: dict[str, int]


class EccCount(_Frozen):
    ecc: str  # CE (corrected), UER (uncorrectable, recoverable), UEO (uncorrectable, other)
    errors: int
    devices: int


class MemoryErrors(_Frozen):
    """Per-address HBM errors of the period (``ingest --memory-errors``), by ECC type."""

    errors: int
    uncorrectable: int
    devices: int
    by_type: list[EccCount]


class ModelUsage(_Frozen):
    model: str
    #: boards that reported in the period (a board swapped in a slot counts apart)
    gpus: int
    gpu_util_pct: float | None
    memory_used_pct: float | None
    energy_kwh: float | None


class Utilisation(_Frozen):
    fleet_gpu_util_pct: float | None
    fleet_memory_used_pct: float | None
    by_model: list[ModelUsage]
    idle_gpus: int  # GPUs whose mean utilisation stayed below 5 %


class TenantUsage(_Frozen):
    tenant: str
    gpu_hours: float
    share_pct: float
    quota_gpus: float | None
    quota_used_pct: float | None  # mean GPUs held / quota GPUs
    #: telemetry of the GPUs its tasks held, while they held them (None: no task matched)
    gpu_util_pct: float | None = None
    memory_used_pct: float | None = None


class Scheduler(_Frozen):
    jobs_started: int
    queue_wait_median_min: float | None
    queue_wait_p95_min: float | None
    jobs_waiting: int
    preemptions: int
    gpu_hours: float
    capacity_gpu_hours: float
    allocated_pct: float
    by_tenant: list[TenantUsage]


class Cost(_Frozen):
    currency: str
    price_per_gpu_hour: float
    total: float
    by_tenant: dict[str, float]


class Energy(_Frozen):
    energy_kwh: float
    gpu_hours_measured: float
    grid_g_co2_per_kwh: float | None
    co2_kg: float | None


class ModelCapacity(_Frozen):
    """One GPU model's plan, as ``gpuwarden plan should-scale`` decides it on the same
    history: demand (GPUs wanted on average per hour) forecast for the next week, and what to
    do. ``action``: add ``change_gpus`` in ``in_weeks`` weeks (0: now), release
    ``change_gpus``, or hold (0)."""

    model: str
    gpus: int  # now, from the inventory (0: the fleet has none of this model)
    forecast_mean_gpus: float  # mean over the next 168 hours
    forecast_peak_gpus: float  # busiest forecast hour
    forecast_low_gpus: float  # lowest hourly bound of the interval
    forecast_high_gpus: float  # highest hourly bound of the interval
    seasons: str  # "daily+weekly" or "daily": the periods the forecast modelled
    growth_monthly_pct: float | None  # measured over up to six months; None: not measurable
    peak_need_gpus: float  # the plan's busiest week, buffer included
    action: str  # add, release, hold
    change_gpus: int
    in_weeks: int
    reason: str
    #: utilisation above which owning is cheaper than cloud on-demand (None: no prices for
    #: the model, or never within 0-100 %)
    break_even_own_pct: float | None = None
    break_even_reserved_pct: float | None = None
    gpu_util_pct: float | None = None  # measured this period, from utilisation.by_model


class Capacity(_Frozen):
    history_hours: int  # hours of demand history in the scheduler database
    trained_hours: int  # the latest of them the forecast learned from
    interval_level_pct: float
    buffer: float
    plan_weeks: int
    lead_weeks: int
    release_margin_pct: float
    prices: str  # the price file the break-even figures come from
    fleet_gpu_util_pct: float | None
    by_model: list[ModelCapacity]


class SleepNode(_Frozen):
    hostname: str
    gpus: int
    hours_asleep: int  # hours of the window the policy would have had it asleep
    window_util_pct: float | None  # its GPUs' mean utilisation in the window's hours
    kwh_saved: float


class IdleSleep(_Frozen):
    """The scheduler's idle-node sleep policy replayed over the period's hourly readings
    (``planning.sleep_plan``): a node below ``below_util_pct`` in a window hour sleeps, except
    the calmest keep ``headroom_gpus`` GPUs awake. kWh saved: its GPUs' measured energy plus
    the assumed ``node_base_w`` less ``node_sleep_w``, per node-hour asleep."""

    window: str  # "02:00-06:00 and weekends", local time
    utc_offset_h: float
    below_util_pct: float
    headroom_gpus: int
    window_hours: int  # hours of the period inside the window
    node_base_w: float
    node_sleep_w: float
    nodes: int
    nodes_sleeping: int  # nodes asleep at least one hour
    node_hours_asleep: int
    gpu_kwh: float  # the GPUs' measured energy in the period
    kwh_saved: float
    kwh_saved_per_week: float
    wake_at: str  # HH:MM local: the Wake-on-LAN packet, a cold start before the window ends
    by_node: list[SleepNode]


class ModelWait(_Frozen):
    """Measured queue wait of the GPU jobs submitted in the period (``planning.queuewait``);
    jobs still waiting at the period's end count with their wait so far (lower bounds)."""

    model: str
    jobs: int
    wait_p50_min: float
    wait_p90_min: float
    still_waiting: int


class SpotModel(_Frozen):
    """One GPU model's spot nodes: GPU-hours held there and what they cost at the price file's
    on-demand and spot rates (None: the price file has no such model)."""

    model: str
    gpus: int
    gpu_hours: float
    on_demand_per_gpu_hour: float | None
    spot_per_gpu_hour: float | None
    on_demand_cost: float | None
    spot_cost: float | None
    saved: float | None


class Spot(_Frozen):
    """Spot capacity in the bundled scheduler (``reports._spot``): the GPU-hours its spot nodes
    held in the period, the reclaims and the work they threw away, and the saving against
    paying on-demand for the same GPU-hours."""

    nodes: int  # spot nodes registered
    gpus: int
    gpu_hours: float  # held on spot nodes in the period
    interruptible_gpu_hours: float  # held by interruptible jobs anywhere
    interruptible_on_spot_pct: float | None  # of those, the share on spot
    critical_gpu_hours_on_spot: float  # non-interruptible work on spot: the policy says 0
    reclaims: int
    reclaimed_nodes: list[str]
    jobs_evicted: int  # jobs a reclaim checkpointed and queued again
    gpu_hours_lost: float  # work since each evicted job's last checkpoint
    currency: str
    saved: float | None  # against on-demand for the same GPU-hours (None: no model priced)
    saved_pct: float | None
    prices: str  # the price file
    by_model: list[SpotModel]


class Change(_Frozen):
    metric: str
    unit: str
    before: float
    after: float
    change_pct: float | None


class Absent(_Frozen):
    section: str
    why: str


class Facts(_Frozen):
    version: int = FACTS_VERSION
    generated: str
    period: Period
    inventory: Inventory
    availability: Availability | None
    failures: Failures
    risk: Risk
    alerts: Alerts
    xids: Xids
    utilisation: Utilisation | None
    scheduler: Scheduler | None
    #: Kubernetes namespaces as tenants, from the GPUs' pod assignments (no scheduler needed)
    namespaces: list[TenantUsage] | None = None
    cost: Cost | None
    energy: Energy | None
    capacity: Capacity | None = None
    sleep: IdleSleep | None = None
    queue_wait_by_model: list[ModelWait] | None = None
    spot: Spot | None = None
    #: HBM error events of the period (a Calchas-format log); None when the store holds none
    memory_errors: MemoryErrors | None = None
    changes: list[Change]
    absent: list[Absent]
