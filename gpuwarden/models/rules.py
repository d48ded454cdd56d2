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

Link rules (``LinkRules``) sit beside the model and mark a GPU *at-risk* on their own: a PCIe
link running below its maximum width for hours, and one GPU's NVLink CRC errors growing against
its own past while its node's other GPUs see none. The model ranks both too low to flag (issue
17; docs/models.md, "Rules beside the model"). ``GPUWARDEN_LINK_RULES`` sets them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden import health
from gpuwarden.errors import ConfigError
from gpuwarden.health import DEFAULT_AT_RISK, GpuState, Reason
from gpuwarden.wording import counted

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
        lambda r: f"{counted(round(r['dbe_24h']), 'double-bit ECC error')} in 24 h",
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
        lambda r: f"{counted(round(r['xid_fatal_24h']), 'fatal Xid')} in 24 h",
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


def states(
    risk: np.ndarray,
    hard: np.ndarray,
    threshold: float = DEFAULT_AT_RISK,
    link: np.ndarray | None = None,
) -> np.ndarray:
    """ok / at-risk / unhealthy per row: hard signals first, then the model's risk or a link
    rule (``LinkRules.flag``)."""
    at_risk = np.asarray(risk) >= threshold
    if link is not None:
        at_risk = at_risk | np.asarray(link, dtype=bool)
    out = np.where(at_risk, AT_RISK, OK).astype(object)
    out[np.asarray(hard, dtype=bool)] = UNHEALTHY
    return out


PCIE_LINK_DEGRADED = "pcie_link_degraded"
NVLINK_ERRORS_GROWING = "nvlink_errors_growing"
ENV_LINK_RULES = "GPUWARDEN_LINK_RULES"
_SETTING = f"link_rules ({ENV_LINK_RULES})"


@dataclass(frozen=True)
class LinkRules:
    """Two link faults the model ranks too low to flag, read from features it already has.

    A link trained down to fewer lanes is a fault in itself in the field (InfiniteHBD's trace
    counts "PCI link width low" as 25 of its 158 GPU faults), but in the simulator it always
    comes with replays, so the model learnt the replays, not the width. Width, not gen: a GPU
    may drop its link *speed* at idle to save power, never its lanes. ``pcie_hours`` rides over
    a transient downtraining. NVLink CRC errors that grow on one GPU while its node's others
    see none are a failing link whatever their magnitude; the model learnt the simulator's
    magnitudes instead. A node of one GPU has no peers and the NVLink rule never fires there.
    """

    pcie: bool = True
    pcie_hours: float = 2.0  # hours in a row below full width
    nvlink: bool = True
    nvlink_active_hours: float = 6.0  # hours with CRC errors, of the last 24
    nvlink_growth: float = 0.0  # slope of log(1 + hourly errors) over 3 days, > this
    nvlink_own_ratio: float = 4.0  # last day's (1 + hourly mean) over the 6 days before's
    nvlink_peer_per_h: float = 0.5  # node median's hourly errors, at most

    @classmethod
    def parse(cls, text: str) -> LinkRules:
        """``off``, ``on``, or ``name=value`` pairs separated by commas (``pcie=off,
        pcie_hours=4``); a bad name or value is a ``ConfigError`` naming it."""
        text = text.strip()
        if text in ("", "on"):
            return cls()
        if text == "off":
            return cls(pcie=False, nvlink=False)
        known = [f.name for f in fields(cls)]
        settings: dict[str, Any] = {}
        for part in text.split(","):
            name, eq, value = (x.strip() for x in part.partition("="))
            if not eq or name not in known:
                raise ConfigError(
                    f"{_SETTING}: {part.strip()!r} is not name=value with a name of "
                    f"{', '.join(known)}"
                )
            if name in ("pcie", "nvlink"):
                if value not in ("on", "off"):
                    raise ConfigError(f"{_SETTING}: {name} must be on or off, not {value!r}")
                settings[name] = value == "on"
                continue
            try:
                number = float(value)
            except ValueError:
                number = float("nan")
            if not np.isfinite(number) or number < 0:
                raise ConfigError(f"{_SETTING}: {name} must be a number >= 0, not {value!r}")
            settings[name] = number
        return cls(**settings)

    @classmethod
    def in_force(cls) -> LinkRules:
        """The rules ``use_link_rules`` put in force (the ``link_rules`` setting, which the
        command line reads from its TOML file or the environment); without that call, as
        ``$GPUWARDEN_LINK_RULES`` says."""
        return _active if _active is not None else cls.parse(os.environ.get(ENV_LINK_RULES, ""))

    def table(self, X: pd.DataFrame) -> pd.DataFrame:
        """One boolean column per link rule; an unread signal (NaN) never trips one."""
        out = pd.DataFrame(index=X.index)
        out[PCIE_LINK_DEGRADED] = self.pcie & (
            X["pcie_width_low_run_h"].to_numpy(np.float64) >= self.pcie_hours
        )
        col = X.__getitem__
        peers = (
            col("nvlink_crc_per_min_24h").to_numpy(np.float64)
            - col("nvlink_crc_per_min_24h_vs_node").to_numpy(np.float64)
        ) * 60.0
        with np.errstate(invalid="ignore"):
            out[NVLINK_ERRORS_GROWING] = self.nvlink & (
                (col("nvlink_active_hours_24h").to_numpy(np.float64) >= self.nvlink_active_hours)
                & (col("nvlink_crc_growth_72h").to_numpy(np.float64) > self.nvlink_growth)
                & (
                    (
                        col("nvlink_crc_log_vs_own").to_numpy(np.float64)
                        >= np.log(self.nvlink_own_ratio)
                    )
                    | (col("nvlink_crc_new_24h").to_numpy(np.float64) > 0)
                )
                & (peers <= self.nvlink_peer_per_h)
                & (col("nvlink_crc_node_rank_24h").to_numpy(np.float64) >= 0.99)
            )
        return out

    def flag(self, X: pd.DataFrame) -> np.ndarray:
        """True where any link rule holds."""
        return self.table(X).to_numpy().any(axis=1)

    def names(self, X: pd.DataFrame) -> np.ndarray:
        """Per row, the link rules that hold, joined by ", " ("" where none): ``score``'s
        ``rule`` column. Joins only the rows where one holds (a few in a fleet)."""
        return held_names(self.table(X))


