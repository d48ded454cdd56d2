"""Simulated fleets as panels, for the default model, the benchmarks and the tests.

    sim = simulate_panel(fleet_spec(nodes=64, days=30, seed=1))
    sim.panel, sim.fleet

The simulator's chunks are aggregated to hours as they come, so a 1,024-GPU quarter never sits
in memory as raw samples. ``transforms`` rewrite each chunk (and the events and failures)
before aggregation: the robustness cases of the acceptance tests are such transforms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.models import _hourly as H
from gpuwarden.models.panel import HourlyPanel, build_panel, events_frame, failures_frame

Transform = Callable[[pd.DataFrame], pd.DataFrame]


@dataclass
class SimPanel:
    panel: HourlyPanel
    fleet: Any  # sim.Fleet, after its run
    events: pd.DataFrame
    failures: pd.DataFrame


@dataclass
class DropSamples:
    """Lose ``share`` of the samples at random (a flaky scrape)."""

    share: float = 0.1
    seed: int = 0
    _rng: np.random.Generator | None = field(default=None, repr=False)

    def __call__(self, frame: pd.DataFrame) -> pd.DataFrame:
        if self._rng is None:
            self._rng = np.random.default_rng(self.seed)
        return frame[self._rng.random(len(frame)) >= self.share]


@dataclass
class HideField:
    """``fields`` unsupported (NaN) on every board of ``model``."""

    model: str
    fields: tuple[str, ...] = ("mem_temp_c",)

    def __call__(self, frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        frame.loc[(frame["model"] == self.model).to_numpy(), list(self.fields)] = np.nan
        return frame


@dataclass
class SameUuidAfterRepair:
    """Every board in a slot reports the slot's first UUID: a repaired GPU that comes back
    under its old identity, instead of a replacement with a new one."""

    first: dict[tuple[str, int], str] = field(default_factory=dict)
    alias: dict[str, str] = field(default_factory=dict)

    def _learn(self, hostnames: Sequence[str], gpus: Sequence[int], uuids: Sequence[str]) -> None:
        for h, g, u in zip(hostnames, gpus, uuids, strict=True):
            self.alias.setdefault(u, self.first.setdefault((h, int(g)), u))

    def __call__(self, frame: pd.DataFrame) -> pd.DataFrame:
        ident = frame[["hostname", "gpu", "uuid"]].astype({"hostname": str, "uuid": str})
        ident = ident.drop_duplicates("uuid")
        self._learn(ident["hostname"].tolist(), ident["gpu"].tolist(), ident["uuid"].tolist())
        frame = frame.copy()
        frame["uuid"] = frame["uuid"].astype(str).map(self.alias)
        return frame

    def rename(self, table: pd.DataFrame) -> pd.DataFrame:
        """Events or failures: the same renaming (boards never sampled keep their UUID)."""
        self._learn(
            table["hostname"].astype(str).tolist(),
            table["gpu"].tolist(),
            table["uuid"].astype(str).tolist(),
        )
        return table.assign(uuid=table["uuid"].astype(str).map(self.alias))


def simulate_panel(
    spec: Any, *, transforms: Sequence[Transform] = (), progress: bool = False
) -> SimPanel:
    """Run ``spec`` (a ``sim.FleetSpec``) and build its hourly panel."""
    from gpuwarden.sim import Fleet

    fleet = Fleet(spec)
    parts, idents, events = [], [], []
    for chunk in fleet.chunks(progress=progress):
        frame = chunk.samples
        assert frame is not None
        for t in transforms:
            frame = t(frame)
        parts.append(H.from_raw(frame))
        idents.append(
            frame[["uuid", "hostname", "gpu", "model", "rack"]]
            .drop_duplicates("uuid")
            .astype({"uuid": str, "hostname": str, "model": str, "rack": str})
        )
        events.extend(chunk.events)
    ev = events_frame(events).assign(
        hostname=[e.gpu.hostname for e in events], gpu=[e.gpu.index for e in events]
    )
    fails = failures_frame(fleet.failures)
    for t in transforms:
        if isinstance(t, SameUuidAfterRepair):
            ev, fails = t.rename(ev), t.rename(fails)
    ident = pd.concat(idents, ignore_index=True) if idents else pd.DataFrame(columns=["uuid"])
    panel = build_panel(H.combine(parts), ident, ev, fails)
    return SimPanel(panel, fleet, ev, fails)


def family_panel(draw: Any, *, progress: bool = False) -> SimPanel:
    """A member of the randomized family (``sim.family.FamilyDraw``), its unsupported fields
    hidden as the draw says."""
    hides = [HideField(model, fields) for model, fields in draw.hidden]
    return simulate_panel(draw.spec, transforms=hides, progress=progress)


def concat_panels(panels: Sequence[HourlyPanel], names: Sequence[str]) -> HourlyPanel:
    """Several fleets' panels side by side, as one panel over the union of their hours.

    Hostnames, racks and keys get the fleet's name in front, so node and rack peers never
    cross fleets, and a ``fleet`` column holds the name (fleet-wide features group on it); hours a fleet did not cover are unread (NaN, not seen), never zeros."""
    h0 = min(int(p.hours[0]) for p in panels)
    h1 = max(int(p.hours[-1]) for p in panels)
    T = (h1 - h0) // int(H.HOUR_S) + 1

    def pad(p: HourlyPanel, a: np.ndarray, fill: Any) -> np.ndarray:
        out = np.full((T, a.shape[1]), fill, dtype=a.dtype)
        lo = (int(p.hours[0]) - h0) // int(H.HOUR_S)
        out[lo : lo + a.shape[0]] = a
        return out

    def stack(get: Callable[[HourlyPanel], np.ndarray], fill: Any) -> np.ndarray:
        return np.hstack([pad(p, get(p), fill) for p in panels])

    def stack_all(attr: str, fill: Any) -> dict[str, np.ndarray]:
        first_of: dict[str, np.ndarray] = getattr(panels[0], attr)
        return {k: np.hstack([pad(p, getattr(p, attr)[k], fill) for p in panels]) for k in first_of}

    keys = []
    for p, name in zip(panels, names, strict=True):
        k = p.keys.copy()
        for col in ("key", "hostname"):
            k[col] = name + "/" + k[col].astype(str)
        k["rack"] = np.where(k["rack"].astype(str) == "", "", name + "/" + k["rack"].astype(str))
        k["fleet"] = name
        keys.append(k)
    first = np.concatenate(
        [
            np.where(p.first >= p.shape[0], T, p.first + (int(p.hours[0]) - h0) // int(H.HOUR_S))
            for p in panels
        ]
    ).astype(np.int64)
    reads = [p.fields_read for p in panels]
    return HourlyPanel(
        np.arange(h0, h1 + 1, int(H.HOUR_S), dtype=np.int64),
        pd.concat(keys, ignore_index=True),
        stack(lambda p: p.seen, False),
        first,
        stack_all("inc", np.nan),
        stack_all("gauge", np.nan),
        stack_all("events", 0.0),
        stack(lambda p: p.retired_total, np.nan),
        stack(lambda p: p.fatal_xid, np.nan),
        fields_read=None if any(r is None for r in reads) else np.vstack(reads),  # type: ignore[arg-type]
    )


#: The share of HBM failures without an SBE ramp in the fleets the shipped model was trained
#: and judged on (the simulator before it was compared with the Calchas log).
SHIPPED_HBM_SUDDEN_FRACTION = 0.0
#: The held-out fleet starts this long after the training fleet (another period, another seed).
HELD_OUT_OFFSET_S = 200 * 86400.0
#: History simulated before the held-out fleet's first scoring time, so every GPU is scored
#: with the week of history it has in production (``gpuwarden evaluate`` reads the same week
#: before ``--start``); boards installed later still start with none.
WARMUP_S = 7 * 86400.0


def held_out_spec(nodes: int = 128, days: float = 37.0, **overrides: Any) -> tuple[Any, float]:
    """The fleet the default model is judged on: seed 2, scoring from 200 days after the
    training fleet's start for ``days``, with a week of history before that. Returns (spec,
    first scoring time)."""
    first = fleet_spec().start_ts + HELD_OUT_OFFSET_S
    spec = fleet_spec(nodes=nodes, days=days + WARMUP_S / 86400, seed=2, start_ts=first - WARMUP_S)
    return replace(spec, **overrides), first


def fleet_spec(**overrides: Any) -> Any:
    """The simulated fleets of the default model and the benchmarks: three GPU models,
    10-minute samples, the failure rate x20 so a quarter holds a few hundred failures.

    ``hbm_sudden_fraction`` stays 0 here, as the shipped model was trained: every HBM failure
    ramps up its single-bit errors first. The simulator's own default (34/39 of HBM failures
    begin with an uncorrectable burst, from the Calchas log) makes most HBM failures sudden;
    set it here when the model is trained again on such fleets."""
    from gpuwarden.sim import DEFAULT_START_TS, FleetSpec

    base = FleetSpec(
        nodes=128,
        gpus_per_node=8,
        models=("H100-80GB", "A100-80GB", "H200"),
        start_ts=DEFAULT_START_TS,
        days=67.0,
        step_s=600,
        seed=1,
        accel=20.0,
        hbm_sudden_fraction=SHIPPED_HBM_SUDDEN_FRACTION,
    )
    return replace(base, **overrides)
