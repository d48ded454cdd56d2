"""Recommendations from the facts alone, each citing the facts it rests on.

- **scaling**, as the source essay's ``should_scale``: a long queue (p95 wait over
  ``WAIT_SCALE_UP_MIN``) on capacity mostly allocated (over ``BUSY_PCT``) says add GPUs; capacity
  mostly idle (allocated under ``IDLE_PCT``) with no queue says release some;
- **drain or RMA** each GPU gpuwarden holds unhealthy or at risk, with NVIDIA's action for its
  condition (the stored verdict's action, from the Xid catalogue and the hard signals);
- **idle capacity**: GPUs that averaged under 5 % utilisation, and GPU models under ``IDLE_PCT``;
- **quota changes**: tenants holding nearly all their quota while jobs wait, or a small part of it;
- nodes with low availability to look at, and failures gpuwarden missed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuwarden.health import AT_RISK_ACTION, GpuState
from gpuwarden.reports.model import Facts

WAIT_SCALE_UP_MIN = 30.0
BUSY_PCT = 80.0
IDLE_PCT = 30.0
LOW_AVAILABILITY_PCT = 95.0
QUOTA_FULL_PCT = 90.0
QUOTA_SPARE_PCT = 25.0
MAX_GPUS_LISTED = 10


@dataclass(frozen=True)
class Recommendation:
    id: str
    kind: str  # scale-up, scale-down, drain, rma, idle, quota, availability, missed
    text: str
    cites: tuple[str, ...]  # "section.field = value" of the facts it rests on


def recommend(f: Facts) -> list[Recommendation]:
    out: list[tuple[str, str, tuple[str, ...]]] = []
    s = f.scheduler
    if s is not None:
        wait = s.queue_wait_p95_min
        cites = (
            f"scheduler.queue_wait_p95_min = {wait}",
            f"scheduler.allocated_pct = {s.allocated_pct}",
        )
        if wait is not None and wait > WAIT_SCALE_UP_MIN and s.allocated_pct > BUSY_PCT:
            hours = f.period.hours
            need = math.ceil(
                s.gpu_hours / hours / (BUSY_PCT / 100.0) - s.capacity_gpu_hours / hours
            )
            out.append(("scale-up", f"Add capacity: jobs waited {wait:g} min at p95 while "
                        f"{s.allocated_pct:g}% of GPU-hours were allocated; about {max(need, 1)} more "
                        f"GPUs would bring allocation to {BUSY_PCT:g}%.", cites))  # fmt: skip
        elif s.allocated_pct < IDLE_PCT and (wait is None or wait <= WAIT_SCALE_UP_MIN):
            out.append(("scale-down", f"Release capacity: only {s.allocated_pct:g}% of GPU-hours "
                        f"were allocated and jobs waited {wait if wait is not None else 0:g} min at p95.",
                        cites))  # fmt: skip
        for t in s.by_tenant:
            q = t.quota_used_pct
            if q is None:
                continue
            qc = (f"scheduler.by_tenant[{t.tenant}].quota_used_pct = {q}", *cites[:1])
            if q > QUOTA_FULL_PCT and wait is not None and wait > WAIT_SCALE_UP_MIN:
                out.append(("quota", f"Raise the quota of {t.tenant}: it held {q:g}% of its "
                            f"{t.quota_gpus:g}-GPU quota on average while jobs waited.", qc))  # fmt: skip
            elif q < QUOTA_SPARE_PCT:
                out.append(("quota", f"Lower the quota of {t.tenant} or lend it out: it used "
                            f"{q:g}% of its {t.quota_gpus:g}-GPU quota.", qc))  # fmt: skip
    for g in f.risk.gpus[:MAX_GPUS_LISTED]:
        name = f"{g.hostname} GPU {g.gpu}"
        cite = (f"risk.gpus[{name}].state = {g.state}",)
        if g.state == str(GpuState.UNHEALTHY):
            rma = "RMA" in g.action or "replace" in g.action.lower()
            out.append(("rma" if rma else "drain", f"{'Send for RMA' if rma else 'Drain'}: {name} "
                        f"({g.model}) is unhealthy. NVIDIA's action: {g.action}", cite))  # fmt: skip
        else:
            out.append(
                ("drain", f"Watch {name} ({g.model}): at risk. {g.action or AT_RISK_ACTION}", cite)
            )
    u = f.utilisation
    if u is not None:
        if u.idle_gpus:
            out.append(("idle", f"{u.idle_gpus} GPUs averaged under 5% utilisation: give them "
                        "interruptible work or let them sleep.", (f"utilisation.idle_gpus = {u.idle_gpus}",)))  # fmt: skip
        for m in u.by_model:
            if m.gpu_util_pct is not None and m.gpu_util_pct < IDLE_PCT:
                out.append(("idle", f"{m.model} GPUs averaged {m.gpu_util_pct:g}% utilisation: "
                            "move work onto them or release some.",
                            (f"utilisation.by_model[{m.model}].gpu_util_pct = {m.gpu_util_pct}",)))  # fmt: skip
    if f.availability is not None:
        low = [n for n in f.availability.by_node if n.availability_pct < LOW_AVAILABILITY_PCT]
        for n in sorted(low, key=lambda n: n.availability_pct)[:MAX_GPUS_LISTED]:
            out.append(("availability", f"Look at {n.hostname}: {n.availability_pct:g}% available, "
                        f"{n.downtime_h:g} h of GPU downtime.",
                        (f"availability.by_node[{n.hostname}].availability_pct = {n.availability_pct}",)))  # fmt: skip
    if f.failures.missed:
        out.append(("missed", f"{f.failures.missed} failures came without a flag: review their "
                    "telemetry and consider retraining the model on them.",
                    (f"failures.missed = {f.failures.missed}",)))  # fmt: skip
    return [Recommendation(f"R{i}", k, t, c) for i, (k, t, c) in enumerate(out, 1)]
