"""Build the facts document for a period from the store, the audit log and the scheduler.

    facts = build_facts(store, since, until, sources=FactSources(scheduler_db="sched.db"))
    print(facts.model_dump_json(indent=2))       # gpuwarden report --facts-only

The default period is the last full week (Monday 00:00 UTC to Monday 00:00 UTC). The week
before is built the same way (without its own comparison) for ``changes``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.health import VERDICT_COLUMNS, GpuState
from gpuwarden.planning.capacity import DEFAULT_BUFFER
from gpuwarden.reports import _capacity, _fleet, _idle, _sched, _spot, _usage
from gpuwarden.reports.model import Absent, Capacity, Change, Facts, Period
from gpuwarden.scheduler.sleep import SleepPolicy
from gpuwarden.store.base import ReadableStore
from gpuwarden.store.inventory import never_reported

WEEK_S = 7 * 86400.0


@dataclass(frozen=True)
class FactSources:
    """What the facts read besides the store; empty or zero: that section is left out."""

    audit_db: str = ""
    scheduler_db: str = ""
    gpu_hour_price: float = 0.0
    currency: str = "USD"
    grid_g_co2_per_kwh: float = 0.0
    capacity_buffer: float = DEFAULT_BUFFER
    prices: str = ""  # the capacity facts' TCO price file; empty: the shipped defaults
    sleep_policy: SleepPolicy = SleepPolicy()  # the idle-node sleep plan's policy


def last_full_week(now: float) -> tuple[float, float]:
    """Monday 00:00 UTC of the week before this one, and of this one."""
    today = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    monday = today - timedelta(days=today.weekday())
    return (monday - timedelta(days=7)).timestamp(), monday.timestamp()


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_facts(
    store: ReadableStore,
    since: float,
    until: float,
    *,
    sources: FactSources = FactSources(),
    now: float | None = None,
    compare: bool = True,
    previous: Facts | None = None,
    progress: bool = False,
) -> Facts:
    """The facts of ``[since, until)``. ``compare``: also the changes against the period
    before, taken from ``previous`` (the last report's facts.json) when it covers exactly that
    period, else built here (a second read of the store)."""
    if not until > since:
        raise InputError(
            f"the report period must end after it starts ({_iso(since)} .. {_iso(until)})"
        )
    now = time.time() if now is None else now
    span = until - since
    # a TSDB store lists the GPUs of its lookback (days back from now): the inventory needs
    # those silent up to LOOKBACK_S before this period and the one before it, and first samples
    reach_back = getattr(store, "reach_back", None)
    if reach_back is not None:
        reach_back(since - (span if compare else 0.0) - _fleet.LOOKBACK_S)
    before: Facts | None = None
    held: pd.DataFrame | None = None
    if compare:
        if previous is not None and (previous.period.since_ts, previous.period.until_ts) == (
            since - span,
            since,
        ):
            before = previous
        else:  # the week before first: its verdicts in force at its end are this one's start
            before, held = _facts(store, since - span, since, sources, now)
    facts, _ = _facts(store, since, until, sources, now, with_plan=compare, progress=progress,
                      held=held)  # fmt: skip
    if before is not None:
        facts = facts.model_copy(update={"changes": changes(before, facts)})
    return facts


def _facts(
    store: ReadableStore,
    since: float,
    until: float,
    sources: FactSources,
    now: float,
    *,
    with_plan: bool = False,
    progress: bool = False,
    held: pd.DataFrame | None = None,
) -> tuple[Facts, pd.DataFrame]:
    """The facts of ``[since, until)`` without changes (``with_plan``: with the capacity plan), and
    each GPU's newest verdict before ``until``; ``held``: each GPU's newest before ``since``,
    where the caller has it already."""
    absent: list[Absent] = []
    gpus = store.gpus()
    hourly = store.read_window(
        start=since, end=until, fields=list(_usage.USAGE_FIELDS), resolution_s=3600,
        progress=progress,
    )  # fmt: skip
    # categories: the groupings over a million hourly rows run on integer codes, not strings
    hourly = hourly[(hourly["ts"] >= since) & (hourly["ts"] < until)].astype(
        {"hostname": "category", "uuid": "category", "model": "category"}
    )
    # devices only events named (a memory-error log, a kernel log) were never read: no
    # availability, no inventory change. Ask the store only of the boards the period should
    # have had (``_fleet.expected``: long-retired ones count nowhere) that its hours lack
    near = _fleet.expected(gpus, since, until) if len(gpus) else gpus
    doubt = near[~near["uuid"].isin(hourly["uuid"].unique())] if len(near) else near
    gpus = gpus[~gpus["uuid"].isin(doubt["uuid"][never_reported(store, doubt)])]
    verdicts = _verdicts(store, since, until, held)
    period_verdicts = verdicts[verdicts["ts"] >= since]
    events = store.read_events(start=since, end=until)
    failed = store.read_failures(start=since, end=until)
    fail_verdicts = (
        store.read_verdicts(
            start=since - _fleet.LOOKBACK_S, end=until, uuids=sorted(set(failed["uuid"]))
        )
        if len(failed)
        else verdicts.iloc[:0]
    )
    latest = _newest_now(store, verdicts, since, until)
    if verdicts.empty:
        absent.append(Absent(section="verdicts", why="the store holds no verdicts for this period "
                             "(gpuwarden score --step 1h --into STORE backfills them)"))  # fmt: skip
    availability = _fleet.availability(gpus, hourly, verdicts, since, until)
    if availability is None:
        absent.append(Absent(section="availability", why="no GPU reported in this period"))
    utilisation = _usage.utilisation(hourly)
    if utilisation is None:
        absent.append(Absent(section="utilisation", why="no GPU utilisation readings"))
    energy = _usage.energy(hourly, sources.grid_g_co2_per_kwh)
    if energy is None:
        absent.append(Absent(section="energy", why="no power readings"))
    elif energy.co2_kg is None:
        absent.append(Absent(section="co2", why="no grid intensity set (grid_intensity_g_per_kwh)"))
    sleep, why = _idle.idle_sleep(hourly, since, until, sources.sleep_policy)
    if why is not None:
        absent.append(why)
    sched = cost = waits = spot = None
    plan: Capacity | None = None
    inventory = _fleet.inventory(gpus, since, until)
    if sources.scheduler_db:
        sched = _sched.scheduler(sources.scheduler_db, since, until, now, hourly)
        cost = _sched.cost(sched, sources.gpu_hour_price, sources.currency)
        if cost is None:
            absent.append(Absent(section="cost", why="no price per GPU-hour set (gpu_hour_price)"))
        waits, why = _idle.queue_waits(sources.scheduler_db, since, until)
        if why is not None:
            absent.append(why)
        spot, why = _spot.spot(sources.scheduler_db, since, until, now, sources.prices)
        if why is not None:
            absent.append(why)
    else:
        absent.append(Absent(section="scheduler", why="no bundled scheduler database (scheduler_db): "
                             "no queue wait, preemptions, GPU-hours or cost by tenant"))  # fmt: skip
    namespaces = _sched.namespaces(
        store.read_assignments(start=since, end=until), hourly, since, until
    )
    transitions = period_verdicts[period_verdicts["changed_from"].notna()]
    alerts = _sched.alerts(transitions, sources.audit_db, since, until)
    if alerts.retags_ok is None:
        absent.append(Absent(section="re-tags", why="no audit log (audit_db)"))
    if sources.scheduler_db and with_plan:  # the week before is for ``changes``: no plan
        plan, why = _capacity.capacity(
            sources.scheduler_db, now, inventory.gpus_by_model, utilisation,
            _capacity.CapacitySettings(sources.capacity_buffer, sources.prices),
        )  # fmt: skip
        if why is not None:
            absent.append(why)
    elif with_plan:
        absent.append(Absent(section="capacity", why="no bundled scheduler database "
                             "(scheduler_db): no demand history to plan capacity from"))  # fmt: skip
    facts = Facts(
        generated=_iso(now),
        period=Period(
            since=_iso(since),
            until=_iso(until),
            since_ts=since,
            until_ts=until,
            hours=round((until - since) / 3600.0, 2),
        ),  # fmt: skip
        inventory=inventory,
        availability=availability,
        failures=_fleet.failures(
            failed, fail_verdicts, dict(zip(gpus["uuid"], gpus["model"], strict=False))
        ),
        risk=_fleet.risk(latest, verdicts, gpus, since, until),
        alerts=alerts,
        xids=_fleet.xids(events),
        memory_errors=_fleet.memory_errors(events),
        utilisation=utilisation,
        scheduler=sched,
        namespaces=namespaces,
        cost=cost,
        energy=energy,
        capacity=plan,
        sleep=sleep,
        queue_wait_by_model=waits,
        spot=spot,
        changes=[],
        absent=absent,
    )
    return facts, latest


def _verdicts(
    store: ReadableStore, since: float, until: float, held: pd.DataFrame | None
) -> pd.DataFrame:
    """Each GPU's newest verdict before the period (``held``, or read), then every verdict in
    it."""
    before = store.read_verdicts(end=since, latest=True) if held is None else held
    # the states change rarely and serve writes a heartbeat verdict per GPU every hour: the
    # facts carry states forward, so the changes are all they need (1.7 million rows a week at
    # 10,000 GPUs become a few thousand)
    during = store.read_verdicts(start=since, end=until, changes=True)
    frames = [f for f in (before, during) if len(f)]
    if not frames:
        return pd.DataFrame(columns=list(VERDICT_COLUMNS))
    return pd.concat(frames, ignore_index=True)


def _newest_now(
    store: ReadableStore, verdicts: pd.DataFrame, since: float, until: float
) -> pd.DataFrame:
    """Each GPU's newest verdict before ``until``: the state from ``verdicts`` (the one held
    at ``since`` and the changes after), and for the GPUs not ok with a verdict in the period
    that verdict itself, read again (their risk and reasons move with every heartbeat)."""
    newest = _newest(verdicts)
    moved = newest[(newest["state"].astype(str) != str(GpuState.OK)) & (newest["ts"] >= since)]
    if moved.empty:
        return newest
    fresh = store.read_verdicts(
        start=since, end=until, latest=True, uuids=sorted(set(moved["uuid"].astype(str)))
    )
    if fresh.empty:
        return newest
    rest = newest[~newest["uuid"].astype(str).isin(set(fresh["uuid"].astype(str)))]
    both = pd.concat([rest, fresh], ignore_index=True)
    return both.sort_values(["ts", "hostname", "gpu"], kind="stable", ignore_index=True)


def _newest(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Each GPU's newest verdict (``read_verdicts(latest=True)`` at the period's end: the
    newest before it, or in it), ordered as the stores order theirs (ts, hostname, gpu)."""
    newest = verdicts.sort_values("ts", kind="stable").drop_duplicates("uuid", keep="last")
    return newest.sort_values(["ts", "hostname", "gpu"], kind="stable", ignore_index=True)


