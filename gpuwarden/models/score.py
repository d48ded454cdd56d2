"""Score a fleet: one row per GPU with its risk, its state and the reasons.

    rows = score_store(store, load_model(), at=None)              # now (the newest sample)
    rows = backtest(store, model, start=t0, end=t1, step_s=6 * 3600)

A GPU is scored when it sent a sample in the 24 h before ``at`` (a GPU that fell off the bus an
hour ago is still listed, as unhealthy). ``risk`` is the calibrated probability of failing within
the model's horizon; ``state`` is unhealthy on a hard signal, at-risk at ``risk >= threshold``,
else ok. Reasons are given for every GPU that is not ok, and for any with risk >= 0.3.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.health import GpuState, Reason, RiskAssessment, Verdict
from gpuwarden.models.artifact import RiskModel
from gpuwarden.models.features import (
    FLEET_FIELDS,
    HISTORY_H,
    LONG_FIELDS,
    RECENT_H,
    compute_features,
    fleet_stats,
    rows_at,
)
from gpuwarden.models.history import load_panel, newest_sample_ts
from gpuwarden.models.panel import HOUR_S, HourlyPanel
from gpuwarden.models.reasons import actions, explain_reasons, hard_reasons
from gpuwarden.models.rules import (
    AT_RISK,
    OK,
    UNHEALTHY,
    LinkRules,
    hard_signal,
    hard_table,
    held_names,
    link_reasons,
    states,
)
from gpuwarden.signals import SIGNAL_FIELDS, SIGNALS, Signal, advice, missing_signals, note
from gpuwarden.store.base import Store
from gpuwarden.telemetry import GpuId
from gpuwarden.tuning import scoring_threads
from gpuwarden.wording import counted

HISTORY_S = HISTORY_H * HOUR_S  # what the features read before the scoring hour
REPORTING_H = 24
EXPLAIN_FROM = 0.3
COLUMNS = ("at", "hostname", "gpu", "uuid", "model", "risk", "state", "reasons")
#: Beside ``COLUMNS`` a frame carries ``evidence`` (each row's reasons as ``health.Reason``
#: records: the sentence and the features behind it), ``action`` (NVIDIA's, for people),
#: which ``assessments`` and ``verdicts`` hand on, and ``missing`` (the ``signals`` the store
#: had nothing of for that GPU, which its risk leaves out); the CLI prints ``COLUMNS``.
FRAME_COLUMNS = (*COLUMNS, "evidence", "action", "missing", "rule")

#: Above this day-to-day movement (C) of the HBM-core spread on the fleet's median GPU, ``score``
#: warns for a model whose card does not say what it was trained on (``drift_limit``): the
#: shipped model (waves 15-16) was trained on fleets whose figure, median over daily scoring
#: times, is 0.45-1.56 C (the default simulator 0.37-0.45, family members 100-123 with their
#: drift 0.53-1.56; ``bench/bench_fleet_drift.py``), and its card says so. Wave 11's model,
#: trained without drift, made 24-114 false flags per 1,000 GPU-days on drifting fleets
#: (docs/models.md).
SPREAD_DRIFT_LIMIT_C = 1.6
#: the model card's record of its training fleets' drift (``training_spread_drift``)
CARD_DRIFT_KEY = "spread_drift_trained_c"

#: The fleet's benign error level (wave 23): these percentiles, over the GPUs scored at one
#: time, of these features. On fresh fleets with every error rate x10 the shipped model made
#: 3.3 false flags per 1,000 GPU-days against 0.15 (docs/models.md: "Choosing the at-risk
#: line"); the level tells such a fleet from the ones the model was trained on.
ERROR_LEVEL_FEATURES = ("sbe_per_day_7d", "pcie_replay_per_min_7d")
ERROR_LEVEL_QUANTILES = (0.75, 0.9)
#: fewest GPUs reading a feature for its percentiles to count
ERROR_LEVEL_MIN_GPUS = 20
#: ``score`` warns where a level passes the training fleets' highest by this factor
ERROR_LEVEL_MARGIN = 2.0
#: the model card's record of its training fleets' levels (``training_error_level``)
CARD_LEVEL_KEY = "error_level_trained"


@dataclass(frozen=True)
class RiskScore:
    """One GPU's verdict at ``at`` (Unix s)."""

    at: float
    hostname: str
    gpu: int
    uuid: str
    model: str
    risk: float  # probability of failing within the horizon (0..1)
    state: str  # ok, at-risk, unhealthy
    reasons: str


