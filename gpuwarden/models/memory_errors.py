"""Predicting an uncorrectable HBM error within 7 days from per-address error logs.

    errors = memory_error_frame(store.read_events(kinds=["memory_error"]))   # or errors_frame
    table = observation_table(errors, "device")     # one row per device and day: features, label
    scores = memory_error_eval.evaluate_level(table, "device")   # model, rule, paper's recipe

Rows are observations of a *unit* (a device, or one HBM bank of a device: stack, stack id,
pseudo-channel, bank group, bank array) at 00:00 UTC of each day: features from the errors
before that time only, and the label "an uncorrectable error (UER or UEO) in the unit within
``HORIZON_S``". Only days whose whole horizon lies inside the log are observed. Devices are
observed every day of the log (a device whose first error is uncorrectable is a miss nothing
could have flagged); banks from their first error on (a bank that has never erred is not
known to exist).

The split is in time: rows before the cut (70% of the observation days) train, rows after it
test, and training rows whose horizon crosses the cut are dropped, so no training label reads
the test period. Three predictors: a calibrated scikit-learn model (monotone trees in a
``TimeSplitCalibratedClassifier``, its threshold the F1-best one on the training rows), a rule
("any UE, or at least k CEs, in the unit in the last 7 days", k chosen on the training rows),
and the recipe of Calchas's published code (a random forest on distinct rows / columns / cells
per error type, negatives sampled down to 20 per positive, threshold 0.6 for servers and 0.55
for banks). ``memory_error_eval`` judges them and measures what the earlier events could say at
all; docs/real-data.md has the figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.collectors.memory_errors import BANK_FIELDS

DAY_S = 86400.0
HORIZON_S = 7 * DAY_S
#: The share of the observation days that trains (the paper's time-ordered 70/30 split).
TRAIN_SHARE = 0.7
LEVELS = ("device", "bank")
#: Calchas's published predictors, precision / recall / F1, means of the runs in their
#: repository (openeuler-mirror/hbm-predictor, data/processed_data/result/).
PAPER: dict[str, tuple[float, float, float]] = {
    "device": (0.34, 0.56, 0.42),
    "bank": (0.61, 0.73, 0.67),
}
#: The published recipe's threshold per level (prediction/prediction_performance.py).
PAPER_THRESHOLD = {"device": 0.6, "bank": 0.55}
PAPER_NEGATIVES_PER_POSITIVE = 20
_WINDOWS = {"1d": DAY_S, "7d": 7 * DAY_S, "30d": 30 * DAY_S}
_TYPES = ("CE", "UER", "UEO")


def unit_keys(errors: pd.DataFrame, level: str) -> np.ndarray:
    """Each error's unit: the device's uuid, or uuid/stack/sid/pc/bg/ba for a bank."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    keys = errors["uuid"].astype(str)
    if level == "bank":
        for f in BANK_FIELDS:
            keys = keys + "/" + errors[f].astype(str)
    return keys.to_numpy(dtype=object)


def observation_days(errors: pd.DataFrame, horizon_s: float = HORIZON_S) -> np.ndarray:
    """00:00 UTC of every day after the log's first error whose horizon ends inside the log."""
    if errors.empty:
        return np.empty(0)
    first = np.floor(errors["ts"].min() / DAY_S) * DAY_S + DAY_S
    last = float(errors["ts"].max()) - horizon_s
    return np.arange(first, last + 1, DAY_S)


@dataclass
class _Unit:
    ts: np.ndarray
    ecc: np.ndarray
    row: np.ndarray
    col: np.ndarray
    cell: np.ndarray
    bank: np.ndarray

    @classmethod
    def of(cls, e: pd.DataFrame) -> _Unit:
        bank = np.zeros(len(e), dtype=np.int64)
        for f in BANK_FIELDS:
            bank = bank * 64 + e[f].to_numpy(np.int64)
        row, col = e["row"].to_numpy(np.int64), e["col"].to_numpy(np.int64)
        return cls(
            e["ts"].to_numpy(np.float64),
            e["ecc"].to_numpy(dtype=object),
            bank * 2**20 + row,  # a row is only that row within its bank
            bank * 2**12 + col,
            (bank * 2**20 + row) * 2**12 + col,
            bank,
        )


