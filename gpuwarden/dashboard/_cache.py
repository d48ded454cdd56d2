"""Cached reads for the app: each query runs at most once per ``TTL_S`` per store URL.

Streamlit re-runs the whole script on every click; without these caches every click would
re-read the store. Keys are the store URL and the query's arguments (the store object is not
hashable: one is opened per URL).

A read of serve or the scheduler that fails is remembered for ``FAIL_TTL_S`` (``Failures``):
a service that does not answer would otherwise cost every render its timeout again.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

import pandas as pd
import streamlit as st

from gpuwarden.dashboard import data
from gpuwarden.dashboard._api import Api, ApiError
from gpuwarden.store import open_store
from gpuwarden.store.base import Store

TTL_S = 30
API_TTL_S = 10  # serve and the scheduler change faster than the store's history
FAIL_TTL_S = 15  # a failed read of serve or the scheduler is asked again after this


class Failures:
    """Failed reads for ``ttl_s`` seconds: key -> the error's message and status, shared by
    every session of the server (as ``st.cache_data`` is). Keys never hold a token."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[Hashable, tuple[float, str, int]] = {}

    def get(self, key: Hashable) -> ApiError | None:
        """The failure remembered for ``key`` (None: none, or it expired)."""
        with self._lock:
            held = self._held.get(key)
            if held is None:
                return None
            until, message, status = held
            if self._clock() >= until:
                del self._held[key]
                return None
        return ApiError(message, status)

    def put(self, key: Hashable, exc: ApiError) -> ApiError:
        """Remember ``exc`` for ``key``; returns it with "(cached for N s)" added."""
        message = f"{exc} (cached for {self.ttl_s:g} s)"
        with self._lock:
            self._held[key] = (self._clock() + self.ttl_s, message, exc.status)
        return ApiError(message, exc.status)

    def clear(self) -> None:
        with self._lock:
            self._held.clear()


_failures = Failures(FAIL_TTL_S)


@st.cache_resource(show_spinner=False)
def store(url: str) -> Store:
    """One open store per URL for the whole server (SQLite reads run concurrently in WAL)."""
    return open_store(url)


def clear() -> None:
    """Forget every cached query and failure (the "Refresh now" button); the open stores stay."""
    st.cache_data.clear()
    _failures.clear()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def snapshot(url: str) -> data.Snapshot | None:
    return data.snapshot(store(url), time.time())


@st.cache_data(ttl=TTL_S, show_spinner="Reading GPU states...")
def fleet_states(url: str, at: float, stale_s: float, window_s: float) -> pd.DataFrame:
    return data.fleet_states(store(url), at, stale_s=stale_s, window_s=window_s)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def has_verdicts(url: str, at: float, window_s: float) -> bool:
    return not data.stored_verdicts(store(url), at, window_s).empty


@st.cache_data(ttl=TTL_S, show_spinner=False)
def risk_series(url: str, uuid: str, start: float, end: float) -> pd.DataFrame:
    return data.risk_series(store(url), uuid, start, end)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def fleet_now(url: str, at: float, stale_s: float) -> dict[str, float]:
    return data.fleet_now(store(url), at, stale_s=stale_s)


@st.cache_data(ttl=TTL_S, show_spinner="Reading fleet history...")
def fleet_series(url: str, start: float, end: float, gpus: int, step_s: float) -> pd.DataFrame:
    return data.fleet_series(store(url), start, end, gpus=gpus, step_s=step_s)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def recent_events(url: str, start: float, end: float, uuid: str | None = None) -> pd.DataFrame:
    return data.recent_events(store(url), start, end, uuid=uuid)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def gpu_failures(url: str, uuid: str) -> pd.DataFrame:
    return data.gpu_failures(store(url), uuid)


@st.cache_data(ttl=TTL_S, show_spinner="Reading the GPU's history...")
def gpu_series(url: str, uuid: str, start: float, end: float, step_s: float) -> pd.DataFrame:
    return data.gpu_series(store(url), uuid, start, end, step_s=step_s)


def api_get(base_url: str, path: str, params: tuple[tuple[str, Any], ...], api: Api) -> Any:
    """A GET on serve or the scheduler (``api``, whose token is not part of any key): an answer
    is kept for ``API_TTL_S``, an ``ApiError`` for ``FAIL_TTL_S`` (raised again meanwhile)."""
    key = (base_url, path, params)
    failed = _failures.get(key)
    if failed is not None:
        raise failed
    try:
        return _api_answer(base_url, path, params, api)
    except ApiError as exc:
        raise _failures.put(key, exc) from exc


@st.cache_data(ttl=API_TTL_S, show_spinner=False)
def _api_answer(base_url: str, path: str, params: tuple[tuple[str, Any], ...], _api: Api) -> Any:
    # raises on failure, so st.cache_data keeps only answers; ``api_get`` keeps failures
    return _api.get(path, dict(params))


def bucket(now: float) -> float:
    """``now`` rounded up to ``API_TTL_S``: a time in a query that keeps its cache entry."""
    return float(math.ceil(now / API_TTL_S) * API_TTL_S)
