"""Why a GPU is flagged, in words a person acts on.

The model's reasons come from the feature groups (memory, thermal, PCIe, NVLink, Xid) that push
its score up: each group in turn is set back to a typical healthy GPU's values (the model's
``reference_``, the median of the healthy training rows) and the drop in risk is that group's
share. The groups with the largest drops are then said with the GPU's own numbers:

    single-bit errors 40/day, up 6x on the days before; 12 correctable row remaps this week

A hard signal comes first, with the action NVIDIA's Xid catalogue recommends for it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from gpuwarden.health import AT_RISK_ACTION, GpuState, Reason, describe
from gpuwarden.models.features import FEATURES
from gpuwarden.models.rules import HARD, hard_table
from gpuwarden.wording import plural

GROUPS: tuple[str, ...] = ("memory", "thermal", "pcie", "nvlink", "xid", "telemetry")
_GROUP_COLUMNS = {g: [f.name for f in FEATURES if f.group == g] for g in GROUPS}
MIN_SHARE = 0.05  # a group that moves the risk by less than this is not a reason


def _n(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 10 or float(v).is_integer() else f"{v:.1f}"


def _up(rise: float) -> str:
    """', up 6x on the days before' for a log-ratio rise of at least 2x."""
    if not np.isfinite(rise) or rise < np.log(2.0):
        return ""
    return f", up {np.exp(rise):.0f}x on the days before"


def _against_self_and_peers(r: pd.Series, prefix: str, what: str) -> list[str]:
    """The scale-free signs of one counter family in words: against the GPU's own past
    (started from nothing, a multiple of its usual rate, growing by a share an hour) and
    against its node's other GPUs."""
    out = []
    if r[f"{prefix}_new_24h"] > 0:
        out.append(f"{what} started in the last day after 6 days with none")
    elif r[f"{prefix}_log_vs_own"] >= np.log(4.0):
        out.append(f"{what} {np.exp(r[f'{prefix}_log_vs_own']):.0f}x this GPU's own rate")
    growth = r[f"{prefix}_growth_72h"]
    if np.isfinite(growth) and growth >= 0.02:
        out.append(f"{what} growing about {np.expm1(growth):.0%} an hour over 3 days")
    if r[f"{prefix}_node_rank_24h"] >= 0.99 and r[f"{prefix}_vs_node_log_24h"] > 0:
        out.append(f"more {what} than every other GPU on its node")
    return out


def _memory(r: pd.Series) -> list[str]:
    out = []
    if r["sbe_per_day_24h"] >= 1:
        out.append(f"single-bit errors {_n(r['sbe_per_day_24h'])}/day{_up(r['sbe_rise_24h'])}")
    for col, one, many in (
        ("remap_correctable_7d", "correctable row remap", "correctable row remaps"),
        ("remap_uncorrectable_7d", "uncorrectable row remap", "uncorrectable row remaps"),
        ("dbe_7d", "double-bit error", "double-bit errors"),
        ("retired_pages_7d", "page retired", "pages retired"),
    ):
        if r[col] >= 1:
            out.append(f"{_n(r[col])} {plural(r[col], one, many)} this week")
    if r["remap_pending_1h"] > 0 or r["retired_pending_1h"] > 0:
        out.append("a memory repair waits for a GPU reset")
    if r["xid92_7d"] >= 1:
        out.append(f"Xid 92 (high single-bit rate) {_n(r['xid92_7d'])}x this week")
    if r["sbe_per_day_24h"] >= 1:  # after the repairs: the rate above already says the rise
        out += _against_self_and_peers(r, "sbe", "single-bit errors")
    return out


#: ``spread_rise_vs_fleet`` from which the thermal reason names a rise under 3 C
FLEET_RISE_SAID = 3.0