def _unit_rows(u: _Unit, times: np.ndarray, horizon_s: float) -> dict[str, np.ndarray]:
    """Features and label of one unit at each of ``times`` (errors strictly before t)."""
    n = len(times)
    ue = u.ecc != "CE"
    now = np.searchsorted(u.ts, times, side="left")
    out: dict[str, np.ndarray] = {}
    cum = {t: np.r_[0, np.cumsum(u.ecc == t)] for t in _TYPES}
    cum_ue = np.r_[0, np.cumsum(ue)]
    for name, w in _WINDOWS.items():
        lo = np.searchsorted(u.ts, times - w, side="left")
        out[f"ce_{name}"] = (cum["CE"][now] - cum["CE"][lo]).astype(np.float64)
        out[f"ue_{name}"] = (cum_ue[now] - cum_ue[lo]).astype(np.float64)
    for t in _TYPES:
        out[f"{t.lower()}_all"] = cum[t][now].astype(np.float64)
    lo7 = np.searchsorted(u.ts, times - 7 * DAY_S, side="left")
    distinct = {
        f"{what}_{span}": np.zeros(n)
        for what in ("rows", "cols", "banks", "ue_rows", "hours", "peak_per_hour")
        for span in ("7d", "all")
    }
    hours = np.floor(u.ts / 3600.0)
    for i in range(n):
        for span, a in (("7d", lo7[i]), ("all", 0)):
            b = now[i]
            if b <= a:
                continue
            distinct[f"rows_{span}"][i] = np.unique(u.row[a:b]).size
            distinct[f"cols_{span}"][i] = np.unique(u.col[a:b]).size
            distinct[f"banks_{span}"][i] = np.unique(u.bank[a:b]).size
            distinct[f"ue_rows_{span}"][i] = np.unique(u.row[a:b][ue[a:b]]).size
            _, per_hour = np.unique(hours[a:b], return_counts=True)
            distinct[f"hours_{span}"][i] = per_hour.size
            distinct[f"peak_per_hour_{span}"][i] = per_hour.max()
    out |= distinct
    ue_ts, ce_ts = u.ts[ue], u.ts[~ue]
    for name, ts in (("any", u.ts), ("ue", ue_ts), ("ce", ce_ts)):
        k = np.searchsorted(ts, times, side="left")
        last = ts[np.maximum(k - 1, 0)] if len(ts) else np.zeros(n)
        out[f"h_since_{name}"] = np.where(k > 0, (times - last) / 3600.0, np.nan)
    out["age_h"] = np.where(now > 0, (times - u.ts[0]) / 3600.0, np.nan)
    ahead = np.searchsorted(ue_ts, times + horizon_s, side="left")
    out["y"] = (ahead > np.searchsorted(ue_ts, times, side="left")).astype(np.int64)
    return out


#: Feature columns of ``observation_table`` (bank rows add the ``dev_`` context columns).
FEATURES: tuple[str, ...] = (
    *(f"{k}_{w}" for w in _WINDOWS for k in ("ce", "ue")),
    "ce_all",
    "uer_all",
    "ueo_all",
    *(
        f"{what}_{span}"
        for what in ("rows", "cols", "banks", "ue_rows", "hours", "peak_per_hour")
        for span in ("7d", "all")
    ),
    "h_since_any",
    "h_since_ue",
    "h_since_ce",
    "age_h",
)
_DEVICE_CONTEXT = ("ue_7d", "ce_7d", "ue_30d", "banks_all", "h_since_ue")
BANK_FEATURES: tuple[str, ...] = (*FEATURES, *(f"dev_{c}" for c in _DEVICE_CONTEXT))


