"""Labels and training sets: does a GPU fail within the horizon after a scoring time?

A row is one GPU life at one scoring time ``at``. Its label is 1 when that life ends in a
recorded failure within ``(at, at + horizon]``. A life ends at its failure (the board that comes
back, or its replacement with a new UUID, is a new life), so no row is ever scored after its
own failure. Rows whose horizon runs past the end of the failure records are left out: a GPU
that has not failed *yet* is not known to be healthy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.models.features import compute_features, rows_at
from gpuwarden.models.panel import HOUR_S, HourlyPanel

DEFAULT_HORIZON_S = 7 * 86400.0


@dataclass
class Dataset:
    """Feature rows with their labels. ``meta`` also carries ``fail_ts`` and ``fail_kind``."""

    meta: pd.DataFrame
    X: pd.DataFrame
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)

    def select(self, mask: np.ndarray) -> Dataset:
        return Dataset(
            self.meta[mask].reset_index(drop=True),
            self.X[mask].reset_index(drop=True),
            self.y[mask],
        )


def labels_for(
    meta: pd.DataFrame, panel: HourlyPanel, horizon_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(label, fail_ts, fail_kind) for feature rows: 1 where the life fails in (at, at + h]."""
    by_key = panel.keys.set_index("key")
    fail_ts = by_key["fail_ts"].reindex(meta["key"]).to_numpy(np.float64)
    kind = by_key["fail_kind"].reindex(meta["key"]).fillna("").to_numpy(dtype=object)
    at = meta["at"].to_numpy(np.float64)
    y = (fail_ts > at) & (fail_ts <= at + horizon_s)
    return y.astype(np.int8), fail_ts, kind


def scoring_indices(
    panel: HourlyPanel, *, step_h: int, start: float | None = None, end: float | None = None
) -> np.ndarray:
    """Bucket indices of scoring times every ``step_h`` hours in ``[start, end]`` (the scoring
    time of bucket ``t`` is its end, ``hours[t] + 1 h``)."""
    if step_h < 1:
        raise InputError(f"scoring step must be at least 1 hour, got {step_h}")
    at = panel.hours + HOUR_S
    ok = np.ones(at.size, dtype=bool)
    if start is not None:
        ok &= at >= start
    if end is not None:
        ok &= at <= end
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return idx
    return idx[(at[idx] - at[idx[0]]) % (step_h * HOUR_S) == 0]


def build_dataset(
    panel: HourlyPanel,
    t_indices: np.ndarray,
    *,
    horizon_s: float = DEFAULT_HORIZON_S,
    labels_until: float | None = None,
    drop_unknown: bool = True,
    block: int = 168,
    progress: bool = False,
) -> Dataset:
    """Features and labels for every live GPU at each scoring time in ``t_indices``.

    ``labels_until``: the end of the failure records (default: the panel's last hour); rows
    with ``at + horizon`` past it are dropped (kept with ``meta.known`` False when
    ``drop_unknown`` is False, for evaluating flags up to the end). Rows are built ``block``
    scoring times at a time to keep memory bounded on long histories.
    """
    from tqdm import tqdm

    until = float(panel.hours[-1] + HOUR_S) if labels_until is None else float(labels_until)
    metas, xs, ys = [], [], []
    t_indices = np.asarray(t_indices, dtype=np.int64)
    starts = range(0, t_indices.size, block)
    for lo in tqdm(starts, desc="features", unit="block", disable=not progress):
        rows = rows_at(panel, t_indices[lo : lo + block])
        if len(rows) == 0:
            continue
        meta, X = compute_features(panel, rows)
        y, fail_ts, kind = labels_for(meta, panel, horizon_s)
        at = meta["at"].to_numpy()
        # past the records' end a positive is certain but a negative is not: drop both, or
        # the last week would hold only positives and bias the calibration block upward
        known = at + horizon_s <= until
        keep = ~(fail_ts <= at) & (known if drop_unknown else True)
        meta = meta.assign(fail_ts=fail_ts, fail_kind=kind, known=known)
        metas.append(meta[keep])
        xs.append(X[keep])
        ys.append(y[keep])
    if not metas:
        raise InputError("no GPU has telemetry at any of the scoring times")
    return Dataset(
        pd.concat(metas, ignore_index=True), pd.concat(xs, ignore_index=True), np.concatenate(ys)
    )
