"""A store, scheduler database and audit log with known contents: two report weeks, hourly.

Fleet: ``gpu-a01`` (2 x H100-80GB, 80 % busy, 500 W) and ``gpu-b02`` (2 x A100-80GB, 20 % busy,
250 W); samples every hour of the week before and the report week (SINCE .. UNTIL), except:

- gpu-a01/0: at-risk at +42 h, fails (Xid 79) at +72 h, unhealthy +72..+84 h, then ok:
  caught with a 30 h lead time, 12 h down;
- gpu-b02/0: fails (Xid 48) at +100 h with no flag: missed;
- gpu-b02/1: silent +48..+72 h (24 h down); at-risk from +150 h (risk 0.77), at risk now;
- gpu-a01/1: two Xid 13 (application) at +10 h and +20 h; the week before, gpu-b02/1 had five.

So availability (156 + 168 + 168 + 144) / 672 = 94.64 %, 36 h down; 246 kWh (98.4 kg CO2 at
400 g/kWh); 4 transitions; scheduler: alice 200 GPU-hours (quota 4), bob 50 (quota 2), queue
waits 10 and 60 min, 1 preemption, capacity 672 GPU-hours; alice's tasks ran on gpu-a01 (80 %
busy), bob's on gpu-b02 GPU 0 (20 %). Kubernetes namespace ml-train held both gpu-a01 GPUs
from +1 h to +100 h: 198 GPU-hours at 80 %.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gpuwarden.alerts.audit import AuditLog
from gpuwarden.alerts.base import Transition
from gpuwarden.health import AT_RISK_ACTION, GpuState, Verdict
from gpuwarden.reports import FactSources, build_facts
from gpuwarden.reports.model import Facts
from gpuwarden.scheduler.state import JobRow, NodeRow, SchedulerDB, TaskRow
from gpuwarden.store import open_store
from gpuwarden.store.base import WritableStore
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Assignment, Batch, Event, Failure, GpuId, Sample

SINCE = 1_763_942_400.0  # Monday 2025-11-24 00:00 UTC
UNTIL = SINCE + 7 * 86400
H = 3600.0
HOSTS = {"gpu-a01": ("H100-80GB", 80.0, 500.0), "gpu-b02": ("A100-80GB", 20.0, 250.0)}


def gid(host: str, idx: int) -> GpuId:
    return GpuId(host, idx, f"GPU-{host[-3:]}{idx}0000-1111-2222-3333-444455556666")


def build_store(path: Path) -> str:
    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        leftover.unlink(missing_ok=True)
    with SqliteStore(path) as store:
        fill(store)
    return f"sqlite:///{path}"


def fill(store: WritableStore) -> None:
    """Write the known week into ``store``."""
    rows = []
    for host, (model, util, power) in HOSTS.items():
        for idx in (0, 1):
            g = gid(host, idx)
            for hour in range(-168, 168):
                if (host, idx) == ("gpu-b02", 1) and 48 <= hour < 72:
                    continue
                rows.append({
                    "ts": SINCE + hour * H + 1800.0, "hostname": host, "gpu": idx, "uuid": g.uuid,
                    "model": model, "pci_bus_id": f"00000000:{17 + idx:02X}:00.0",
                    "gpu_util_pct": util, "fb_used_mib": 40960.0, "fb_total_mib": 81920.0,
                    "power_w": power, "gpu_temp_c": 60.0,
                })  # fmt: skip
    frame = pd.DataFrame(rows)
    a0, a1, b0, b1 = gid("gpu-a01", 0), gid("gpu-a01", 1), gid("gpu-b02", 0), gid("gpu-b02", 1)
    events = [Event(SINCE + 72 * H, a0, "xid", 79), Event(SINCE + 100 * H, b0, "xid", 48)]
    events += [Event(SINCE + h * H, a1, "xid", 13) for h in (10, 20)]
    events += [Event(SINCE - h * H, b1, "xid", 13) for h in (10, 20, 30, 40, 50)]
    ok, risk, bad = GpuState.OK, GpuState.AT_RISK, GpuState.UNHEALTHY
    verdicts = [
        Verdict(SINCE - 2 * H, g, ok, 0.1, since=SINCE - 30 * 86400) for g in (a0, a1, b0, b1)
    ]
    verdicts += [
        Verdict(SINCE + 42 * H, a0, risk, 0.82, since=SINCE + 42 * H, changed_from=ok,
                reasons=("SBE rate rising",), action=AT_RISK_ACTION, threshold=0.7),
        Verdict(SINCE + 72 * H, a0, bad, 0.9, cause="hard-signal", since=SINCE + 72 * H,
                changed_from=risk, reasons=("Xid 79",), action="Drain the node", threshold=0.7),
        Verdict(SINCE + 84 * H, a0, ok, 0.1, cause="restored", since=SINCE + 84 * H,
                changed_from=bad, threshold=0.7),
        Verdict(SINCE + 150 * H, b1, risk, 0.77, since=SINCE + 150 * H, changed_from=ok,
                reasons=("SBE rate rising",), action=AT_RISK_ACTION, threshold=0.7),
    ]  # fmt: skip
    store.write_frame(frame)
    store.write_events(events)
    store.write_failures([Failure(SINCE + 72 * H, a0, "xid", xid=79),
                          Failure(SINCE + 100 * H, b0, "xid", xid=48)])  # fmt: skip
    store.write_verdicts(verdicts)
    # Kubernetes: namespace ml-train holds both gpu-a01 GPUs from +1 h to +100 h
    for at, ns, pod in ((SINCE + H, "ml-train", "trainer-0"), (SINCE + 100 * H, "", "")):
        batch = Batch(at, samples=tuple(Sample(at, g, {"gpu_util_pct": 80.0}) for g in (a0, a1)),
                      assignments=tuple(Assignment(at, g, ns, pod, "main" if ns else "") for g in (a0, a1)))  # fmt: skip
        store.write_batch(batch)


def build_scheduler(path: Path) -> str:
    db = SchedulerDB(path)
    gpus = [{"index": i, "uuid": "", "model": "", "memory_mib": 81920, "health": "ok", "mode": ""}
            for i in (0, 1)]  # fmt: skip
    for host in HOSTS:
        db.upsert_node(NodeRow(host, 64000, 512000, gpus, SINCE, 0))
    for job_id, tenant, queued, started in (("j1", "alice", SINCE - 600, SINCE),
                                            ("j2", "bob", SINCE + 9 * H, SINCE + 10 * H)):  # fmt: skip
        db.insert_job(JobRow(job_id, 1 if job_id == "j1" else 2, tenant, job_id, {}, "succeeded", 1,
                             None, queued, queued, started_at=started))  # fmt: skip
    db.upsert_task(
        TaskRow("j1", 1, 0, "gpu-a01", [0, 1], "exited", 1, 0, 1, True, SINCE, SINCE + 100 * H)
    )
    db.upsert_task(
        TaskRow("j2", 1, 0, "gpu-b02", [0], "exited", 2, 0, 2, True, SINCE + 10 * H, SINCE + 60 * H)
    )
    db.open_usage("j1", "alice", "j1", 2000, SINCE)
    db.close_usage("j1", SINCE + 100 * H)
    db.open_usage("j2", "bob", "j2", 1000, SINCE + 10 * H)
    db.close_usage("j2", SINCE + 60 * H)
    db.audit(SINCE + 60 * H, "scheduler", "preempt", job_id="j2", tenant="bob", reason="priority")
    db.set_quota("alice", 4, None, None)
    db.set_quota("bob", 2, None, None)
    db.close()
    return str(path)


def facts_of(store_url: str, sources: FactSources) -> Facts:
    """The known week's facts (no week-before comparison), an hour after it ended."""
    store = open_store(store_url)
    try:
        return build_facts(store, SINCE, UNTIL, sources=sources, now=UNTIL + H, compare=False)
    finally:
        store.close()


def build_audit(path: Path) -> str:
    log = AuditLog(path)
    t = Transition(SINCE + 72 * H, gid("gpu-a01", 0), GpuState.AT_RISK, GpuState.UNHEALTHY, 0.9,
                   ("Xid 79",), "Drain the node", "model")  # fmt: skip
    log.record(t)
    log.record(t, hook="slurm", result="ok: drained")
    log.record(t, hook="kubernetes", result="failed: 503")
    log.record(t, hook="slack", result="ok: sent")
    log.close()
    return str(path)


EXPECTED = {
    "availability": 94.64, "downtime_h": 36.0, "gpu-a01": 96.43, "gpu-b02": 92.86,
    "energy_kwh": 246.0, "co2_kg": 98.4, "util": float(np.round((336 * 80 + 312 * 20) / 648, 1)),
}  # fmt: skip