def held_names(table: pd.DataFrame) -> np.ndarray:
    """Per row of a boolean ``table``, the names of its true columns joined by ", " ("" where
    none), as an object array."""
    held = table.to_numpy(dtype=bool)
    names = np.asarray(table.columns, dtype=object)
    out = np.full(len(held), "", dtype=object)
    for i in np.flatnonzero(held.any(axis=1)):
        out[i] = ", ".join(names[held[i]])
    return out


def link_reasons(row: pd.Series, meta: pd.Series, present: pd.Series) -> list[Reason]:
    """The link rules ``present`` (a ``LinkRules.table`` row) in words, with the GPU's own
    widths (``meta``'s ``pcie_width`` / ``pcie_width_max``) and counts."""
    out = []
    if present[PCIE_LINK_DEGRADED]:
        hours = row["pcie_width_low_run_h"]
        width, wmax = meta.get("pcie_width", np.nan), meta.get("pcie_width_max", np.nan)
        if np.isfinite(width) and np.isfinite(wmax):
            text = f"PCIe link running at x{width:.0f} of x{wmax:.0f} for {hours:.0f} h"
        else:
            text = f"PCIe link below its full width for {hours:.0f} h"
        out.append(
            Reason(
                text + " (link rule)",
                {c: float(row[c]) for c in ("pcie_width_low_run_h", "pcie_width_deficit_1h")},
            )
        )
    if present[NVLINK_ERRORS_GROWING]:
        cols = (
            "nvlink_active_hours_24h",
            "nvlink_crc_growth_72h",
            "nvlink_crc_log_vs_own",
            "nvlink_crc_per_min_24h",
            "nvlink_crc_per_min_24h_vs_node",
        )
        text = (
            f"NVLink CRC errors in {row['nvlink_active_hours_24h']:.0f} of the last 24 h, "
            f"growing about {np.expm1(row['nvlink_crc_growth_72h']):.1%} an hour over 3 days, "
            "while its node's median GPU sees none (link rule)"
        )
        out.append(Reason(text, {c: float(row[c]) for c in cols}))
    return out


_active: LinkRules | None = None


def use_link_rules(text: str | None) -> LinkRules:
    """Put the ``link_rules`` setting ``text`` in force for ``score``, ``evaluate`` and the
    closed loop (None: back to ``$GPUWARDEN_LINK_RULES``); a bad value is a ``ConfigError``
    naming it. Returns the rules now in force."""
    global _active
    _active = None if text is None else LinkRules.parse(str(text))
    return LinkRules.in_force()