def headline(f: Facts) -> dict[str, tuple[float | None, str]]:
    """The period's headline numbers, by name: what ``changes`` compares week on week."""
    out: dict[str, tuple[float | None, str]] = {
        "GPUs": (float(f.inventory.gpus), "GPUs"),
        "failures": (float(f.failures.failures), "failures"),
        "Xids": (float(f.xids.xids), "Xids"),
        "verdict transitions": (float(f.alerts.transitions), "transitions"),
        "GPUs at risk or unhealthy": (float(f.risk.at_risk_gpus + f.risk.unhealthy_gpus), "GPUs"),
    }
    if f.availability:
        out["fleet availability"] = (f.availability.fleet_availability_pct, "%")
    if f.utilisation:
        out["fleet GPU utilisation"] = (f.utilisation.fleet_gpu_util_pct, "%")
    if f.energy:
        out["energy"] = (f.energy.energy_kwh, "kWh")
    if f.scheduler:
        out["queue wait p95"] = (f.scheduler.queue_wait_p95_min, "min")
        out["preemptions"] = (float(f.scheduler.preemptions), "preemptions")
        out["GPU-hours allocated"] = (f.scheduler.gpu_hours, "GPU-hours")
    return out


def changes(before: Facts, after: Facts, top: int = 6) -> list[Change]:
    """The headline numbers that moved most against the period before (absolute change in %
    where the earlier value is not zero; new non-zero values first)."""
    old, new = headline(before), headline(after)
    found: list[Change] = []
    for name, (value, unit) in new.items():
        prev = old.get(name, (None, unit))[0]
        if value is None or prev is None or value == prev:
            continue
        pct = round(100.0 * (value - prev) / abs(prev), 1) if prev else None
        found.append(Change(metric=name, unit=unit, before=prev, after=value, change_pct=pct))
    found.sort(key=lambda c: -(abs(c.change_pct) if c.change_pct is not None else 1e9))
    return found[:top]
