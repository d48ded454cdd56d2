"""Trailing-window statistics over an ``HourlyPanel``, for many (time, GPU) rows at once.

A row is ``(t, g)``: the window ends with bucket ``t`` (inclusive) of GPU life ``g``. Sums and
counts come from one cumulative sum per array (two gathers per window, whatever its length);
peaks from a strided view. Every statistic is NaN when the window holds no reading.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


class Windows:
    """Window statistics for the rows ``(t, g)`` of one panel."""

    def __init__(
        self,
        t: np.ndarray,
        g: np.ndarray,
        first: np.ndarray,
        *,
        n_buckets: int,
        last_fraction: float = 1.0,
    ) -> None:
        self.t = t.astype(np.int64)
        self.g = g.astype(np.int64)
        # hours of history before the row that carry an increase (the first hour has none)
        self.age = (self.t - first[self.g]).astype(np.float64)
        # a partial last bucket (scoring at 10:20) holds less than an hour of increases
        self._short = np.where(self.t == n_buckets - 1, 1.0 - last_fraction, 0.0)

    def _cum(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        present = ~np.isnan(a)
        total = np.zeros((a.shape[0] + 1, a.shape[1]))
        np.cumsum(np.where(present, a, 0.0), axis=0, out=total[1:])
        count = np.zeros((a.shape[0] + 1, a.shape[1]), dtype=np.int32)
        np.cumsum(present, axis=0, out=count[1:])
        return total, count

    def _gather(self, cum: np.ndarray, w: int) -> np.ndarray:
        hi = self.t + 1
        lo = np.maximum(hi - w, 0)
        return cum[hi, self.g] - cum[lo, self.g]

    def sums(
        self, a: np.ndarray, windows: tuple[int, ...]
    ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per window length: (sum of present values, number of present values)."""
        total, count = self._cum(a)
        return {w: (self._gather(total, w), self._gather(count, w)) for w in windows}

    def hours(self, w: int) -> np.ndarray:
        """Hours of the window the GPU life existed for (the rate denominator)."""
        return np.minimum(float(w), self.age) - self._short

    def rates(self, a: np.ndarray, windows: tuple[int, ...], per_h: float) -> dict[int, np.ndarray]:
        """Increase per ``per_h`` hours over each window; NaN where nothing was read."""
        out = {}
        for w, (s, k) in self.sums(a, windows).items():
            h = self.hours(w)
            with np.errstate(invalid="ignore", divide="ignore"):
                r = s / h * per_h
            out[w] = np.where((k > 0) & (h > 0), r, np.nan)
        return out

    def means(self, a: np.ndarray, windows: tuple[int, ...]) -> dict[int, np.ndarray]:
        out = {}
        for w, (s, k) in self.sums(a, windows).items():
            with np.errstate(invalid="ignore", divide="ignore"):
                out[w] = np.where(k > 0, s / k, np.nan)
        return out

    def std(self, a: np.ndarray, w: int) -> np.ndarray:
        """Standard deviation of the hourly values in the window (NaN under 3 readings)."""
        s, k = self.sums(a, (w,))[w]
        s2, _ = self.sums(np.square(a.astype(np.float64)), (w,))[w]
        with np.errstate(invalid="ignore", divide="ignore"):
            var = s2 / k - np.square(s / k)
        return np.where(k >= 3, np.sqrt(np.maximum(var, 0.0)), np.nan)

    def count_where(self, a: np.ndarray, cond: np.ndarray, w: int) -> np.ndarray:
        """Hours in the window where ``cond`` holds, NaN where ``a`` was never read."""
        hits, _ = self.sums(np.where(np.isnan(a), np.nan, cond.astype(np.float64)), (w,))[w]
        _, k = self.sums(a, (w,))[w]
        return np.where(k > 0, hits, np.nan)

    def peak(self, a: np.ndarray, w: int) -> np.ndarray:
        """Largest hourly value in the window (NaN where none was read)."""
        pad = np.vstack([np.full((w - 1, a.shape[1]), np.nan, dtype=a.dtype), a])
        view = sliding_window_view(pad, w, axis=0)  # (T, G, w): no copy
        out = np.full(self.t.size, np.nan)
        for lo in range(0, self.t.size, 200_000):  # bounded temporaries on big fleets
            block = view[self.t[lo : lo + 200_000], self.g[lo : lo + 200_000]]
            has = ~np.isnan(block).all(axis=1)
            out[lo : lo + 200_000][has] = np.nanmax(block[has], axis=1)
        return out

    def quietest_day(self, a: np.ndarray, days: int, *, min_days: int) -> np.ndarray:
        """The lowest hourly mean of the ``days`` whole days before the row's last 24 h (each
        day read for at least 12 h), NaN with fewer than ``min_days`` such days."""
        total, count = self._cum(a)
        s = total[24:] - total[:-24]  # s[i]: the 24 h ending with bucket i + 23
        k = count[24:] - count[:-24]
        with np.errstate(invalid="ignore", divide="ignore"):
            daily = np.where(k >= 12, s / k, np.nan)
        out = np.full(self.t.size, np.nan)
        if daily.shape[0] == 0:  # under a day of panel: no whole day before the last
            return out
        back = 24 * np.arange(1, days + 1)  # the day ending 24, 48, ... h before the row's
        for lo in range(0, self.t.size, 200_000):  # bounded temporaries on big fleets
            part = slice(lo, lo + 200_000)
            end = self.t[part, None] - back[None, :] - 23
            vals = np.where(end >= 0, daily[np.maximum(end, 0), self.g[part, None]], np.nan)
            have = (~np.isnan(vals)).sum(axis=1)
            low = np.min(np.where(np.isnan(vals), np.inf, vals), axis=1)
            out[part] = np.where(have >= min_days, low, np.nan)
        return out

    def slope(self, a: np.ndarray, w: int) -> np.ndarray:
        """Least-squares slope of the hourly values over the window, per hour (NaN under 3
        readings). Covariance is shift-invariant, so absolute bucket numbers serve as time."""
        tt = np.broadcast_to(np.arange(a.shape[0], dtype=np.float64)[:, None], a.shape)
        tt = np.where(np.isnan(a), np.nan, tt)
        sx, k = self.sums(a, (w,))[w]
        st, _ = self.sums(tt, (w,))[w]
        stx, _ = self.sums(tt * a, (w,))[w]
        stt, _ = self.sums(tt * tt, (w,))[w]
        with np.errstate(invalid="ignore", divide="ignore"):
            cov = stx / k - (st / k) * (sx / k)
            var = stt / k - np.square(st / k)
            out = cov / var
        return np.where((k >= 3) & (var > 0), out, np.nan)

    def latest(self, a: np.ndarray, w: int) -> np.ndarray:
        """The most recent present value in the window (NaN where none)."""
        pad = np.vstack([np.full((w - 1, a.shape[1]), np.nan, dtype=a.dtype), a])
        block = sliding_window_view(pad, w, axis=0)[self.t, self.g][:, ::-1]
        present = ~np.isnan(block)
        pos = present.argmax(axis=1)
        return np.where(present.any(axis=1), block[np.arange(len(pos)), pos], np.nan)

    def last(self, a: np.ndarray) -> np.ndarray:
        return a[self.t, self.g].astype(np.float64)


def log_rise(recent: np.ndarray, before: np.ndarray) -> np.ndarray:
    """log(1 + recent) - log(1 + before): >0 rising, ~0 stable, NaN without a baseline."""
    return np.log1p(np.maximum(recent, 0)) - np.log1p(np.maximum(before, 0))
