"""The store contract as tests, tier by tier, for every backend (SQLite, and the coming
VictoriaMetrics, InfluxDB and Prometheus ones). docs/store.md says how a backend runs them.

A backend's test module imports the tests of the tiers it implements (``conformance.read``,
``conformance.write``) and defines fixtures:

    read tier   ``loaded``: a ``ReadableStore`` holding ``DATA`` (a backend's loader writes it
                by the backend's own means: a Prometheus server is read-only, so its loader
                backfills blocks; a writable store may use ``load_writable``). A backend with
                rollups rolls up everything before ``DATA.rolled_until``, so the window reads
                stitch rollups to a raw tail; one without answers from raw samples alone.
    write tier  ``empty``: a fresh, empty ``Store`` (``WritableStore`` whose reads check it).

    from conformance.read import *       # noqa: F403  every store
    from conformance.write import *      # noqa: F403  stores that accept writes

Everything is checked through the protocol only, never a backend's own tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden.health import GpuState, Reason, Verdict
from gpuwarden.store.base import Store
from gpuwarden.telemetry import FRAME_ID_COLUMNS, Batch, Event, Failure, GpuId, Sample

T0 = 1_714_564_800.0  # 2024-05-01T12:00:00Z, on the hour
STEP = 60.0
HOURS = 3.5  # samples from T0 for three and a half hours
A = GpuId("node1", 0, "GPU-aaaa", "00000000:1B:00.0", "H100", "rack1")
B = GpuId("node1", 1, "GPU-bbbb", "00000000:2B:00.0", "H100", "rack1")
C = GpuId("node2", 0, "GPU-cccc", "00000000:1B:00.0", "A100", "rack2")
GPUS = (A, B, C)
RESET_AT = T0 + 100 * STEP  # GPU A's driver reload: its volatile SBE count starts from 0
FIELDS = [
    "gpu_temp_c",
    "mem_temp_c",
    "power_w",
    "ecc_sbe_volatile_total",
    "clock_event_reasons",
]


def _values(g: GpuId, k: int, ts: float) -> dict[str, float]:
    """Deterministic readings: A's SBE counter resets at ``RESET_AT``; C never reads its memory
    temperature (NaN, not 0); every 7th reading of B misses its power; clock-event bits vary."""
    sbe = 2.0 * k if g is not A or ts < RESET_AT else 2.0 * (k - 100) + 1.0
    out = {
        "gpu_temp_c": 40.0 + g.index + (k % 17) * 0.25,
        "power_w": 300.0 + 10.0 * math.sin(k / 5.0) + 7.0 * (g is C),
        "ecc_sbe_volatile_total": sbe,
        "clock_event_reasons": float((1 << (k % 4)) | (8 if k % 11 == 0 else 0)),
    }
    if g is not C:
        out["mem_temp_c"] = 55.0 + (k % 13) * 0.5
    if g is B and k % 7 == 0:
        del out["power_w"]
    return out


@dataclass(frozen=True)
class Data:
    samples: tuple[Sample, ...]
    events: tuple[Event, ...]
    failures: tuple[Failure, ...]
    verdicts: tuple[Verdict, ...]
    #: a backend with rollups rolls up everything before this (mid-hour: a raw tail remains)
    rolled_until: float


def _data() -> Data:
    n = int(HOURS * 3600 / STEP)
    samples = tuple(
        Sample(T0 + k * STEP, g, _values(g, k, T0 + k * STEP)) for k in range(n) for g in GPUS
    )
    events = (
        Event(T0 + 600.0, A, "xid", 63, "row remap pending"),
        Event(T0 + 7300.0, C, "xid", 79, "fallen off the bus"),
        Event(T0 + 7400.0, C, "gpu_lost"),
    )
    failures = (Failure(T0 + 7500.0, C, "fell_off_bus", precursor_start_ts=T0, xid=79),)
    verdicts = (
        Verdict(T0 + 3600.0, A, GpuState.OK, risk=0.1, threshold=0.7),
        Verdict(
            T0 + 7200.0,
            A,
            GpuState("at-risk"),
            risk=0.8,
            since=T0 + 7200.0,
            changed_from=GpuState.OK,
            reasons=(Reason("SBE errors climbing", {"sbe_per_h": 42.0}),),
            action="drain at the next checkpoint",
            threshold=0.7,
        ),
        Verdict(T0 + 7460.0, C, GpuState("unhealthy"), cause="hard-signal", reasons=("GPU lost",)),
    )
    return Data(samples, events, failures, verdicts, rolled_until=T0 + 2 * 3600 + 1500)


DATA = _data()


def load_writable(store: Store, data: Data = DATA, *, compact: bool = True) -> Store:
    """The loader of a writable backend: write ``data`` through the protocol, then compact up
    to ``data.rolled_until``."""
    store.write_batch(Batch(T0, data.samples[: len(data.samples) // 2]))
    store.write_frame(frame_of(data.samples[len(data.samples) // 2 :]))
    store.write_events(data.events)
    store.write_failures(data.failures)
    store.write_verdicts(data.verdicts)
    if compact:
        store.compact(data.rolled_until)
    return store


def frame_of(samples: tuple[Sample, ...] | list[Sample]) -> pd.DataFrame:
    rows = [
        {
            "ts": s.ts,
            "hostname": s.gpu.hostname,
            "gpu": s.gpu.index,
            "uuid": s.gpu.uuid,
            "model": s.gpu.model,
            "pci_bus_id": s.gpu.pci_bus_id,
            "rack": s.gpu.rack,
            **s.values,
        }
        for s in samples
    ]
    return pd.DataFrame(rows)


def expected_raw(data: Data = DATA) -> pd.DataFrame:
    frame = frame_of(data.samples)
    for f in FIELDS:
        if f not in frame:
            frame[f] = np.nan
    return frame[[*FRAME_ID_COLUMNS, *FIELDS]]


def by_gpu_time(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["uuid", "ts"], kind="stable").reset_index(drop=True)
