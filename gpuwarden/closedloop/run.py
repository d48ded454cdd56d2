"""Run the evaluation: every (sudden share, seed) fleet once, the four arms on each.

Fleets are independent, so ``jobs`` > 1 runs them in worker processes (each pinned to one
BLAS/OpenMP thread so two workers do not fight over the same cores). Progress is one tqdm bar
over fleets on stderr.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Any

from gpuwarden.closedloop.arms import ARMS
from gpuwarden.closedloop.fleet import FAMILY_FIRST_SEED, FIRST_SEED, scored_fleet
from gpuwarden.closedloop.loop import ArmResult, run_arm
from gpuwarden.closedloop.workload import WorkloadSpec, make_workload
from gpuwarden.errors import InputError

PREFILL_S = 3 * 86400.0  # the workload starts this long before the evaluated period


@dataclass(frozen=True)
class RunConfig:
    """What one evaluation ran; ``model_path`` None is the shipped model, ``threshold`` None
    the model's own line (the model arm's at-risk line otherwise)."""

    seeds: tuple[int, ...]
    days: float
    gpus: int
    sudden: tuple[float, ...]
    accel: float
    model_path: str | None = None
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    thermal_drift_c: float = 0.0
    threshold: float | None = None
    family: bool = False

    def __post_init__(self) -> None:
        if not self.seeds:
            raise InputError("give at least one seed")
        if self.gpus < 8 or self.gpus % 8:
            raise InputError(f"--gpus must be a multiple of 8 (8 GPUs a node), got {self.gpus}")
        if not 1 <= self.days <= 400:
            raise InputError(f"--days must be in 1..400, got {self.days:g}")
        if self.accel <= 0:
            raise InputError(f"--accel must be > 0, got {self.accel:g}")
        for s in self.sudden:
            if not 0 <= s <= 1:
                raise InputError(f"a sudden share must be in 0..1, got {s:g}")
        if self.family and self.thermal_drift_c:
            raise InputError("--thermal-drift: a family member draws its own drift")
        if self.threshold is not None and not 0 < self.threshold < 1:
            raise InputError(f"--threshold must be between 0 and 1, got {self.threshold:g}")


@dataclass
class ClosedLoopResult:
    config: RunConfig
    results: list[ArmResult]
    seconds: float
    model_card: dict[str, Any]


def run_seed(seed: int, sudden: float, config: RunConfig, model: Any = None) -> list[ArmResult]:
    """One fleet, scored once, and the four arms on it."""
    from gpuwarden.models.artifact import load_model

    model = model if model is not None else load_model(config.model_path)
    fleet = scored_fleet(
        seed=seed,
        gpus=config.gpus,
        days=config.days,
        sudden_fraction=sudden,
        accel=config.accel,
        thermal_drift_c=config.thermal_drift_c,
        model=model,
        family=config.family,
    )
    if config.threshold is not None:
        fleet = replace(fleet, threshold=config.threshold)
    start = fleet.eval_start_ts - PREFILL_S
    workload = make_workload(
        fleet.n_slots, start, fleet.eval_end_ts, seed=seed, spec=config.workload
    )
    return [run_arm(fleet, workload, arm, start_ts=start) for arm in ARMS]


def _worker(seed: int, sudden: float, config: RunConfig) -> list[ArmResult]:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return run_seed(seed, sudden, config)


def run_closed_loop(
    *,
    seeds: int | Sequence[int] = 5,
    days: float = 90.0,
    gpus: int = 512,
    sudden: Sequence[float] = (0.0, 0.3, 0.5),
    accel: float = 20.0,
    model_path: str | None = None,
    workload: WorkloadSpec | None = None,
    thermal_drift_c: float = 0.0,
    threshold: float | None = None,
    family: bool = False,
    jobs: int = 1,
    progress: bool = True,
) -> ClosedLoopResult:
    """Every sudden share x seed; ``seeds`` a count (from ``FIRST_SEED``, or
    ``FAMILY_FIRST_SEED`` with ``family``: members of the randomized family) or the seeds."""
    from tqdm import tqdm

    from gpuwarden.models.artifact import load_model

    first = FAMILY_FIRST_SEED if family else FIRST_SEED
    seed_list = tuple(range(first, first + seeds)) if isinstance(seeds, int) else tuple(seeds)
    config = RunConfig(
        seed_list,
        float(days),
        int(gpus),
        tuple(float(s) for s in sudden),
        float(accel),
        model_path,
        workload or WorkloadSpec(),
        float(thermal_drift_c),
        None if threshold is None else float(threshold),
        bool(family),
    )
    model = load_model(model_path)  # fail early on a bad model, and keep its card
    t0 = time.perf_counter()
    tasks = [(seed, s) for s in config.sudden for seed in config.seeds]
    results: list[ArmResult] = []
    bar = tqdm(total=len(tasks), unit="fleet", desc="closed loop", disable=not progress)
    try:
        if jobs <= 1:
            for seed, s in tasks:
                bar.set_postfix_str(f"seed {seed}, sudden {s:.0%}")
                results += run_seed(seed, s, config, model)
                bar.update()
        else:
            with ProcessPoolExecutor(max_workers=min(jobs, os.cpu_count() or 1)) as pool:
                futures = [pool.submit(_worker, seed, s, config) for seed, s in tasks]
                for fut in as_completed(futures):
                    results += fut.result()
                    bar.update()
            order = {task: i for i, task in enumerate(tasks)}  # as run one by one
            results.sort(key=lambda r: (order[(r.seed, r.sudden_fraction)], ARMS.index(r.arm)))
    finally:
        bar.close()
    return ClosedLoopResult(config, results, time.perf_counter() - t0, dict(model.card))