def observation_table(
    errors: pd.DataFrame,
    level: str,
    *,
    times: np.ndarray | None = None,
    horizon_s: float = HORIZON_S,
    progress: bool = False,
) -> pd.DataFrame:
    """One row per unit and observation time: ``key``, ``uuid``, ``t``, the features, and
    ``y`` (1 if the unit has an uncorrectable error in ``[t, t + horizon_s)``)."""
    from tqdm import tqdm

    times = observation_days(errors, horizon_s) if times is None else np.asarray(times, float)
    errors = errors.sort_values("ts", kind="stable").reset_index(drop=True)
    keys = unit_keys(errors, level)
    parts = []
    groups = pd.Series(np.arange(len(errors))).groupby(keys, sort=True)
    for key, idx in tqdm(groups, disable=not progress, desc=f"{level} features", unit="unit"):
        e = errors.iloc[idx.to_numpy()]
        at = times if level == "device" else times[times > e["ts"].iloc[0]]
        if not len(at):
            continue
        cols = _unit_rows(_Unit.of(e), at, horizon_s)
        parts.append(pd.DataFrame({"key": key, "uuid": e["uuid"].iloc[0], "t": at} | cols))
    columns = ["key", "uuid", "t", *FEATURES, "y"]
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    if level == "bank" and len(table):
        dev = observation_table(errors, "device", times=times, horizon_s=horizon_s)
        ctx = dev[["uuid", "t", *_DEVICE_CONTEXT]].rename(
            columns={c: f"dev_{c}" for c in _DEVICE_CONTEXT}
        )
        table = table.merge(ctx, on=["uuid", "t"], how="left")
        columns = ["key", "uuid", "t", *BANK_FEATURES, "y"]
    return table[columns].sort_values(["t", "key"], kind="stable").reset_index(drop=True)


def time_split(table: pd.DataFrame, share: float = TRAIN_SHARE, horizon_s: float = HORIZON_S):
    """(train, test, cut): rows before the cut (``share`` of the observation days) whose
    horizon ends by the cut, and the rows from the cut on."""
    days = np.unique(table["t"])
    if days.size < 2:
        raise ValueError("need at least two observation days to split by time")
    cut = float(days[min(days.size - 1, max(1, int(days.size * share)))])
    train = table[table["t"] + horizon_s <= cut]
    return train, table[table["t"] >= cut], cut


def prf(y: np.ndarray, flag: np.ndarray) -> tuple[float, float, float]:
    """Precision, recall, F1 (NaN where undefined: no flag, or no positive)."""
    y, flag = np.asarray(y, bool), np.asarray(flag, bool)
    tp = float((y & flag).sum())
    p = tp / flag.sum() if flag.any() else float("nan")
    r = tp / y.sum() if y.any() else float("nan")
    f = 2 * p * r / (p + r) if p + r > 0 else (0.0 if np.isfinite(p + r) else float("nan"))
    return p, r, f


def rule_flags(table: pd.DataFrame, k: float) -> np.ndarray:
    """The rule: any UE, or at least ``k`` CEs, in the unit in the last 7 days."""
    return ((table["ue_7d"] > 0) | (table["ce_7d"] >= k)).to_numpy()


RULE_KS: tuple[float, ...] = (1, 2, 3, 5, 10, 20, 50, 100, 200, np.inf)


def fit_rule(train: pd.DataFrame) -> float:
    """The k of ``rule_flags`` with the best F1 on ``train`` (inf: UEs only)."""
    scores = [np.nan_to_num(prf(train["y"], rule_flags(train, k))[2]) for k in RULE_KS]
    return float(RULE_KS[int(np.argmax(scores))])


def _best_threshold(y: np.ndarray, p: np.ndarray) -> float:
    candidates = np.unique(np.round(p, 4))
    if not candidates.size:
        return 0.5
    f1 = [np.nan_to_num(prf(y, p >= c)[2]) for c in candidates]
    return float(candidates[int(np.argmax(f1))])


#: The model's inputs and their direction: more recent errors never lower the risk, a longer
#: quiet spell never raises it. Monotone trees keep to that on a period whose mix of error
#: patterns the training period did not have (unconstrained trees learnt that errors in 2022
#: were rarely followed by more, and missed every 2023 episode).
RISING: tuple[str, ...] = (
    "ue_1d",
    "ue_7d",
    "ue_30d",
    "ce_1d",
    "ce_7d",
    "ce_30d",
    "rows_7d",
    "ue_rows_7d",
    "hours_7d",
    "peak_per_hour_7d",
    "banks_7d",
    "uer_all",
    "ueo_all",
    "ce_all",
)
FALLING: tuple[str, ...] = ("h_since_ue", "h_since_ce", "h_since_any")
_BANK_RISING = ("dev_ue_7d", "dev_ce_7d", "dev_ue_30d", "dev_banks_all")
_BANK_FALLING = ("dev_h_since_ue",)
#: A quiet spell longer than the log is as good as "never": hours used for "no error yet".
_NEVER_H = 1e5


