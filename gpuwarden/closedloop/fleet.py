"""One seed's simulated fleet, scored once for every arm: failures, and each hour's verdicts.

The fleet is simulated once, its hourly panel built once, and every (GPU life, hour) row of the
evaluated period scored in a few vectorised calls: the model's risk, the rule baseline and the
hard signals. The arms then replay these arrays; none of them scores anything again.

The simulation runs ``warmup_days`` before the evaluated period so the first scored hour already
has the 7-day feature windows behind it, as a deployed service would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.sim import DEFAULT_START_TS, PRECURSOR_KINDS

#: Held-out fleets: the shipped model trains on seed 1 and is checked on seed 2, at the default
#: start and 200 days later; the closed loop starts at seed 101, 400 days later.
FIRST_SEED = 101
#: With ``family``, the members drawn are 60101, 60102, ...: seeds no model trains, chooses its
#: line or is judged on (the family trains on 100-147, chooses on 2001-2012, is judged on
#: 1001-1003 and 4001-4003, candidates on N001-N004: ``bench/bench_candidates.py``'s SPENT).
FAMILY_FIRST_SEED = 60101
START_TS = DEFAULT_START_TS + 400 * 86400.0
HOUR_S = 3600.0


@dataclass(frozen=True)
class SlotFailure:
    """A GPU failure from the simulator's ground truth: the slot is empty for ``repair_s``."""

    ts: float
    slot: int
    uuid: str
    kind: str
    repair_s: float
    with_precursor: bool


@dataclass(frozen=True)
class FleetSpecSummary:
    """What the fleet was simulated with (``days``: the evaluated period, warm-up excluded)."""

    seed: int
    n_gpus: int
    days: float
    sudden_fraction: float
    accel: float
    thermal_drift_c: float = 0.0
    family: bool = False


@dataclass
class ScoredFleet:
    """What the arms share. ``at[t]`` is the t-th scoring time (the end of an hour) of the
    evaluated period; its rows are ``row_ptr[t]:row_ptr[t+1]`` of the ``row_*`` arrays, one per
    GPU life that sent a sample in that hour and has not failed by ``at[t]``."""

    spec: FleetSpecSummary
    nodes: list[tuple[str, str, int]]  # (hostname, GPU model, GPUs)
    slots: list[tuple[str, int]]  # (hostname, index), slot s
    eval_start_ts: float
    eval_end_ts: float
    at: np.ndarray  # float64 (T,)
    row_ptr: np.ndarray  # int64 (T + 1,)
    row_life: np.ndarray  # int32, panel column
    row_risk: np.ndarray  # float32, the model's calibrated risk
    row_rule: np.ndarray  # bool, a baseline rule fired
    row_hard: np.ndarray  # bool, a hard signal (DBE, remap failure, GPU lost, fatal Xid)
    row_link: np.ndarray  # str, the link rules that hold ("": none), as ``score``'s rule column
    life_key: np.ndarray  # str per panel column
    life_slot: np.ndarray  # int per panel column
    failures: list[SlotFailure]
    threshold: float

    @property
    def n_slots(self) -> int:
        return len(self.slots)


