"""The rule baseline, and the hard signals that make a GPU unhealthy whatever the model says.

Rules are the thresholds teams start with, plus DCGM's health-check thresholds:

    single-bit ECC errors above 10 a day                  sbe_per_day_24h > 10
    HBM more than 15 C hotter than the core               spread_c_1h > 15
    PCIe replays above DCGM's limit (per lane per minute: Gen3 0.48, Gen4 0.96, Gen5 1.92,
    times the link's lanes)                               pcie_replay_vs_limit_1h > 1
    DCGM: retired pages >= 63                             retired_pages_total >= 63
    DCGM: NVLink CRC errors >= 100 per second             nvlink_crc_per_min_1h >= 6000

Hard signals (last 24 h) are ``gpuwarden.health.HARD_SIGNALS`` read from the features: a
double-bit error (DCGM: any volatile DBE), a row-remap failure, the GPU lost from the bus or
needing a reset, or a fatal Xid (``health.FATAL_XIDS``). They mark the GPU *unhealthy* at once;
the model's risk >= the threshold (``health.at_risk_threshold``) marks it *at-risk*; otherwise
it is *ok*.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden import health
from gpuwarden.health import DEFAULT_AT_RISK, GpuState

OK, AT_RISK, UNHEALTHY = GpuState.OK.value, GpuState.AT_RISK.value, GpuState.UNHEALTHY.value


@dataclass(frozen=True)
class Rule:
    name: str
    test: Callable[[pd.DataFrame], np.ndarray]
    says: Callable[[pd.Series], str]  # the finding in words, from one GPU's features
    #: Xid whose catalogue action applies (hard signals only)
    xid: int | None = None

    @property
    def columns(self) -> list[str]:
        """The feature column the rule reads: the evidence behind its reason."""
        return [self.test.column] if isinstance(self.test, _Limit) else []


@dataclass(frozen=True)
class _Limit:
    """``X[column] > limit`` (or ``>=``); NaN compares False: an unreported signal never trips
    a rule."""

    column: str
    limit: float
    inclusive: bool = False

    def __call__(self, X: pd.DataFrame) -> np.ndarray:
        v = X[self.column].to_numpy(np.float64)
        return v >= self.limit if self.inclusive else v > self.limit


def _gt(col: str, limit: float) -> _Limit:
    return _Limit(col, limit)


def _ge(col: str, limit: float) -> _Limit:
    return _Limit(col, limit, inclusive=True)


RULES: tuple[Rule, ...] = (
    Rule(
        "sbe_over_10_per_day",
        _gt("sbe_per_day_24h", 10.0),
        lambda r: f"single-bit errors {r['sbe_per_day_24h']:.0f}/day (rule: > 10)",
    ),
    Rule(
        "mem_spread_over_15c",
        _gt("spread_c_1h", 15.0),
        lambda r: f"HBM {r['spread_c_1h']:.0f} C hotter than the core (rule: > 15 C)",
    ),
    Rule(
        "pcie_replays_over_limit",
        _gt("pcie_replay_vs_limit_1h", 1.0),
        lambda r: (
            f"PCIe replays {r['pcie_replay_per_min_1h']:.1f}/min, "
            f"{r['pcie_replay_vs_limit_1h']:.1f}x DCGM's limit"
        ),
    ),
    Rule(
        "dcgm_retired_pages",
        _ge("retired_pages_total", 63.0),
        lambda r: f"{r['retired_pages_total']:.0f} retired pages (DCGM: >= 63)",
    ),
    Rule(
        "dcgm_nvlink_crc",
        _ge("nvlink_crc_per_min_1h", 6000.0),
        lambda r: f"NVLink CRC errors {r['nvlink_crc_per_min_1h'] / 60:.0f}/s (DCGM: >= 100/s)",
    ),
)
# The hard signals as the features carry them over the last 24 h; the GPU lost and the GPU
# needing a reset share one feature (both are NVML events on a GPU that stopped answering).
HARD: tuple[Rule, ...] = (
    Rule(
        health.DOUBLE_BIT_ERROR.name,
        _gt("dbe_24h", 0.0),
        lambda r: f"{r['dbe_24h']:.0f} double-bit ECC error(s) in 24 h",
        xid=health.DOUBLE_BIT_ERROR.xid,
    ),
    Rule(
        health.ROW_REMAP_FAILURE.name,
        _gt("remap_failure_24h", 0.0),
        lambda r: health.ROW_REMAP_FAILURE.what,
        xid=health.ROW_REMAP_FAILURE.xid,
    ),
    Rule(
        health.GPU_LOST.name,
        _gt("gpu_lost_24h", 0.0),
        lambda r: "GPU fell off the bus or needed a reset",
        xid=health.GPU_LOST.xid,
    ),
    Rule(
        health.FATAL_XID.name,
        _gt("xid_fatal_24h", 0.0),
        lambda r: f"{r['xid_fatal_24h']:.0f} fatal Xid(s) in 24 h",
    ),
)


def _table(X: pd.DataFrame, rules: tuple[Rule, ...]) -> pd.DataFrame:
    return pd.DataFrame({r.name: r.test(X) for r in rules}, index=X.index)


def rule_table(X: pd.DataFrame) -> pd.DataFrame:
    """One boolean column per baseline rule."""
    return _table(X, RULES)


def hard_table(X: pd.DataFrame) -> pd.DataFrame:
    """One boolean column per hard signal."""
    return _table(X, HARD)


def hard_signal(X: pd.DataFrame) -> np.ndarray:
    """True where any hard signal is present."""
    return hard_table(X).to_numpy().any(axis=1)


def baseline_flag(X: pd.DataFrame) -> np.ndarray:
    """The rule baseline's verdict: any rule or any hard signal."""
    return rule_table(X).to_numpy().any(axis=1) | hard_signal(X)


def states(risk: np.ndarray, hard: np.ndarray, threshold: float = DEFAULT_AT_RISK) -> np.ndarray:
    """ok / at-risk / unhealthy per row: hard signals first, then the model's risk."""
    out = np.where(np.asarray(risk) >= threshold, AT_RISK, OK).astype(object)
    out[np.asarray(hard, dtype=bool)] = UNHEALTHY
    return out
