"""What to simulate: ``FleetSpec``, and the GPU models and failure kinds it may name."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from gpuwarden.errors import ConfigError
from gpuwarden.sim import calib as C

MODELS: tuple[str, ...] = tuple(C.MODELS)
PRECURSOR_KINDS: tuple[str, ...] = C.PRECURSOR_KINDS  # failures announced by telemetry
SUDDEN_KINDS: tuple[str, ...] = C.SUDDEN_KINDS  # failures with no precursor
#: How a precursor's event rate grows towards the failure (``FleetSpec.precursor_shape``):
#: "accelerating" is the calibrated default; "mixed" draws one of the others per failure.
PRECURSOR_SHAPES: tuple[str, ...] = C.PRECURSOR_SHAPES
FAILURE_KINDS: tuple[str, ...] = (*PRECURSOR_KINDS, *SUDDEN_KINDS)
DEFAULT_START_TS = 1767225600.0  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class FleetSpec:
    """What to simulate. Times are Unix seconds (UTC); rates are per day of running time."""

    nodes: int = 16  # servers, named node000, node001, ...
    gpus_per_node: int = 8  # GPU indexes 0..n-1 per node (1-16)
    nodes_per_rack: int = 4  # consecutive nodes share a rack (rack00, ...) and its inlet air
    models: tuple[str, ...] = ("H100-80GB",)  # assigned to nodes in turn: MODELS
    start_ts: float = DEFAULT_START_TS  # the first sample
    days: float = 7.0  # length of the run (Fleet.chunks / run)
    step_s: int = 60  # seconds between samples
    seed: int = 1  # everything is a function of the seed
    accel: float = 1.0  # multiplies the failure rate, for demos and training data
    sudden_fraction: float = 0.3  # share of failures with no precursor at all
    #: share of HBM failures that start with an uncorrectable burst and no SBE ramp
    #: (``hbm_uncorrectable``, a sudden kind); Calchas: 34 of 39 devices
    hbm_sudden_fraction: float = C.HBM_SUDDEN_FRACTION
    failure_rate_per_gpu_day: float = 3e-4  # Meta Llama 3: 268 in 54 days on 16,384 H100s
    lookalike_fraction: float = 0.1  # boards with a benign anomaly that never fail
    kinds: tuple[str, ...] = ()  # restrict failures to these FAILURE_KINDS (empty: all)
    reboot_rate_per_node_day: float = 1 / 30  # node reboots: volatile counters restart
    driver_reload_rate_per_node_day: float = 1 / 60  # driver reloads: the same, shorter gap
    heat_events_per_rack_day: float = 0.05  # rack-wide inlet excursions of +4..12 C for hours
    ambient_c: float = 22.0  # mean rack inlet temperature (racks differ by -2..+3 C)
    diurnal_peak_utc_h: float = 20.0  # hour (UTC) of peak inference load
    #: The knobs below widen the precursors for the randomized family (``sim.family``); at
    #: their defaults the simulator draws exactly what it drew before they existed.
    precursor_shape: str = "accelerating"  # PRECURSOR_SHAPES
    precursor_magnitude: float = 1.0  # multiplies every precursor's error rates
    precursor_magnitude_sd: float = 0.0  # log-sd of a further per-failure factor
    precursor_length: float = 1.0  # multiplies the median precursor lengths
    background_noise: float = 1.0  # multiplies benign SBE, burst and PCIe replay rates
    pcie_noise: float = 1.0  # further multiplies the benign PCIe replay rates alone
    #: multiplies the error counts of every precursor (SBE, DBE, replays, NVLink errors), not
    #: its temperatures: another generator's units (``counters_scaled``)
    counter_scale: float = 1.0
    #: Benign temperature drift a healthy board shows (fan curves, workload mix, inlet air):
    #: standard deviations (C) of offsets drawn every ``thermal_drift_period_h`` hours and
    #: joined linearly, per GPU on the core, per GPU on the HBM (apart from the core), and per
    #: node on both. At 0 (the default) no offset is drawn.
    thermal_drift_core_c: float = 0.0
    thermal_drift_hbm_c: float = 0.0
    thermal_drift_node_c: float = 0.0
    thermal_drift_period_h: float = 24.0

    def __post_init__(self) -> None:
        ints = {
            "nodes": (1, 100_000),
            "gpus_per_node": (1, 16),
            "nodes_per_rack": (1, 10_000),
            "step_s": (1, 86_400),
            "seed": (0, 2**63 - 1),
        }
        for name, (lo, hi) in ints.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or not lo <= v <= hi:
                raise ConfigError(f"FleetSpec.{name} must be an integer in {lo}..{hi}, got {v!r}")
        unit = ("sudden_fraction", "hbm_sudden_fraction", "lookalike_fraction")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type == "float" and not (isinstance(v, int | float) and math.isfinite(v)):
                raise ConfigError(f"FleetSpec.{f.name} must be a finite number, got {v!r}")
            if f.type == "float" and f.name not in ("start_ts", "ambient_c") and v < 0:
                raise ConfigError(f"FleetSpec.{f.name} must not be negative, got {v!r}")
            if f.name in unit and v > (0.9 if f.name == "lookalike_fraction" else 1):
                raise ConfigError(f"FleetSpec.{f.name} must be a fraction, got {v!r}")
        if self.days <= 0:
            raise ConfigError(f"FleetSpec.days must be positive, got {self.days!r}")
        if not self.models:
            raise ConfigError("FleetSpec.models must name at least one model")
        for m in self.models:
            if m not in C.MODELS:
                raise ConfigError(
                    f"FleetSpec.models: unknown model {m!r}; known: {', '.join(MODELS)}"
                )
        if self.precursor_shape not in PRECURSOR_SHAPES:
            raise ConfigError(
                f"FleetSpec.precursor_shape: unknown shape {self.precursor_shape!r}; "
                f"known: {', '.join(PRECURSOR_SHAPES)}"
            )
        positive = ("precursor_magnitude", "precursor_length", "thermal_drift_period_h")
        for name in (*positive, "counter_scale"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"FleetSpec.{name} must be positive, got {getattr(self, name)!r}")
        for k in self.kinds:
            if k not in FAILURE_KINDS:
                raise ConfigError(
                    f"FleetSpec.kinds: unknown kind {k!r}; known: {', '.join(FAILURE_KINDS)}"
                )

    def counters_scaled(self, factor: float) -> FleetSpec:
        """The same fleet with every error rate, failing and benign alike, x ``factor``
        (``counter_scale`` and ``background_noise``): another generator's units, where the
        randomized family's committed ranges may be left behind on purpose. Temperatures stay:
        until wave 24 this scaled ``precursor_magnitude``, which also moves a cooling
        failure's rise (x10 made it 2.2 times as large, x0.1 0.45 times)."""
        if not (math.isfinite(factor) and factor > 0):
            raise ConfigError(f"counters_scaled: the factor must be positive, got {factor!r}")
        return replace(
            self,
            counter_scale=self.counter_scale * factor,
            background_noise=self.background_noise * factor,
        )

    @property
    def n_steps(self) -> int:
        return max(1, int(round(self.days * 86400 / self.step_s)))