def _thermal(r: pd.Series) -> list[str]:
    out = []
    if np.isfinite(r["spread_c_1h"]) and (r["spread_c_1h"] >= 8 or r["spread_rise_c"] >= 3):
        hot = f"HBM {_n(r['mem_temp_c_1h'])} C, {_n(r['spread_c_1h'])} C above the core"
        if r["spread_hours_over15_24h"] >= 1:
            hot += f" ({_n(r['spread_hours_over15_24h'])} h over 15 C today)"
        out.append(hot)
    elif r["spread_rise_vs_fleet"] >= FLEET_RISE_SAID and r["spread_rise_c"] >= 0.5:
        # small in degrees, large for this fleet: where no board's spread moves (wave 16)
        out.append(
            f"HBM-core spread up {r['spread_rise_c']:.1f} C on the week before, "
            f"{r['spread_rise_vs_fleet']:.0f}x the fleet's usual move"
        )
    hotter = [
        (what, r[f"{key}_load_rise_vs_fleet"])
        for what, key in (("HBM", "hbm"), ("core", "core"))
        if r[f"{key}_load_rise_vs_fleet"] >= FLEET_RISE_SAID
    ]
    if hotter:  # the HBM's if both: a cold plate shows there first
        what, z = hotter[0]
        out.append(
            f"{what} runs hotter at the same power than last week, {z:.0f}x the fleet's usual move"
        )
    if r["mem_temp_rise_c"] >= 3:
        out.append(f"HBM up {_n(r['mem_temp_rise_c'])} C on the week before")
    if abs(r["mem_temp_c_24h_vs_node"]) >= 3:
        out.append(f"HBM {r['mem_temp_c_24h_vs_node']:+.0f} C against the rest of its node")
    if r["thermal_violation_pct_24h"] >= 1:
        out.append(f"held back by thermal limits {_n(r['thermal_violation_pct_24h'])}% of the day")
    if r["hw_slowdown_hours_24h"] >= 1:
        out.append(f"hardware slowdown in {_n(r['hw_slowdown_hours_24h'])} h today")
    return out


def _pcie(r: pd.Series) -> list[str]:
    out = []
    if r["pcie_width_deficit_1h"] > 0:
        run = r["pcie_width_low_run_h"]
        since = f" for {_n(run)} h" if np.isfinite(run) and run >= 1 else ""
        out.append(f"PCIe link lost {r['pcie_width_deficit_1h']:.0%} of its lanes{since}")
    rate = r["pcie_replay_per_min_24h"]
    if rate > 0:
        limit = r["pcie_replay_vs_limit_1h"]
        share = f" ({limit:.0%} of DCGM's limit in the last hour)" if np.isfinite(limit) else ""
        out.append(f"PCIe replays {_n(rate)}/min{share}{_up(r['pcie_replay_rise_24h'])}")
        out += _against_self_and_peers(r, "pcie_replay", "PCIe replays")
    return out


def _nvlink(r: pd.Series) -> list[str]:
    out = []
    if r["nvlink_crc_per_min_24h"] > 0:
        relative = _against_self_and_peers(r, "nvlink_crc", "NVLink CRC errors")
        out += relative[:1]
        out.append(
            f"NVLink CRC errors {_n(r['nvlink_crc_per_min_24h'])}/min"
            f"{_up(r['nvlink_crc_rise_24h'])}"
        )
        out += relative[1:]
    if r["nvlink_recovery_24h"] >= 1:
        n = r["nvlink_recovery_24h"]
        out.append(f"{_n(n)} NVLink {plural(n, 'recovery', 'recoveries')} today")
    if r["xid74_7d"] >= 1:
        out.append(f"Xid 74 (NVLink error) {_n(r['xid74_7d'])}x this week")
    return out


def _xid(r: pd.Series) -> list[str]:
    out = []
    if r["xid_hw_24h"] >= 1:
        out.append(f"{_n(r['xid_hw_24h'])} hardware {plural(r['xid_hw_24h'], 'Xid')} today")
    if r["xid_app_24h"] >= 1:
        n = r["xid_app_24h"]
        out.append(f"{_n(n)} application {plural(n, 'Xid')} today")
    return out


def _telemetry(r: pd.Series) -> list[str]:
    if not r["gap_hours_24h"] >= 1 and not r["longest_gap_h_7d"] >= 2:
        return []
    return [
        f"no telemetry for {_n(r['gap_hours_24h'])} h of the last day "
        f"(longest silence this week {_n(r['longest_gap_h_7d'])} h)"
    ]


_SAY: dict[str, Callable[[pd.Series], list[str]]] = {
    "memory": _memory,
    "thermal": _thermal,
    "pcie": _pcie,
    "nvlink": _nvlink,
    "xid": _xid,
    "telemetry": _telemetry,
}


def group_shares(model, X: pd.DataFrame) -> pd.DataFrame:
    """Drop in risk when each group is set to its healthy reference, one column per group."""
    base = model.predict_proba(X)[:, 1]
    ref = pd.Series(model.reference_, index=list(model.feature_names_in_))
    out = {}
    for g in GROUPS:
        cols = _GROUP_COLUMNS[g]
        typical = X.copy()
        typical[cols] = np.broadcast_to(ref[cols].to_numpy(np.float32), (len(X), len(cols)))
        out[g] = base - model.predict_proba(typical)[:, 1]
    return pd.DataFrame(out, index=X.index)