@scoring_threads()  # OpenMP held to the score_threads setting while the trees predict
def _score_rows(
    panel: HourlyPanel,
    t: list[int],
    model: RiskModel,
    *,
    explain_all: bool = False,
    partial: bool = False,
    timings: dict[str, float] | None = None,
    link_rules: LinkRules | None = None,
    fleet: HourlyPanel | None = None,
) -> pd.DataFrame:
    """Rows for the GPUs reporting up to each bucket in ``t``. With ``partial`` (one ``t``, the
    hour still under way), risk and its reasons come from the last whole hour: the model learnt
    on whole hours, and a bucket of nine minutes reads as an hour with few errors (risk on a
    board with a steady 100 errors a day fell from 0.63 to 0.08 nine minutes past the hour).
    Hard signals the partial hour already shows count at once. ``timings`` gets the seconds
    spent on ``features`` and on the ``model`` (risk, states, reasons), for the benchmark.
    ``link_rules`` (default: the ``link_rules`` setting) mark GPUs at-risk beside the model.
    ``fleet``: the whole fleet's ``FLEET_FIELDS`` over the same hours, where ``panel`` holds
    a shard of it (``store.shard.HostShard``): its error rates and thermal rises are read
    against the whole fleet's, not the shard's."""
    started = time.perf_counter()
    rows = current_boards(panel, rows_at(panel, t, recent_h=REPORTING_H))
    if len(rows) == 0:
        return pd.DataFrame(columns=list(FRAME_COLUMNS))
    split = partial and t[0] > 0
    stats = None if fleet is None else _stats_of(fleet, [float(panel.hours[i]) for i in t], split)
    if split:
        meta_all, X_all = compute_features(panel, _with_whole_hour(panel, rows), fleet=stats)
        n = len(rows)
        meta = meta_all.iloc[n:].reset_index(drop=True)
        X_now = X_all.iloc[n:].reset_index(drop=True)
        X = X_all.iloc[:n].reset_index(drop=True)
        featured = time.perf_counter()
        risk = model.risk(X)
        hard = hard_signal(X_now)
        X.loc[hard] = X_now.loc[hard]  # an unhealthy GPU's reasons name the signal seen now
    else:
        meta, X = compute_features(panel, rows, fleet=stats)
        featured = time.perf_counter()
        risk = model.risk(X)
        hard = hard_signal(X)
    link = (LinkRules.in_force() if link_rules is None else link_rules).table(X)
    state = states(risk, hard, model.threshold, link.to_numpy().any(axis=1))
    which = (state != OK) | (risk >= EXPLAIN_FROM) | explain_all
    evidence = explain_reasons(model.estimator, X, meta, np.asarray(which))
    for i in np.flatnonzero(link.to_numpy().any(axis=1)):  # after hard signals, before the model's
        said = link_reasons(X.iloc[i], meta.iloc[i], link.iloc[i])
        present = hard_table(X.iloc[[i]]).iloc[0]
        n_hard = len(hard_reasons(X.iloc[i], present, meta["fatal_xid"].iloc[i])) if hard[i] else 0
        evidence[i] = (*evidence[i][:n_hard], *said, *evidence[i][n_hard:])
    missing = _missing(panel, rows[:, 1], meta["model"].astype(str).to_numpy())
    evidence = [
        (*e, Reason(note(m), {})) if m else e for e, m in zip(evidence, missing, strict=True)
    ]
    out = pd.DataFrame(
        {
            "at": meta["at"].to_numpy(),
            "hostname": meta["hostname"].to_numpy(),
            "gpu": meta["gpu"].to_numpy(np.int64),
            "uuid": meta["uuid"].to_numpy(),
            "model": meta["model"].to_numpy(),
            "risk": np.round(risk, 4),
            "state": state,
            "reasons": ["; ".join(r) for r in evidence],
            "evidence": evidence,
            "action": actions(X, meta, state),
            "missing": [tuple(x.name for x in m) for m in missing],
            "rule": held_names(link),
        }
    )
    out.attrs["error_level"] = error_level(X)
    if timings is not None:
        timings["features"] = featured - started
        timings["model"] = time.perf_counter() - featured
    return out


