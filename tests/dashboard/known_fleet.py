"""A small store with known contents (fixtures in conftest.py): 4 nodes x 4 GPUs, 6 hours at 5-minute steps.

Every GPU reads the same calm values except these (hostname, gpu):

- node000/0 ``SBE``: 10 single-bit errors per step, with a driver reload (counter back to 0)
  half-way; its memory runs 20 C above the core in the last hour; one Xid 13 (an application
  fault): it stays *ok*; utilisation 90 % instead of 50 %.
- node000/1 ``DBE``: a double-bit error one hour before the end: *unhealthy*.
- node001/0 ``RELOAD``: volatile DBE count 2, then the driver reloads (back to 0): no new DBE, *ok*.
- node001/2 ``LOST``: Xid 79 and gpu_lost two hours before the end, then no samples: *unhealthy*
  (a hard signal wins over missing).
- node002/0 ``REMAP``: row remapping failed in the last 30 minutes: *unhealthy*.
- node002/3 ``SWAPPED``: the old board got Xid 48 and was replaced 3 hours before the end; the
  new board (another UUID) is *ok*.
- node003/1 ``EARLY``: a double-bit error 4 h 55 min before the end: *unhealthy* over 24 h,
  *ok* over a 3-hour window.
- node003/3 ``MISSING``: last sample an hour before the end: *missing*.

So: 11 ok, 4 unhealthy, 1 missing; 14 GPUs report in the last 15 minutes.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest

from gpuwarden.health import AT_RISK_ACTION, GpuState, Reason, RiskAssessment, Verdict
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Event, GpuId

if TYPE_CHECKING:
    from streamlit.testing.v1 import AppTest

    from gpuwarden.serve.service import RiskService


def run_app(url: str, monkeypatch: pytest.MonkeyPatch, **query: str) -> AppTest:
    """Run the dashboard app over ``url`` in ``AppTest``; fails on any exception box."""
    from streamlit.testing.v1 import AppTest

    from gpuwarden.dashboard import app as app_module  # streamlit only when the extra is there

    monkeypatch.setenv("GPUWARDEN_STORE", url)
    at = AppTest.from_file(str(Path(app_module.__file__)), default_timeout=30)
    at.query_params.update(query)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def require_extra(*modules: str) -> None:
    """Skip when the ``dashboard`` extra is not installed; fail instead under CI=true, where
    the dashboard tests must run (pip install -e '.[dev,dashboard]')."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        message = f"{', '.join(missing)} not installed: pip install -e '.[dashboard]'"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; CI=true, so the dashboard tests may not skip")
        pytest.skip(message, allow_module_level=True)


END = 1_767_247_200.0  # 2026-01-01 06:00 UTC: the newest sample is END - STEP
STEP = 300
STEPS = 72
START = END - STEPS * STEP
RACKS = {"node000": "rack00", "node001": "rack00", "node002": "rack01", "node003": "rack01"}

SBE, DBE, RELOAD, LOST = ("node000", 0), ("node000", 1), ("node001", 0), ("node001", 2)
REMAP, SWAPPED, EARLY, MISSING = ("node002", 0), ("node002", 3), ("node003", 1), ("node003", 3)
UNHEALTHY = {DBE, LOST, REMAP, EARLY}


def uuid_of(slot: tuple[str, int], board: str = "a") -> str:
    host, idx = slot
    return f"GPU-{board}{int(host[-3:]):03d}{idx}-0000-0000-0000-000000000000"


def gpu_id(slot: tuple[str, int], board: str = "a") -> GpuId:
    host, idx = slot
    return GpuId(host, idx, uuid_of(slot, board), f"0000:{idx:02x}:00.0", "H100-80GB", RACKS[host])


def _rows(slot: tuple[str, int]) -> pd.DataFrame:
    ts = START + STEP * np.arange(STEPS, dtype=float)
    k = np.arange(STEPS)
    n = STEPS
    gpu_temp = np.full(n, 50.0 + slot[1])
    values = {
        "gpu_temp_c": gpu_temp,
        "mem_temp_c": gpu_temp + 5.0,
        "gpu_util_pct": np.full(n, 50.0),
        "power_w": np.full(n, 300.0),
        "ecc_sbe_volatile_total": np.zeros(n),
        "ecc_dbe_volatile_total": np.zeros(n),
        "ecc_dbe_aggregate_total": np.zeros(n),
        "remapped_rows_correctable": np.zeros(n),
        "remapped_rows_uncorrectable": np.zeros(n),
        "remapped_rows_failure": np.zeros(n),
        "pcie_replay_total": np.zeros(n),
        "pcie_link_gen": np.full(n, 4.0),
        "pcie_link_width": np.full(n, 16.0),
    }
    if slot == SBE:
        values["ecc_sbe_volatile_total"] = 10.0 * np.where(k < 36, k, k - 36)  # reload at k=36
        values["mem_temp_c"] = np.where(k >= STEPS - 12, gpu_temp + 20.0, gpu_temp + 5.0)
        values["gpu_util_pct"] = np.full(n, 90.0)
    if slot == DBE:
        values["ecc_dbe_volatile_total"] = np.where(k >= STEPS - 12, 1.0, 0.0)
        values["ecc_dbe_aggregate_total"] = values["ecc_dbe_volatile_total"]
    if slot == RELOAD:
        values["ecc_dbe_volatile_total"] = np.where(k < 30, 2.0, 0.0)
    if slot == REMAP:
        values["remapped_rows_failure"] = np.where(k >= STEPS - 6, 1.0, 0.0)
    if slot == EARLY:
        values["ecc_dbe_volatile_total"] = np.where(k >= 13, 1.0, 0.0)
    frame = pd.DataFrame({"ts": ts, **values})
    frame["hostname"], frame["gpu"], frame["rack"] = slot[0], slot[1], RACKS[slot[0]]
    frame["uuid"], frame["model"] = uuid_of(slot), "H100-80GB"
    if slot == SWAPPED:
        frame.loc[k >= 36, "uuid"] = uuid_of(slot, "b")
    keep = np.ones(n, dtype=bool)
    if slot == LOST:
        keep = k < STEPS - 24
    if slot == MISSING:
        keep = k < STEPS - 12
    return frame[keep]


