"""The facts document flattened into atoms: (entity, metric, value, dimension), plus the dates
and names each entity has. The claim checker matches what a text says against these.

Entities: ``fleet``; ``host:NAME``; ``gpu:HOST/INDEX``; ``model:NAME``; ``tenant:NAME``;
``xid:CODE``. Dimensions, each in one canonical unit: ``pct``, ``hours``, ``kwh``, ``kg``,
``gpu_hours``, ``money``, ``count``, ``ratio`` (a risk score 0..1) and ``g_per_kwh``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpuwarden.reports._fleet import LOOKBACK_S
from gpuwarden.reports._usage import IDLE_UTIL_PCT
from gpuwarden.reports._vocab import CHANGE_METRICS
from gpuwarden.reports.model import Facts

FLEET = "fleet"


@dataclass(frozen=True)
class Atom:
    entity: str
    metric: str
    value: float
    dim: str


@dataclass
class Index:
    """What the facts hold, keyed for the checker."""

    atoms: dict[str, list[Atom]] = field(default_factory=lambda: defaultdict(list))
    dates: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    hosts: set[str] = field(default_factory=set)
    slots: set[tuple[str, int]] = field(default_factory=set)
    uuids: dict[str, str] = field(default_factory=dict)  # uuid -> gpu entity
    models: set[str] = field(default_factory=set)
    tenants: set[str] = field(default_factory=set)
    xids: set[int] = field(default_factory=set)
    period_dates: set[str] = field(default_factory=set)
    year: int = 1970
    month: int = 1

    def add(self, entity: str, metric: str, value: float | None, dim: str) -> None:
        if value is not None:
            self.atoms[entity].append(Atom(entity, metric, float(value), dim))


def gpu_entity(hostname: str, index: int) -> str:
    return f"gpu:{hostname}/{index}"


def index(f: Facts, catalogue: set[int] | None = None) -> Index:
    ix = Index()
    ix.year, ix.month = int(f.period.until[:4]), int(f.period.until[5:7])
    g = FLEET
    ix.add(g, "period", f.period.hours, "hours")
    last_day = datetime.fromtimestamp(f.period.until_ts - 1, UTC).strftime("%Y-%m-%d")
    ix.period_dates.update({f.period.since[:10], f.period.until[:10], last_day})
    inv = f.inventory
    ix.add(g, "gpus", inv.gpus, "count")
    ix.add(g, "nodes", inv.nodes, "count")
    ix.add(g, "added", len(inv.added), "count")
    ix.add(g, "replaced", len(inv.replaced), "count")
    ix.add(g, "missing", len(inv.missing), "count")
    ix.add(g, "models", len(inv.gpus_by_model), "count")
    for host, indexes in inv.slots.items():
        ix.hosts.add(host)
        ix.slots.update((host, i) for i in indexes)
    for model, n in inv.gpus_by_model.items():
        ix.models.add(model)
        ix.add(f"model:{model}", "gpus", n, "count")
    for ref in [*inv.added, *inv.missing]:
        e = _gpu(ix, ref.hostname, ref.gpu, ref.uuid)
        if ref.date:  # "node7 GPU 3 went missing on 2026-12-03"
            ix.dates[e].add(ref.date)
            ix.dates[f"host:{ref.hostname}"].add(ref.date)
    for r in inv.replaced:
        e = _gpu(ix, r.hostname, r.gpu, r.new_uuid)
        ix.uuids[r.old_uuid] = e
        ix.dates[e].add(r.date)
        ix.dates[f"host:{r.hostname}"].add(r.date)
    if f.availability:
        a = f.availability
        ix.add(g, "availability", a.fleet_availability_pct, "pct")
        ix.add(g, "downtime", a.fleet_downtime_h, "hours")
        for node in a.by_node:
            ix.hosts.add(node.hostname)
            ix.add(f"host:{node.hostname}", "availability", node.availability_pct, "pct")
            ix.add(f"host:{node.hostname}", "downtime", node.downtime_h, "hours")
            ix.add(f"host:{node.hostname}", "gpus", node.gpus, "count")
        for ma in a.by_model:
            ix.models.add(ma.model)
            ix.add(f"model:{ma.model}", "availability", ma.availability_pct, "pct")
            ix.add(f"model:{ma.model}", "downtime", ma.downtime_h, "hours")
    fl = f.failures
    ix.add(g, "failures", fl.failures, "count")
    ix.add(g, "caught", fl.caught, "count")
    ix.add(g, "missed", fl.missed, "count")
    ix.add(g, "unwatched", fl.unwatched, "count")
    # how far before a failure a verdict counts ("no verdict in the two weeks before")
    ix.add(g, "lookback", LOOKBACK_S / 3600.0, "hours")
    ix.add(g, "missed_near", fl.missed_near, "count")
    ix.add(g, "lead_time", fl.median_lead_time_h, "hours")
    per_host: dict[str, int] = defaultdict(int)
    for item in fl.items:
        e = _gpu(ix, item.hostname, item.gpu, item.uuid)
        per_host[item.hostname] += 1
        for ent in (e, f"host:{item.hostname}"):
            ix.dates[ent].add(item.date)
            if item.flagged_date:
                ix.dates[ent].add(item.flagged_date)
            ix.add(ent, "lead_time", item.lead_time_h, "hours")
            if item.xid is not None:
                ix.add(ent, "xid_code", item.xid, "count")
        ix.dates[g].add(item.date)
        if item.xid is not None:
            ix.xids.add(item.xid)
    for host, n in per_host.items():
        ix.add(f"host:{host}", "failures", n, "count")
    rk = f.risk
    ix.add(g, "risk_now", rk.at_risk_gpus, "count")
    ix.add(g, "bad_now", rk.unhealthy_gpus, "count")
    ix.add(g, "flagged", rk.at_risk_gpus + rk.unhealthy_gpus, "count")
    for d, n_risk, n_bad in rk.daily:
        ix.dates[g].add(d)
        ix.add(g, "at_risk_daily", n_risk, "count")
        ix.add(g, "unhealthy_daily", n_bad, "count")
    for gpu in rk.gpus:
        e = _gpu(ix, gpu.hostname, gpu.gpu, gpu.uuid)
        ix.add(e, "risk", gpu.risk, "ratio")
        if gpu.since_date:
            ix.dates[e].add(gpu.since_date)
    al = f.alerts
    for metric in ("transitions", "to_at_risk", "to_unhealthy", "to_ok", "hard_signal_transitions",
                   "retags_ok", "retags_failed"):  # fmt: skip
        ix.add(g, metric, getattr(al, metric), "count")
    if al.retags_ok is not None:
        ix.add(g, "retags", al.retags_ok + (al.retags_failed or 0), "count")
    x = f.xids
    ix.add(g, "xids", x.xids, "count")
    ix.add(g, "xid_codes", len(x.by_code), "count")
    for c in x.by_code:
        ix.xids.add(c.code)
        ix.add(f"xid:{c.code}", "xids", c.count, "count")
        ix.add(f"xid:{c.code}", "gpus", c.gpus, "count")
    for cls, n in x.by_class.items():
        ix.add(g, f"xids_{cls}", n, "count")
    for name, n in x.hard_signals.items():
        ix.add(g, "hard_signals", n, "count")
        ix.add(g, f"hard_{name}", n, "count")
    ix.add(g, "hard_signals", sum(x.hard_signals.values()), "count")
    if (hbm := f.memory_errors) is not None:
        ix.add(g, "memory_errors", hbm.errors, "count")
        ix.add(g, "memory_errors", hbm.uncorrectable, "count")
        ix.add(g, "memory_devices", hbm.devices, "count")
        for ecc in hbm.by_type:
            ix.add(g, "memory_errors", ecc.errors, "count")
            ix.add(g, "memory_devices", ecc.devices, "count")
    if f.utilisation:
        u = f.utilisation
        _fields(ix, g, u, USAGE)
        ix.add(g, "idle", u.idle_gpus, "count")
        ix.add(g, "idle", IDLE_UTIL_PCT, "pct")  # what "idle" means: "under 5% utilisation"
        for m in u.by_model:
            ix.models.add(m.model)
            _fields(ix, f"model:{m.model}", m, MODEL_USAGE)
    if f.energy:
        _fields(ix, g, f.energy, ENERGY)
    if f.scheduler:
        s = f.scheduler
        _fields(ix, g, s, SCHEDULER)
        ix.add(g, "queue_wait_median", _h(s.queue_wait_median_min), "hours")
        ix.add(g, "queue_wait_p95", _h(s.queue_wait_p95_min), "hours")
        for t in s.by_tenant:
            ix.tenants.add(t.tenant)
            _fields(ix, f"tenant:{t.tenant}", t, TENANT)
    for t in f.namespaces or []:
        ix.tenants.add(t.tenant)
        _fields(ix, f"tenant:{t.tenant}", t, TENANT)
    if f.cost:
        ix.add(g, "cost", f.cost.total, "money")
        ix.add(g, "price", f.cost.price_per_gpu_hour, "money")
        for tenant, amount in f.cost.by_tenant.items():
            ix.add(f"tenant:{tenant}", "cost", amount, "money")
    if f.capacity:
        cap = f.capacity
        ix.add(g, "buffer", cap.buffer, "count")
        ix.add(g, "plan_weeks", cap.plan_weeks * 168.0, "hours")
        ix.add(g, "lead_time", cap.lead_weeks * 168.0, "hours")
        ix.add(g, "history", cap.history_hours, "hours")
        ix.add(g, "interval", cap.interval_level_pct, "pct")
        for mc in cap.by_model:
            ix.models.add(mc.model)
            e = f"model:{mc.model}"
            _fields(ix, e, mc, MODEL_CAPACITY)
            ix.add(e, "buffer", cap.buffer, "count")
            ix.add(e, mc.action, mc.change_gpus if mc.action != "hold" else None, "count")
            ix.add(e, "in_weeks", mc.in_weeks * 168.0 if mc.action == "add" else None, "hours")
            # the decision's reason names the first short week by its date
            ix.dates[e].update(re.findall(r"\b\d{4}-\d{2}-\d{2}\b", mc.reason))
    if f.sleep:
        z = f.sleep
        _fields(ix, g, z, SLEEP)
        for sn in z.by_node:
            ix.hosts.add(sn.hostname)
            _fields(ix, f"host:{sn.hostname}", sn, SLEEP_NODE)
    for w in f.queue_wait_by_model or []:
        ix.models.add(w.model)
        _fields(ix, f"model:{w.model}", w, MODEL_WAIT)
        ix.add(f"model:{w.model}", "wait_p50", _h(w.wait_p50_min), "hours")
        ix.add(f"model:{w.model}", "wait_p90", _h(w.wait_p90_min), "hours")
    if f.spot:
        sp = f.spot
        _fields(ix, g, sp, SPOT)
        for name in sp.reclaimed_nodes:
            ix.hosts.add(name)
        for sm in sp.by_model:
            ix.models.add(sm.model)
            _fields(ix, f"model:{sm.model}", sm, SPOT_MODEL)
    for ch in f.changes:
        dim = _CHANGE_DIMS.get(ch.unit, "count")
        scale = 1 / 60.0 if ch.unit == "min" else 1.0
        own = f"_{CHANGE_METRICS[ch.metric]}" if ch.metric in CHANGE_METRICS else ""
        ix.add(g, f"previous{own}", ch.before * scale, dim)
        ix.add(g, f"change{own}", abs(ch.after - ch.before) * scale, dim)
        pct = abs(ch.change_pct) if ch.change_pct is not None else None
        ix.add(g, f"change{own}", pct, "pct")
    if catalogue:
        ix.xids |= catalogue
    return ix


#: metric -> (field, dimension) of the sections read field by field
USAGE = {"util": ("fleet_gpu_util_pct", "pct"), "memory": ("fleet_memory_used_pct", "pct")}
MODEL_USAGE = {"util": ("gpu_util_pct", "pct"), "memory": ("memory_used_pct", "pct"),
               "energy": ("energy_kwh", "kwh"), "gpus": ("gpus", "count")}  # fmt: skip
ENERGY = {"energy": ("energy_kwh", "kwh"), "co2": ("co2_kg", "kg"),
          "grid": ("grid_g_co2_per_kwh", "g_per_kwh"),
          "gpu_hours_measured": ("gpu_hours_measured", "gpu_hours")}  # fmt: skip
SCHEDULER = {"jobs": ("jobs_started", "count"), "jobs_waiting": ("jobs_waiting", "count"),
             "preemptions": ("preemptions", "count"), "gpu_hours": ("gpu_hours", "gpu_hours"),
             "capacity": ("capacity_gpu_hours", "gpu_hours"), "allocated": ("allocated_pct", "pct")}  # fmt: skip
#: the capacity plan of a GPU model; the forecast's figures all answer to "forecast"
MODEL_CAPACITY = {"forecast": ("forecast_mean_gpus", "count"), "forecast_peak": ("forecast_peak_gpus", "count"),
                  "forecast_low": ("forecast_low_gpus", "count"), "forecast_high": ("forecast_high_gpus", "count"),
                  "need": ("peak_need_gpus", "count"), "growth": ("growth_monthly_pct", "pct"),
                  "break_even": ("break_even_own_pct", "pct"),
                  "break_even_reserved": ("break_even_reserved_pct", "pct"),
                  "util": ("gpu_util_pct", "pct"), "gpus": ("gpus", "count")}  # fmt: skip
SLEEP = {"sleep_nodes": ("nodes_sleeping", "count"), "sleep_hours": ("node_hours_asleep", "hours"),
         "sleep_threshold": ("below_util_pct", "pct"), "sleep_saved": ("kwh_saved", "kwh"),
         "sleep_saved_week": ("kwh_saved_per_week", "kwh"), "headroom": ("headroom_gpus", "count"),
         "sleep_window": ("window_hours", "hours")}  # fmt: skip
SLEEP_NODE = {"sleep_hours": ("hours_asleep", "hours"), "sleep_saved": ("kwh_saved", "kwh"),
              "util": ("window_util_pct", "pct")}  # fmt: skip
MODEL_WAIT = {"jobs": ("jobs", "count"), "jobs_waiting": ("still_waiting", "count")}  # fmt: skip
SPOT = {"spot_nodes": ("nodes", "count"), "spot_gpus": ("gpus", "count"),
        "spot_gpu_hours": ("gpu_hours", "gpu_hours"),
        "interruptible_gpu_hours": ("interruptible_gpu_hours", "gpu_hours"),
        "spot_share": ("interruptible_on_spot_pct", "pct"),
        "critical_on_spot": ("critical_gpu_hours_on_spot", "gpu_hours"),
        "reclaims": ("reclaims", "count"), "evicted": ("jobs_evicted", "count"),
        "lost": ("gpu_hours_lost", "gpu_hours"), "spot_saved": ("saved", "money"),
        "spot_saved_pct": ("saved_pct", "pct")}  # fmt: skip
SPOT_MODEL = {"spot_gpus": ("gpus", "count"), "spot_gpu_hours": ("gpu_hours", "gpu_hours"),
              "on_demand_price": ("on_demand_per_gpu_hour", "money"),
              "spot_price": ("spot_per_gpu_hour", "money"),
              "on_demand_cost": ("on_demand_cost", "money"), "spot_cost": ("spot_cost", "money"),
              "spot_saved": ("saved", "money")}  # fmt: skip
TENANT = {"gpu_hours": ("gpu_hours", "gpu_hours"), "share": ("share_pct", "pct"),
          "quota": ("quota_gpus", "count"), "quota_used": ("quota_used_pct", "pct"),
          "util": ("gpu_util_pct", "pct"), "memory": ("memory_used_pct", "pct")}  # fmt: skip


def _fields(ix: Index, entity: str, obj: object, spec: dict[str, tuple[str, str]]) -> None:
    for metric, (name, dim) in spec.items():
        ix.add(entity, metric, getattr(obj, name), dim)


def _h(minutes: float | None) -> float | None:
    return None if minutes is None else minutes / 60.0


def _gpu(ix: Index, hostname: str, gpu: int, uuid: str) -> str:
    e = gpu_entity(hostname, gpu)
    ix.hosts.add(hostname)
    ix.slots.add((hostname, gpu))
    ix.uuids[uuid] = e
    return e


_CHANGE_DIMS = {"%": "pct", "kWh": "kwh", "min": "hours", "GPU-hours": "gpu_hours"}