def current_boards(panel: HourlyPanel, rows: np.ndarray) -> np.ndarray:
    """``rows`` (t, g) without the boards another one had replaced in their slot by ``t``: a
    GPU that reported in the last day is scored, but once another UUID reports in its slot
    (host, index) after it went quiet, the old board is out of the fleet, whatever errors it
    ended on. Another UUID is a new board (its first sample in or after the hour of the old
    board's last) or one renumbered into the slot (a GPU off the bus renumbers the ones after
    it at the next boot; it reports there in a later hour)."""
    if len(rows) == 0:
        return rows
    slot = panel.keys.groupby(["hostname", "gpu"], sort=False).ngroup().to_numpy()
    shared = np.bincount(slot)[slot] > 1
    if not shared[rows[:, 1]].any():
        return rows
    uuid = panel.keys["uuid"].astype(str).to_numpy()
    keep = np.ones(len(rows), dtype=bool)
    for i in np.flatnonzero(shared[rows[:, 1]]):
        t, g = int(rows[i, 0]), int(rows[i, 1])
        last = int(np.flatnonzero(panel.seen[: t + 1, g]).max())
        others = np.flatnonzero((slot == slot[g]) & (uuid != uuid[g]))
        new = (panel.first[others] >= last) & (panel.first[others] <= t)
        later = panel.seen[last + 1 : t + 1][:, others].any(axis=0)
        keep[i] = not (new | later).any()
    return rows[keep]


def _with_whole_hour(panel: HourlyPanel, rows: np.ndarray) -> np.ndarray:
    """``rows`` (all at one bucket, the partial hour) after the same GPUs at the last whole
    hour; a GPU first seen in the partial hour is scored on it."""
    t0 = int(rows[0, 0])
    whole = rows.copy()
    known = np.isin(rows[:, 1], rows_at(panel, [t0 - 1], recent_h=REPORTING_H)[:, 1])
    whole[known, 0] = t0 - 1
    return np.vstack([whole, rows])


def _stats_of(fleet: HourlyPanel, hours: list[float], split: bool) -> pd.DataFrame:
    """``features.fleet_stats`` of the GPUs ``fleet`` holds that reported up to each hour
    in ``hours`` (bucket starts), picked as ``_score_rows`` picks a shard's."""
    if fleet.shape[0] == 0:
        return pd.DataFrame()
    t = [i for i in (fleet.index_of(h) for h in hours) if 0 <= i < fleet.shape[0]]
    rows = current_boards(fleet, rows_at(fleet, t, recent_h=REPORTING_H))
    if split and len(rows):
        rows = _with_whole_hour(fleet, rows)
    return fleet_stats(fleet, rows)


def fleet_panel(store: Store, first_at: float, last_at: float) -> HourlyPanel | None:
    """What a shard reads of the whole fleet to score from ``first_at`` to ``last_at``: its
    ``FLEET_FIELDS`` over the week before; None where ``store`` is not a shard (a ``HostShard``
    names the store it is cut from: ``fleet_store``)."""
    whole = getattr(store, "fleet_store", None)
    if whole is None:
        return None
    start = first_at - RECENT_H * HOUR_S
    return load_panel(whole, start=start, end=last_at, fields=FLEET_FIELDS)


def _missing(panel: HourlyPanel, g: np.ndarray, models: np.ndarray) -> list[list[Signal]]:
    """Per row, the signals its GPU life never had a reading of (``signals``)."""
    if panel.fields_read is None:
        return [[] for _ in g]
    cache: dict[tuple[int, str], list[Signal]] = {}
    out = []
    for col, model in zip(g.tolist(), models.tolist(), strict=True):
        key = (int(col), str(model))
        if key not in cache:
            read = dict(zip(SIGNAL_FIELDS, panel.fields_read[col].tolist(), strict=True))
            cache[key] = missing_signals(read, str(model))
        out.append(cache[key])
    return out


def missing_warnings(frame: pd.DataFrame) -> list[str]:
    """One line per signal some scored GPUs had nothing of: how many, and how to get it."""
    if "missing" not in frame or frame.empty:
        return []
    counts = pd.Series([n for m in frame["missing"] for n in m]).value_counts()
    by_name = {s.name: s for s in SIGNALS}
    return [advice(by_name[name], int(n), len(frame)) for name, n in counts.items()]


def fleet_spread_drift(panel: HourlyPanel, t: int) -> float | None:
    """How much the HBM-core spread moves from day to day on the fleet's median GPU: per GPU,
    the standard deviation of its 7 daily means up to bucket ``t`` (a day needs 6 hourly
    readings, a GPU 3 such days); None without a full week or without HBM temperature."""
    return _spread_drift(panel.gauge["spread_c"], t)


