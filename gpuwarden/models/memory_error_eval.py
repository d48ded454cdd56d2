"""Judging HBM error predictors (``memory_errors``) on a time-ordered split, three ways, and
measuring what the events before each test-period uncorrectable error could say about it.

    table = observation_table(errors, "device")
    scores = evaluate_level(table, "device")            # [Score]: model, rule, paper's forest
    _, _, cut = time_split(table)
    coverage(table, errors, "device", cut)              # Coverage: episodes and their history

``bench/bench_calchas.py`` prints both as the tables of docs/real-data.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden.models.memory_errors import (
    DAY_S,
    PAPER_NEGATIVES_PER_POSITIVE,
    PAPER_THRESHOLD,
    TRAIN_SHARE,
    downsample,
    fit_model,
    fit_rule,
    paper_features,
    paper_forest,
    prf,
    rule_flags,
    time_split,
    unit_keys,
)


@dataclass(frozen=True)
class Score:
    """One predictor on one test set: precision, recall, F1 (means over seeds), the rows and
    positive rows it was judged on, and what was chosen on the training rows."""

    level: str
    protocol: str
    predictor: str
    precision: float
    recall: float
    f1: float
    rows: int
    positives: int
    note: str = ""


def _mean(values: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    a = np.array(values, dtype=np.float64)
    return tuple(
        float(np.nanmean(a[:, i])) if np.isfinite(a[:, i]).any() else np.nan for i in range(3)
    )  # type: ignore[return-value]


def _judge(
    level: str,
    protocol: str,
    train: pd.DataFrame,
    test: pd.DataFrame,
    seeds: tuple[int, ...],
    subset: np.ndarray | None = None,
) -> list[Score]:
    """The three predictors trained on ``train`` and judged on ``test`` (rows ``subset``)."""
    sel = np.ones(len(test), bool) if subset is None else subset
    y = test["y"].to_numpy()[sel]
    out: list[Score] = []
    k = fit_rule(train)
    flags = rule_flags(test, k)[sel]
    out.append(Score(level, protocol, "rule", *prf(y, flags), len(y), int(y.sum()), f"k={k:g}"))
    runs, forest, thresholds = [], [], []
    for seed in seeds:
        try:
            m = fit_model(train, level, random_state=seed)
        except ValueError as exc:  # a block with one class: say so rather than score nothing
            runs.append((np.nan, np.nan, np.nan))
            thresholds.append(str(exc).split(";")[0])
        else:
            runs.append(prf(y, m.flags(test)[sel]))
            thresholds.append(f"{m.threshold:.2f}")
        rf = paper_forest(level, seed).fit(paper_features(train), train["y"])
        p = rf.predict_proba(paper_features(test))[:, list(rf.classes_).index(1)]
        forest.append(prf(y, (p > PAPER_THRESHOLD[level])[sel]))
    note = "threshold " + ", ".join(sorted(set(thresholds)))
    out.append(Score(level, protocol, "model", *_mean(runs), len(y), int(y.sum()), note))
    out.append(Score(level, protocol, "paper's forest", *_mean(forest), len(y), int(y.sum()), ""))
    return out


def evaluate_level(
    table: pd.DataFrame,
    level: str,
    *,
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4),
    share: float = TRAIN_SHARE,
) -> list[Score]:
    """Model, rule and the published recipe on one level's ``observation_table``, three ways:

    - ``all days``: every test row (UEs that repeat an ongoing episode included);
    - ``new UE``: the same predictors judged only on rows whose unit had no UE in the last
      7 days, so a flag means an episode that has not begun;
    - ``paper's protocol``: negatives sampled down to 20 per positive before a time-ordered
      70/30 split, as the published code does (one draw per seed; means over seeds).
    """
    train, test, _ = time_split(table, share)
    fresh = (test["ue_7d"] == 0).to_numpy()
    out = _judge(level, "all days", train, test, seeds)
    out += _judge(level, "new UE", train, test, seeds, subset=fresh)
    per_seed: dict[str, list[tuple[float, float, float]]] = {}
    sizes = (0, 0)
    for seed in seeds:
        small = downsample(table, PAPER_NEGATIVES_PER_POSITIVE, seed)
        tr, te, _ = time_split(small, share)
        for s in _judge(level, "paper's protocol", tr, te, (seed,)):
            per_seed.setdefault(s.predictor, []).append((s.precision, s.recall, s.f1))
            sizes = (s.rows, s.positives)
    for name, runs in per_seed.items():
        out.append(Score(level, "paper's protocol", name, *_mean(runs), *sizes, "mean of seeds"))
    return out


@dataclass(frozen=True)
class Coverage:
    """What the events before a test-period uncorrectable error can say about it, per level:
    episodes (a UE with no UE on the unit in the 7 days before), those with any earlier error
    on the unit, with one in the 7 days before, and with a CE in the 7 days before; and the
    share of positive test rows whose unit had any error before the row's time."""

    level: str
    episodes: int
    with_any_before: int
    with_any_7d: int
    with_ce_7d: int
    positive_rows: int
    positive_rows_with_history: int


def coverage(table: pd.DataFrame, errors: pd.DataFrame, level: str, cut: float) -> Coverage:
    """``Coverage`` of the test period (from ``cut``)."""
    keys = unit_keys(errors, level)
    e = errors.assign(_key=keys).sort_values("ts", kind="stable")
    episodes = any_before = any_7d = ce_7d = 0
    for _, g in e.groupby("_key", sort=False):
        ts, ue = g["ts"].to_numpy(), g["uncorrectable"].to_numpy(bool)
        ue_ts = ts[ue]
        starts = ue_ts[np.r_[True, np.diff(ue_ts) > 7 * DAY_S]] if len(ue_ts) else ue_ts
        for s in starts[starts >= cut]:
            episodes += 1
            before = ts < s
            any_before += bool(before.any())
            recent = before & (ts >= s - 7 * DAY_S)
            any_7d += bool(recent.any())
            ce_7d += bool((recent & ~ue).any())
    test = table[table["t"] >= cut]
    pos = test[test["y"] == 1]
    return Coverage(
        level,
        episodes,
        any_before,
        any_7d,
        ce_7d,
        len(pos),
        int(pos["h_since_any"].notna().sum()),
    )


__all__ = ["Coverage", "Score", "coverage", "evaluate_level"]