def model_inputs(table: pd.DataFrame, level: str) -> pd.DataFrame:
    """The model's columns of ``table``: counts as log(1 + n), hours since as log(1 + h) with
    "never" read as ``_NEVER_H`` hours."""
    rising = RISING + (_BANK_RISING if level == "bank" else ())
    falling = FALLING + (_BANK_FALLING if level == "bank" else ())
    out = {c: np.log1p(table[c].to_numpy(np.float64)) for c in rising}
    out |= {c: np.log1p(table[c].fillna(_NEVER_H).to_numpy(np.float64)) for c in falling}
    return pd.DataFrame(out, index=table.index)


@dataclass
class MemoryErrorModel:
    """A calibrated classifier of ``model_inputs`` and its threshold."""

    estimator: Any
    level: str
    threshold: float

    def risk(self, table: pd.DataFrame) -> np.ndarray:
        return self.estimator.predict_proba(model_inputs(table, self.level))[:, 1]

    def flags(self, table: pd.DataFrame) -> np.ndarray:
        return self.risk(table) >= self.threshold


def fit_model(train: pd.DataFrame, level: str, *, random_state: int = 0) -> MemoryErrorModel:
    """Monotone gradient-boosted trees on the earlier 70% of ``train``'s days, probabilities
    calibrated (sigmoid) on the later 30%; the threshold is the F1-best on ``train``."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    from gpuwarden.models.estimator import TimeSplitCalibratedClassifier

    X = model_inputs(train, level)
    n_rising = len(RISING) + (len(_BANK_RISING) if level == "bank" else 0)
    trees = HistGradientBoostingClassifier(
        learning_rate=0.05,
        max_iter=200,
        max_leaf_nodes=8,
        min_samples_leaf=20,
        l2_regularization=1.0,
        monotonic_cst=[1] * n_rising + [-1] * (X.shape[1] - n_rising),
        random_state=random_state,
    )
    est = TimeSplitCalibratedClassifier(trees, method="sigmoid", random_state=random_state)
    y = train["y"].to_numpy()
    est.fit(X, y, sample_time=train["t"].to_numpy())
    # The threshold from every training row: the calibration block alone holds a few dozen
    # positive device-days, too few to place it (measured: F1 0.45-0.55 vs 0.45-0.50 from
    # the whole block on devices, 0.20 vs 0.42 on banks).
    return MemoryErrorModel(est, level, _best_threshold(y, est.predict_proba(X)[:, 1]))


def paper_features(table: pd.DataFrame) -> pd.DataFrame:
    """The published recipe's inputs that these logs hold: distinct rows, columns and cells
    with errors over the observation window, all types together and per type, are
    approximated by the window's distinct rows / columns and per-type counts (the log keeps no
    power or temperature)."""
    cols = ["rows_7d", "cols_7d", "ue_rows_7d", "ce_7d", "ue_7d", "rows_all", "cols_all"]
    return table[cols]


def paper_forest(level: str, random_state: int) -> Any:
    """The random forest of prediction/prediction_performance.py, per level."""
    from sklearn.ensemble import RandomForestClassifier

    common = {
        "n_estimators": 200,
        "max_depth": 50,
        "class_weight": "balanced",
        "criterion": "entropy",
        "random_state": random_state,
        "n_jobs": 1,
    }
    if level == "bank":
        return RandomForestClassifier(min_samples_split=10, **common)
    return RandomForestClassifier(min_samples_leaf=100, min_samples_split=100, **common)


def downsample(table: pd.DataFrame, per_positive: int, seed: int) -> pd.DataFrame:
    """All positive rows and ``per_positive`` negatives for each, drawn at random; time order
    kept (the published recipe does this before its 70/30 split)."""
    y = table["y"].to_numpy()
    neg, pos = np.flatnonzero(y == 0), np.flatnonzero(y == 1)
    want = len(pos) * per_positive
    if want < len(neg):
        neg = np.random.default_rng(seed).choice(neg, size=want, replace=False)
    return table.iloc[np.sort(np.r_[neg, pos])]


__all__ = [
    "BANK_FEATURES",
    "FEATURES",
    "HORIZON_S",
    "LEVELS",
    "PAPER",
    "RISING",
    "FALLING",
    "MemoryErrorModel",
    "downsample",
    "fit_model",
    "fit_rule",
    "observation_days",
    "observation_table",
    "model_inputs",
    "paper_features",
    "prf",
    "rule_flags",
    "time_split",
    "unit_keys",
]