def _spread_drift(spread_c: np.ndarray, t: int) -> float | None:
    if t < 167:
        return None
    spread = spread_c[t - 167 : t + 1].reshape(7, 24, -1)
    k = (~np.isnan(spread)).sum(axis=1)
    day = np.where(k >= 6, np.nansum(spread, axis=1) / np.maximum(k, 1), np.nan)
    n = (~np.isnan(day)).sum(axis=0)
    ok = n >= 3
    if not ok.any():
        return None
    d = day[:, ok]
    mean = np.nanmean(d, axis=0)
    sd = np.sqrt(np.nansum(np.square(d - mean), axis=0) / (n[ok] - 1))
    return float(np.median(sd))


def daily_spread_drift(panel: HourlyPanel, times: np.ndarray, step_h: int = 1) -> np.ndarray:
    """``fleet_spread_drift`` at one of ``times`` (bucket indices ``step_h`` hours apart) a day,
    the days with a figure only."""
    return _daily_drift(panel.gauge["spread_c"], times[:: max(1, 24 // step_h)])


def _daily_drift(spread_c: np.ndarray, times: Any) -> np.ndarray:
    daily = [_spread_drift(spread_c, int(t)) for t in times]
    return np.array([d for d in daily if d is not None], dtype=np.float64)


def training_spread_drift(panel: HourlyPanel) -> dict[str, float | int] | None:
    """What a model trained on ``panel`` has seen: per fleet (the ``fleet`` column of panels
    put side by side, else the whole panel), the median of ``fleet_spread_drift`` at one bucket
    a day; the lowest and highest of those medians. None where no fleet reads HBM temperature
    for a week."""
    spread = panel.gauge["spread_c"]
    fleets = panel.keys["fleet"].to_numpy() if "fleet" in panel.keys else np.zeros(spread.shape[1])
    medians = []
    for name in pd.unique(fleets):
        known = _daily_drift(spread[:, fleets == name], range(167, spread.shape[0], 24))
        if known.size:
            medians.append(float(np.median(known)))
    if not medians:
        return None
    return {"min": round(min(medians), 3), "max": round(max(medians), 3), "fleets": len(medians)}


def drift_limit(card: dict[str, Any]) -> float:
    """The drift (C) above which a model's thermal reasons are untested: the most its training
    fleets showed (the card's ``CARD_DRIFT_KEY``), up to the next tenth of a degree;
    ``SPREAD_DRIFT_LIMIT_C`` for a card that does not say."""
    trained = card.get(CARD_DRIFT_KEY) or {}
    if trained.get("max") is None:
        return SPREAD_DRIFT_LIMIT_C
    return float(np.ceil(round(float(trained["max"]) * 10, 6)) / 10)


def drift_warnings(frame: pd.DataFrame) -> list[str]:
    """A line when the fleet's temperatures drift more than the model was trained on."""
    drift = frame.attrs.get("spread_drift_c")
    limit = frame.attrs.get("spread_drift_limit_c", SPREAD_DRIFT_LIMIT_C)
    if drift is None or drift <= limit:
        return []
    return [
        f"the HBM-core temperature spread moves {drift:.1f} C from day to day on the median "
        f"GPU, more than on any fleet the model was trained on (up to {limit:g} C); its "
        "thermal reasons are untested there and may flag healthy boards (docs/models.md: "
        "`gpuwarden score`, its drift warning)"
    ]


def error_level(X: pd.DataFrame) -> dict[str, float]:
    """The fleet's benign error level at one scoring time, from its rows' features: for each of
    ``ERROR_LEVEL_FEATURES`` read on at least ``ERROR_LEVEL_MIN_GPUS`` GPUs, its
    ``ERROR_LEVEL_QUANTILES`` (keys ``feature@q``). Unread features are left out, not 0."""
    out = {}
    for name in ERROR_LEVEL_FEATURES:
        v = X[name].to_numpy(np.float64) if name in X else np.empty(0)
        v = v[np.isfinite(v)]
        if v.size >= ERROR_LEVEL_MIN_GPUS:
            qs = np.quantile(v, ERROR_LEVEL_QUANTILES)
            for q, x in zip(ERROR_LEVEL_QUANTILES, qs, strict=True):
                out[f"{name}@{q:g}"] = float(x)
    return out


def daily_error_levels(panel: HourlyPanel) -> pd.DataFrame:
    """``error_level`` at one bucket a day from the end of the first week, one row per fleet
    (the ``fleet`` column of panels put side by side, else one) and day: columns ``fleet``,
    ``t`` and the levels. Empty without a week of history."""
    t = np.arange(167, panel.shape[0], 24)
    rows = rows_at(panel, t) if t.size else np.empty((0, 2), dtype=np.int64)
    if len(rows) == 0:
        return pd.DataFrame(columns=["fleet", "t"])
    _, X = compute_features(panel, rows)
    fleets = panel.keys["fleet"].to_numpy() if "fleet" in panel.keys else np.zeros(panel.shape[1])
    frame = pd.DataFrame({"fleet": fleets[rows[:, 1]], "t": rows[:, 0]})
    groups = frame.groupby(["fleet", "t"], sort=False).groups
    return pd.DataFrame(
        [{"fleet": f, "t": int(t_), **error_level(X.loc[i])} for (f, t_), i in groups.items()]
    )


def training_error_level(panel: HourlyPanel) -> dict[str, Any] | None:
    """What a model trained on ``panel`` has seen: per fleet (as ``training_spread_drift``),
    the median over one scoring time a day of ``error_level``; the highest of those medians per
    key, and the number of fleets. None where no fleet has a week of history."""
    daily = daily_error_levels(panel)
    medians = [
        g.drop(columns=["fleet", "t"]).median() for _, g in daily.groupby("fleet", sort=False)
    ]
    medians = [m for m in medians if not m.dropna().empty]
    if not medians:
        return None
    top = pd.DataFrame(medians).max()
    return {**{k: round(float(v), 4) for k, v in top.items()}, "fleets": len(medians)}


def level_limit(card: dict[str, Any]) -> dict[str, float]:
    """The levels above which ``score`` warns: ``ERROR_LEVEL_MARGIN`` x the card's
    ``CARD_LEVEL_KEY`` (none for a card without it)."""
    trained = card.get(CARD_LEVEL_KEY) or {}
    return {k: ERROR_LEVEL_MARGIN * float(v) for k, v in trained.items() if "@" in k}


def levels_over(level: dict[str, float], limit: dict[str, float]) -> list[str]:
    """The keys of ``level`` above their (positive) ``limit``."""
    return [k for k in level if k in limit and level[k] > limit[k] > 0]


def level_text(v: float) -> str:
    """An error level as people read it: whole and thousands separated from 100 up (``.3g``
    wrote 1.39e+03), three significant digits under it."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def level_warnings(frame: pd.DataFrame) -> list[str]:
    """A line when the fleet logs more correctable errors or replays than the model's training
    fleets did (``frame.attrs``: ``error_level``, ``error_level_limit``)."""
    level = frame.attrs.get("error_level") or {}
    limit = frame.attrs.get("error_level_limit") or {}
    over = levels_over(level, limit)
    if not over:
        return []
    said = ", ".join(
        f"{k.split('@')[0]} {level_text(level[k])} at the {float(k.split('@')[1]) * 100:g}th "
        f"percentile (the model's training fleets: up to "
        f"{level_text(limit[k] / ERROR_LEVEL_MARGIN)})"
        for k in over
    )
    return [
        f"the fleet's GPUs log more errors than any fleet the model was trained on: "
        f"{said}; expect more false flags at the card's line, and raise it with the "
        "at_risk_threshold setting or retrain with `gpuwarden train` (docs/models.md: "
        "choosing the at-risk line)"
    ]


def _order(frame: pd.DataFrame) -> pd.DataFrame:
    rank = frame["state"].map({UNHEALTHY: 0, AT_RISK: 1, OK: 2})
    frame = frame.assign(_rank=rank).sort_values(
        ["at", "_rank", "risk", "hostname", "gpu"], ascending=[True, True, False, True, True]
    )
    return frame.drop(columns="_rank").reset_index(drop=True)


def score_store(
    store: Store, model: RiskModel, *, at: float | None = None, explain_all: bool = False
) -> pd.DataFrame:
    """Every GPU that reported in the 24 h before ``at`` (default: just after the store's
    newest sample), worst first: the ``COLUMNS`` of ``RiskScore``."""
    if at is None:
        newest = newest_sample_ts(store)
        if newest is None:
            raise InputError(f"{store.url} holds no telemetry to score")
        at = newest + 1.0
    panel = load_panel(
        store,
        start=at - HISTORY_S,
        end=at,
        recent_from=at - RECENT_H * HOUR_S,
        long_fields=LONG_FIELDS,
    )
    fleet = fleet_panel(store, at, at)
    return score_panel(panel, model, at=at, explain_all=explain_all, fleet=fleet)


def score_panel(
    panel: HourlyPanel,
    model: RiskModel,
    *,
    at: float,
    explain_all: bool = False,
    timings: dict[str, float] | None = None,
    link_rules: LinkRules | None = None,
    fleet: HourlyPanel | None = None,
) -> pd.DataFrame:
    """``score_store`` on a panel already read, ending at ``at`` (``fleet``: as ``_score_rows``)."""
    last = panel.shape[0] - 1
    partial = bool(at < panel.hours[last] + HOUR_S) if last >= 0 else False
    out = _score_rows(
        panel,
        [last],
        model,
        explain_all=explain_all,
        partial=partial,
        timings=timings,
        link_rules=link_rules,
        fleet=fleet,
    )
    out["at"] = float(at)
    level = out.attrs.get("error_level", {})
    out = _order(out)
    out.attrs["spread_drift_c"] = fleet_spread_drift(panel, last)
    out.attrs["spread_drift_limit_c"] = drift_limit(model.card)
    out.attrs["error_level"] = level
    out.attrs["error_level_limit"] = level_limit(model.card)
    return out


def backtest(
    store: Store,
    model: RiskModel,
    *,
    start: float,
    end: float,
    step_s: float,
    progress: bool = False,
) -> pd.DataFrame:
    """The same rows as ``score_store`` at every ``step_s`` in ``[start, end]``.

    When every scoring time falls on the hour one history read serves them all; otherwise
    each time reads its own window, exactly as a live score would.
    """
    from tqdm import tqdm

    if step_s <= 0:
        raise InputError(f"--step must be positive, got {step_s:g} s")
    if end < start:
        raise InputError("--end is before --start")
    times = np.arange(start, end + 1e-6, step_s)
    if times.size > 100_000:
        raise InputError(f"{times.size} scoring times: use a larger --step")
    if np.all(np.mod(times, HOUR_S) == 0):
        panel = load_panel(
            store,
            start=times[0] - HISTORY_S,
            end=times[-1],
            progress=progress,
            recent_from=times[0] - RECENT_H * HOUR_S,
            long_fields=LONG_FIELDS,
        )
        t = [panel.index_of(a) - 1 for a in times]  # bucket t ends at hours[t] + 1 h == a
        fleet = fleet_panel(store, times[0], times[-1])
        parts = [
            _score_rows(panel, t[i : i + 168], model, fleet=fleet)
            for i in tqdm(range(0, len(t), 168), disable=not progress, desc="scoring")
        ]
    else:
        parts = [
            score_store(store, model, at=float(a))
            for a in tqdm(times, disable=not progress, desc="scoring")
        ]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=list(FRAME_COLUMNS))
    return _order(pd.concat(parts, ignore_index=True))


def render_table(frame: pd.DataFrame, *, top: int = 20) -> str:
    """Score rows as a text table: every GPU that is not ok, at least ``top`` rows, then a
    count per state (what ``gpuwarden score`` and the demo print)."""
    if frame.empty:
        return "no GPU reported in the 24 h before the scoring time\n"
    flagged = frame["state"] != OK
    shown = frame[flagged]
    if len(shown) < top:  # every flagged row, then the first ok ones up to ``top``
        shown = frame[flagged | (np.cumsum(~flagged) <= top - len(shown))]
    times = np.unique(frame["at"].to_numpy(np.float64))
    backtest = times.size > 1  # a row per GPU per scoring time: each row says its time

    def stamp(ts: float) -> str:
        return f"{pd.Timestamp(float(ts), unit='s', tz='UTC'):%Y-%m-%d %H:%M}"

    at = f"{'scored at (UTC)':<16}  " if backtest else ""
    lines = [f"{at}{'host':<12} {'gpu':>3}  {'uuid':<40} {'risk':>5}  {'state':<9}  reasons"]
    for r in shown.itertuples(index=False):
        at = f"{stamp(r.at):<16}  " if backtest else ""
        lines.append(
            f"{at}{r.hostname:<12} {r.gpu:>3}  {r.uuid:<40} {r.risk:>5.2f}  {r.state:<9}  "
            f"{r.reasons}"
        )
    rest = len(frame) - len(shown)
    counts = frame["state"].value_counts()
    summary = ", ".join(f"{counts.get(s, 0)} {s}" for s in (UNHEALTHY, AT_RISK, OK))
    more = f"... {rest} more; " if rest else ""
    if backtest:
        gpus = frame.drop_duplicates(["hostname", "gpu", "uuid"])
        lines.append(
            f"{more}{counted(len(frame), 'row')}: {counted(len(gpus), 'GPU')} at "
            f"{counted(times.size, 'scoring time')}, {stamp(times[0])} .. {stamp(times[-1])} "
            f"UTC: {summary}"
        )
    else:
        lines.append(f"{more}{counted(len(frame), 'GPU')} at {stamp(times[-1])} UTC: {summary}")
    return "\n".join(lines) + "\n"


def assessments(frame: pd.DataFrame) -> list[RiskAssessment]:
    """Score rows as the typed records ``serve`` decides on: risk, the model's own state, and
    its reasons with the features behind them."""
    out = []
    for r in frame.itertuples(index=False):
        risk = float(r.risk)
        out.append(
            RiskAssessment(
                gpu=GpuId(str(r.hostname), int(r.gpu), str(r.uuid), "", str(r.model)),
                ts=float(r.at),
                risk=risk if np.isfinite(risk) else math.nan,
                reasons=tuple(r.evidence),
                action=str(r.action),
                state=GpuState(str(r.state)),
                rule=str(r.rule) or None,
            )
        )
    return out


def verdicts(
    frame: pd.DataFrame, threshold: float, before: pd.DataFrame | None = None
) -> list[Verdict]:
    """Score rows as stored verdicts (``gpuwarden score --into``), in time order: the model's
    own state, a hard signal's cause when it is unhealthy. No hysteresis or overrides: those
    are serve's. A GPU's change of state is marked as serve marks it (``changed_from``, and
    ``since`` the row where it began), against its row before, its first row against its
    verdict in ``before`` (the stored ones up to the first row: ``read_verdicts(end=...,
    latest=True)``); a GPU with neither starts unmarked, ``since`` its first row."""
    last: dict[str, tuple[GpuState, float]] = {}
    if before is not None:
        for b in before.itertuples(index=False):
            since = float(b.since) if pd.notna(b.since) else float(b.ts)
            last[str(b.uuid)] = (GpuState(str(b.state)), since)
    out = []
    for a in sorted(assessments(frame), key=lambda a: a.ts):
        state = a.state or GpuState.OK
        prev = last.get(a.gpu.uuid)
        changed = None if prev is None or prev[0] is state else prev[0]
        since = prev[1] if prev is not None and changed is None else a.ts
        last[a.gpu.uuid] = (state, since)
        out.append(
            Verdict(
                ts=a.ts,
                gpu=a.gpu,
                state=state,
                risk=a.risk,
                cause="hard-signal" if state is GpuState.UNHEALTHY else "model",
                since=since,
                changed_from=changed,
                reasons=a.reasons,
                action=a.action,
                threshold=threshold,
            )
        )
    return out


def backfill(
    store: Store,
    model: RiskModel,
    into: Store,
    *,
    start: float,
    end: float,
    step_s: float = HOUR_S,
    progress: bool = False,
) -> int:
    """Score ``store`` at every ``step_s`` in ``[start, end]`` and store the rows in ``into`` as
    verdicts (what ``gpuwarden score --into`` does), changes of state marked against the
    verdicts ``into`` holds from before; returns verdicts written."""
    frame = backtest(store, model, start=start, end=end, step_s=step_s, progress=progress)
    return into.write_verdicts(verdicts(frame, model.threshold, before_verdicts(into, frame)))


def before_verdicts(into: Store, frame: pd.DataFrame) -> pd.DataFrame | None:
    """Each GPU's newest verdict in ``into`` before ``frame``'s first row, for ``verdicts``."""
    if frame.empty:
        return None
    return into.read_verdicts(end=float(frame["at"].min()), latest=True)


def records(frame: pd.DataFrame) -> list[RiskScore]:
    """Score rows as ``RiskScore`` records."""
    return [
        RiskScore(
            float(r.at),
            str(r.hostname),
            int(r.gpu),
            str(r.uuid),
            str(r.model),
            float(r.risk),
            str(r.state),
            str(r.reasons),
        )
        for r in frame.itertuples(index=False)
    ]
