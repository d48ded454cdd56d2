"""Lead-time metrics over scored (GPU, time) rows: recall at a lead, false flags, PR-AUC.

Definitions (docs/models.md repeats them):

- A failure is *caught at 24 h* when its GPU was flagged (state at-risk or unhealthy) at some
  scoring time in ``[failure - horizon, failure - 24 h]``. Its *lead time* is the failure time
  minus the first flag in ``[failure - horizon, failure)``.
- Only failures with at least ``lead`` hours of scored history before them count (a failure
  an hour into the record cannot be caught a day early); sudden failures are counted like any
  other, in their own rows, never dropped.
- A *false flag* is the start of a flag episode on a GPU that does not fail within the
  horizon of that start: flagged now and not flagged in the ``merge_gap`` before (24 h by
  default: a GPU flagged again an hour after its flag cleared is the same incident to the
  person who drained it). The rate is per 1,000 GPU-days of rows that do not fail within the
  horizon.
- PR-AUC is average precision over rows whose label is known (fails within the horizon or not).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.metrics import average_precision_score

HOUR_S = 3600.0


def failure_table(
    meta: pd.DataFrame,
    flagged: np.ndarray,
    failures: pd.DataFrame,
    *,
    horizon_s: float,
    lead_s: float = 86400.0,
) -> pd.DataFrame:
    """One row per failure in the scored period: key, kind, fail_ts, lead_h (NaN: never
    flagged), caught (flagged at least ``lead_s`` ahead)."""
    first_at = float(meta["at"].min()) if len(meta) else np.inf
    last_at = float(meta["at"].max()) if len(meta) else -np.inf
    f = failures[
        (failures["fail_ts"] >= first_at + lead_s) & (failures["fail_ts"] <= last_at + HOUR_S)
    ].copy()
    rows = meta.assign(flag=np.asarray(flagged, dtype=bool))
    rows = rows[rows["flag"]].merge(
        f[["key", "fail_ts"]], on="key", how="inner", suffixes=("", "_f")
    )
    fail_col = "fail_ts_f" if "fail_ts_f" in rows.columns else "fail_ts"
    lead = rows[fail_col] - rows["at"]
    rows = rows.assign(lead=lead)[(lead > 0) & (lead <= horizon_s)]
    best = rows.groupby("key")["lead"].max()
    f["lead_h"] = best.reindex(f["key"]).to_numpy() / HOUR_S
    f["caught"] = f["lead_h"] >= lead_s / HOUR_S
    return f.reset_index(drop=True)


def false_flags(
    meta: pd.DataFrame,
    flagged: np.ndarray,
    y: np.ndarray,
    known: np.ndarray,
    *,
    merge_gap_s: float = 86400.0,
) -> tuple[int, float]:
    """(flag episodes started on rows that do not fail within the horizon, GPU-days of such
    rows); the GPU-days assume equally spaced scoring times."""
    order = np.lexsort((meta["at"].to_numpy(), meta["key"].to_numpy()))
    key = meta["key"].to_numpy()[order]
    at = meta["at"].to_numpy()[order].astype(np.float64)
    flag = np.asarray(flagged, dtype=bool)[order]
    neg = ((np.asarray(y) == 0) & np.asarray(known, dtype=bool))[order]
    times = np.unique(at)
    step = float(np.median(np.diff(times))) if times.size > 1 else HOUR_S
    # time of the previous flag of the same GPU life (-inf when none)
    flag_at = np.where(flag, at, -np.inf)
    starts = np.r_[True, key[1:] != key[:-1]]
    group = np.cumsum(starts) - 1
    offset = np.where(starts, 0, 1)
    # running max of flag_at within each life, shifted by one row
    run = pd.Series(flag_at).groupby(group).cummax().to_numpy()
    prev_flag = np.where(offset == 1, np.r_[-np.inf, run[:-1]], -np.inf)
    onsets = flag & neg & (at - prev_flag > merge_gap_s)
    gpu_days = neg.sum() * step / 86400.0
    return int(onsets.sum()), float(gpu_days)


def pr_auc(y: np.ndarray, score: np.ndarray, known: np.ndarray) -> float:
    """Average precision over the rows with a known label (NaN when one class is absent)."""
    y, s = np.asarray(y)[known], np.asarray(score, dtype=np.float64)[known]
    if np.unique(y).size < 2:
        return float("nan")
    return float(average_precision_score(y, s))


def summarise(
    failures: pd.DataFrame,
    onsets: int,
    gpu_days: float,
    sudden_kinds: tuple[str, ...],
) -> pd.DataFrame:
    """Per failure mode, then "all with precursors" and "sudden": failures, caught at 24 h,
    recall, median lead (h); the false-flag rate goes on every row of the "all" lines."""
    rows = []
    sudden = failures["fail_kind"].isin(sudden_kinds)
    groups = [(k, failures["fail_kind"] == k) for k in sorted(failures["fail_kind"].unique())]
    groups += [("ALL with precursors", ~sudden), ("ALL sudden", sudden)]
    for name, mask in groups:
        sel = failures[mask]
        n = len(sel)
        caught = int(sel["caught"].sum())
        rows.append(
            {
                "mode": name,
                "failures": n,
                "caught_24h": caught,
                "recall_24h": caught / n if n else float("nan"),
                "median_lead_h": float(np.nanmedian(sel["lead_h"]))
                if sel["lead_h"].notna().any()
                else float("nan"),
            }
        )
    out = pd.DataFrame(rows)
    out.attrs["false_flags"] = onsets
    out.attrs["gpu_days"] = gpu_days
    out.attrs["false_flags_per_1000_gpu_days"] = onsets / gpu_days * 1000 if gpu_days else np.nan
    return out


#: Issue 17's false-flag definition: a flagged GPU-day of a GPU that does not fail within
#: this long after it; the last this-long of the record is left out (its outcome is unknown).
OUTCOME_S = 30 * 86400.0


def false_flag_days(
    meta: pd.DataFrame, flagged: np.ndarray, *, outcome_s: float = OUTCOME_S
) -> tuple[int, float]:
    """(flagged GPU-days of GPUs that do not fail within ``outcome_s`` of that day, GPU-days
    of such GPUs), over the days that end ``outcome_s`` before the newest row or earlier.
    A GPU-day is a GPU life's UTC day with at least one scored row; ``meta`` needs ``key``,
    ``at`` and ``fail_ts`` (NaN: no recorded failure). (0, 0.0) when no day qualifies."""
    at = meta["at"].to_numpy(np.float64)
    if at.size == 0:
        return 0, 0.0
    day = np.floor((at - 1.0) / 86400.0)
    end_of_day = (day + 1) * 86400.0
    fail = meta["fail_ts"].to_numpy(np.float64)
    closed = end_of_day + outcome_s <= at.max()
    fails_soon = (fail > day * 86400.0) & (fail <= end_of_day + outcome_s)
    keep = closed & ~fails_soon
    if not keep.any():
        return 0, 0.0
    frame = pd.DataFrame(
        {"key": meta["key"].to_numpy()[keep], "day": day[keep], "flag": np.asarray(flagged)[keep]}
    )
    days = frame.groupby(["key", "day"], sort=False)["flag"].any()
    return int(days.sum()), float(len(days))


def catchable(failures: pd.DataFrame, lead_s: float = 86400.0) -> np.ndarray:
    """Failures whose precursor began at least ``lead_s`` before them (simulator ground
    truth): the ones a detector could catch that early."""
    if "precursor_start_ts" not in failures:
        return np.zeros(len(failures), dtype=bool)
    lead = failures["fail_ts"].to_numpy(float) - failures["precursor_start_ts"].to_numpy(float)
    return lead >= lead_s


def lead_quantiles(leads_h: np.ndarray, qs=(0.1, 0.25, 0.5, 0.75, 0.9)) -> dict[str, float]:
    """Quantiles of the lead times (h) of failures flagged at all within the horizon."""
    v = np.asarray(leads_h, dtype=np.float64)
    v = v[np.isfinite(v)]
    return {f"p{int(q * 100)}": float(np.quantile(v, q)) if v.size else float("nan") for q in qs}