def events() -> list[Event]:
    return [
        Event(START + 10 * STEP, gpu_id(SBE), "xid", 13, "graphics engine exception"),
        Event(END - 2 * 3600, gpu_id(LOST), "xid", 79, "fallen off the bus"),
        Event(END - 2 * 3600, gpu_id(LOST), "gpu_lost", None, ""),
        Event(START + 30 * STEP, gpu_id(SWAPPED), "xid", 48, "double-bit"),
    ]


def write_known(path: Path, *, compact: bool = False) -> str:
    """Write the known fleet into a SQLite file at ``path``; returns its URL."""
    slots = [(f"node{h:03d}", g) for h in range(4) for g in range(4)]
    frame = pd.concat([_rows(s) for s in slots], ignore_index=True)
    url = f"sqlite:///{path}"
    with SqliteStore(path, url=url) as store:
        store.write_frame(frame)
        store.write_events(events())
        if compact:
            store.compact(END - 2 * 3600)  # roll up all but the last two hours
    return url


HOUR = 3600.0


def risk_at(uuid: str, ts: float) -> float:
    """A fake model's risk that depends on time: the SBE GPU's rises 0.15 an hour from 0.1 at
    START (0.85 at 05:00), every other GPU's stays at 0.05."""
    if uuid != uuid_of(SBE):
        return 0.05
    return round(0.1 + 0.15 * (ts - START) / HOUR, 4)


class KnownRisk:
    """A scorer for ``serve``: ``risk_at`` for the board each slot holds at ``at``."""

    def __call__(self, store: SqliteStore, at: float) -> list[RiskAssessment]:
        gpus = store.gpus()
        gpus = gpus[gpus["first_ts"] <= at].sort_values("first_ts", kind="stable")
        boards = gpus.drop_duplicates(["hostname", "gpu"], keep="last")
        out = []
        for r in boards.itertuples(index=False):
            risk = risk_at(r.uuid, at)
            why = (Reason("single-bit errors rising", {"sbe_per_day_24h": 2880.0}),)
            gpu = GpuId(r.hostname, int(r.gpu), r.uuid, r.pci_bus_id, r.model, r.rack)
            out.append(RiskAssessment(gpu, at, risk, reasons=why if risk >= 0.3 else ()))
        return out


def serve_known(url: str, *, enter_at: float = 0.7) -> RiskService:
    """Run ``gpuwarden serve``'s loop over the known store every 5 minutes from START to the
    newest sample, with ``KnownRisk`` and the hard signals: its verdicts land in the store."""
    from gpuwarden.alerts.decision import DecisionEngine
    from gpuwarden.alerts.hard_signals import HardSignalAssessor
    from gpuwarden.serve.assessors import combine
    from gpuwarden.serve.service import RiskService

    clock = [START]
    store = SqliteStore.from_url(url)
    service = RiskService(
        store,
        assess=combine(KnownRisk(), HardSignalAssessor(lookback_s=2 * STEP)),
        engine=DecisionEngine(enter_at=enter_at, exit_below=min(0.5, enter_at)),
        clock=lambda: clock[0],
        fleet_nodes=100,
    )
    for k in range(STEPS):
        clock[0] = START + k * STEP
        service.tick()
    store.close()
    return service


def store_hourly_verdicts(url: str, *, threshold: float = 0.7, until: float = END) -> int:
    """Store ``risk_at`` as a scorer's hourly verdicts (what ``gpuwarden score --into`` writes):
    each whole hour up to ``until`` after a GPU's first sample and within 24 h of its last;
    at-risk from ``threshold``; returns verdicts written."""
    with SqliteStore.from_url(url) as store:
        gpus = store.gpus()
        rows = []
        for hour in np.arange(np.ceil(START / HOUR) * HOUR, until + 1.0, HOUR):
            for r in gpus.itertuples(index=False):
                if not r.first_ts < hour <= r.last_ts + 86400.0:
                    continue
                risk = risk_at(r.uuid, hour)
                at_risk = risk >= threshold
                rows.append(
                    Verdict(
                        float(hour),
                        GpuId(r.hostname, int(r.gpu), r.uuid, r.pci_bus_id, r.model, r.rack),
                        GpuState.AT_RISK if at_risk else GpuState.OK,
                        risk,
                        reasons=(Reason("single-bit errors rising", {"sbe_per_day_24h": 2880.0}),)
                        if at_risk
                        else (),
                        action=AT_RISK_ACTION if at_risk else "",
                        threshold=threshold,
                    )
                )
        return store.write_verdicts(rows)