def _features(row: pd.Series, columns: list[str]) -> dict[str, float]:
    return {c: float(row[c]) for c in columns}


def hard_reasons(row: pd.Series, present: pd.Series, fatal_xid: float) -> list[Reason]:
    """The hard signals ``present`` (a ``rules.hard_table`` row) in words, each with the
    action NVIDIA's Xid catalogue gives (the fatal Xid seen, or the one the signal implies);
    an action is said once even when two signals point at the same Xid."""
    out: list[Reason] = []
    said: set[int] = set()
    for rule in HARD:
        if not present[rule.name]:
            continue
        code = (
            rule.xid
            if rule.xid is not None
            else (int(fatal_xid) if np.isfinite(fatal_xid) else None)
        )
        text = rule.says(row)
        if code is not None and code in said:
            continue  # "fatal Xid 64" after "row remapping failed (Xid 64 ...)" adds nothing
        if code is not None:
            x = describe(code)
            text += f" (Xid {code}, {x.name}): {x.action.rstrip('.')}"
            said.add(code)
        out.append(Reason(text, _features(row, rule.columns)))
    return out


def actions(X: pd.DataFrame, meta: pd.DataFrame, state: np.ndarray) -> list[str]:
    """What to do, per row: for an unhealthy GPU the action of its first hard signal (the
    Xid catalogue's), for an at-risk one ``health.AT_RISK_ACTION``, else nothing."""
    out = [AT_RISK_ACTION if s == GpuState.AT_RISK else "" for s in state]
    bad = np.flatnonzero(np.asarray(state) == GpuState.UNHEALTHY)
    if bad.size == 0:
        return out
    hard = hard_table(X.iloc[bad])
    fatal = meta["fatal_xid"].to_numpy(np.float64)[bad] if "fatal_xid" in meta else None
    for j, i in enumerate(bad):
        for rule in HARD:
            if not hard.iloc[j][rule.name]:
                continue
            code = rule.xid
            if code is None and fatal is not None and np.isfinite(fatal[j]):
                code = int(fatal[j])
            if code is not None:
                out[i] = describe(code).action
                break
    return out


def explain(
    model, X: pd.DataFrame, meta: pd.DataFrame, which: np.ndarray, *, top: int = 2
) -> list[str]:
    """``explain_reasons`` as one sentence list per row, joined with "; " ("" for none)."""
    return ["; ".join(r) for r in explain_reasons(model, X, meta, which, top=top)]


def explain_reasons(
    model, X: pd.DataFrame, meta: pd.DataFrame, which: np.ndarray, *, top: int = 2
) -> list[tuple[Reason, ...]]:
    """Reasons for the rows where ``which`` is True (none elsewhere): hard signals first, then
    the ``top`` feature groups that raise the risk most, each in words with the features of
    its group (or of its hard signal) behind it."""
    reasons: list[tuple[Reason, ...]] = [()] * len(X)
    idx = np.flatnonzero(which)
    if idx.size == 0:
        return reasons
    sub = X.iloc[idx]
    shares = group_shares(model, sub)
    hard = hard_table(sub)
    fatal = (
        meta["fatal_xid"].to_numpy(np.float64)[idx]
        if "fatal_xid" in meta
        else np.full(idx.size, np.nan)
    )
    for j, i in enumerate(idx):
        row = sub.iloc[j]
        parts: list[Reason] = list(hard_reasons(row, hard.iloc[j], fatal[j]))
        ranked = shares.iloc[j].sort_values(ascending=False)
        for g, share in ranked.iloc[:top].items():
            if share < MIN_SHARE:
                break
            parts += _said(row, str(g))
        if not parts:  # nothing stands out on its own: say the strongest group anyway
            g = str(ranked.index[0])
            parts = _said(row, g) or [
                Reason(f"{g} signals unusual for this fleet", _features(row, _GROUP_COLUMNS[g]))
            ]
        reasons[i] = tuple(parts)
    return reasons


def _said(row: pd.Series, group: str) -> list[Reason]:
    """The group's first two sentences, each with the group's features behind it."""
    behind = _features(row, _GROUP_COLUMNS[group])
    return [Reason(text, behind) for text in _SAY[group](row)[:2]]