def scored_fleet(
    *,
    seed: int,
    gpus: int = 512,
    days: float = 90.0,
    sudden_fraction: float = 0.3,
    accel: float = 20.0,
    thermal_drift_c: float = 0.0,
    warmup_days: float = 7.0,
    model: Any = None,
    link_rules: Any = None,
    block_h: int = 720,
    family: bool = False,
) -> ScoredFleet:
    """Simulate ``gpus`` (a multiple of 8) for ``warmup_days + days`` and score the last
    ``days`` hour by hour with ``model`` (default: the shipped one, ``load_model()``) and the
    ``link_rules`` beside it (``models.rules.LinkRules``; default: the ``link_rules`` setting),
    as ``gpuwarden score`` does. ``thermal_drift_c``: benign temperature drift (standard
    deviation, C) per GPU on the core and on the HBM and per node, knots a day apart (the
    simulator's ``thermal_drift_*`` knobs; 0: none, as the default simulator).

    ``family``: the fleet is member ``seed`` of the randomized family (``sim.family``): its
    precursor shapes, magnitudes and lengths, benign noise and look-alikes, drift, sampling
    interval, resets and unsupported fields as drawn. Three things are set as the other arms
    of the comparison need them: ``sudden_fraction`` and ``accel`` as given (one table per
    sudden share), and 8 GPUs a node (the workload's gangs are whole 8-GPU nodes)."""
    from gpuwarden.models.artifact import load_model
    from gpuwarden.models.features import compute_features, rows_at
    from gpuwarden.models.rules import LinkRules, hard_signal, rule_table
    from gpuwarden.models.simdata import fleet_spec, simulate_panel

    model = load_model() if model is None else model
    link_rules = LinkRules.in_force() if link_rules is None else link_rules
    if family:
        if thermal_drift_c:
            raise InputError("--thermal-drift: a family member draws its own drift")
        from dataclasses import replace

        from gpuwarden.models.simdata import family_panel
        from gpuwarden.sim.family import draw_family

        draw = draw_family(
            seed, nodes=max(1, gpus // 8), days=warmup_days + days, start_ts=START_TS
        )
        spec = replace(draw.spec, gpus_per_node=8, sudden_fraction=sudden_fraction, accel=accel)
        sim = family_panel(replace(draw, spec=spec))
    else:
        spec = fleet_spec(
            nodes=max(1, gpus // 8),
            days=warmup_days + days,
            seed=seed,
            start_ts=START_TS,
            accel=accel,
            sudden_fraction=sudden_fraction,
            thermal_drift_core_c=thermal_drift_c,
            thermal_drift_hbm_c=thermal_drift_c,
            thermal_drift_node_c=thermal_drift_c,
        )
        sim = simulate_panel(spec)
    panel, fleet = sim.panel, sim.fleet
    slots = list(fleet.slots)
    slot_of = {s: i for i, s in enumerate(slots)}
    keys = panel.keys
    life_slot = np.array(
        [slot_of.get((h, int(g)), -1) for h, g in zip(keys["hostname"], keys["gpu"], strict=True)]
    )
    fail_ts = keys["fail_ts"].to_numpy(np.float64)
    eval_start = spec.start_ts + warmup_days * 86400.0
    eval_end = spec.start_ts + spec.days * 86400.0
    at_all = panel.hours.astype(np.float64) + HOUR_S
    t_eval = np.flatnonzero((at_all > eval_start) & (at_all <= eval_end))
    ptr, lives, risks, rules, hards, links = [0], [], [], [], [], []
    for lo in range(0, t_eval.size, block_h):
        ts = t_eval[lo : lo + block_h]
        rows = rows_at(panel, ts)
        if len(rows):
            meta, X = compute_features(panel, rows)
            keep = ~(fail_ts[rows[:, 1]] <= meta["at"].to_numpy())  # a dead life says nothing
            rows = rows[keep]
            X = X[keep]
            risks.append(model.risk(X).astype(np.float32))
            rules.append(rule_table(X).to_numpy().any(axis=1))
            hards.append(hard_signal(X))
            links.append(link_rules.names(X))
            lives.append(rows[:, 1].astype(np.int32))
        counts = np.bincount(np.searchsorted(ts, rows[:, 0]), minlength=ts.size)
        ptr.extend((ptr[-1] + np.cumsum(counts)).tolist())
    failures = [
        SlotFailure(
            f.ts,
            slot_of[(f.gpu.hostname, f.gpu.index)],
            f.gpu.uuid,
            f.kind,
            float(f.repair_s or 0.0),
            f.kind in PRECURSOR_KINDS,
        )
        for f in fleet.failures
        if f.ts <= eval_end
    ]
    per_node: dict[str, tuple[str, int]] = {}
    models = dict(zip(keys["hostname"], keys["model"], strict=True))
    for host, _ in slots:
        model_name, n = per_node.get(host, (str(models.get(host, "")), 0))
        per_node[host] = (model_name, n + 1)

    def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype)

    return ScoredFleet(
        FleetSpecSummary(seed, len(slots), days, sudden_fraction, accel, thermal_drift_c, family),
        [(h, m, n) for h, (m, n) in per_node.items()],
        slots,
        eval_start,
        eval_end,
        at_all[t_eval],
        np.asarray(ptr, dtype=np.int64),
        cat(lives, np.int32),
        cat(risks, np.float32),
        cat(rules, bool),
        cat(hards, bool),
        cat(links, object),
        keys["key"].astype(str).to_numpy(),
        life_slot,
        failures,
        float(model.threshold),
    )
