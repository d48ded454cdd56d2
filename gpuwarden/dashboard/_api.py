"""The HTTP APIs the dashboard reads besides the store: ``gpuwarden serve`` and the scheduler.

    gpuwarden dashboard --serve-url http://127.0.0.1:8480 --scheduler-url http://127.0.0.1:8477

Each base URL comes from its option (passed to the app after ``--``), else from the
environment; tokens come from the environment only, are used for reads only (a change is sent
with the token a person pastes, ``_gate``) and never reach a page, a log or a cache key:

    GPUWARDEN_SERVE_URL, GPUWARDEN_SERVE_TOKEN            serve's /v1/gpus, /v1/audit, /v1/breaker
    GPUWARDEN_SCHEDULER_URL, GPUWARDEN_SCHEDULER_TOKEN    the bundled scheduler (admin token)

A failed call raises ``ApiError`` with one line naming the service and what went wrong.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from gpuwarden.errors import GpuwardenError

TIMEOUT_S = 5.0


class ApiError(GpuwardenError):
    """A call to serve or the scheduler failed; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Api:
    """One service: ``name`` for messages, its base URL and bearer token (None: none set)."""

    name: str
    base_url: str
    token: str | None = field(default=None, repr=False)

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """GET ``path`` -> its JSON body."""
        return self._call("GET", path, params=dict(params or {}))

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` as JSON to ``path`` -> the JSON answer."""
        return self._call("POST", path, json=dict(body))

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        url = self.base_url.rstrip("/") + path
        try:
            answer = httpx.request(method, url, headers=headers, timeout=TIMEOUT_S, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(f"{self.name} at {self.base_url} did not answer: {exc}") from exc
        if answer.status_code >= 400:
            raise ApiError(
                f"{self.name} answered {answer.status_code} to {method} {path}: {_detail(answer)}",
                answer.status_code,
            )
        try:
            return answer.json()
        except ValueError as exc:
            raise ApiError(f"{self.name} answered {method} {path} with something not JSON") from exc


def _detail(answer: httpx.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        return answer.text.strip()[:200] or answer.reason_phrase
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return str(body)[:200]


def _option(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def serve_api(argv: list[str], environ: Mapping[str, str] | None = None) -> Api | None:
    """``gpuwarden serve``'s API from ``--serve-url`` or ``GPUWARDEN_SERVE_URL`` (None: not
    configured), with ``GPUWARDEN_SERVE_TOKEN`` for its reads (never for an override)."""
    env = os.environ if environ is None else environ
    url = _option(argv, "--serve-url") or env.get("GPUWARDEN_SERVE_URL", "")
    return Api("gpuwarden serve", url, env.get("GPUWARDEN_SERVE_TOKEN") or None) if url else None


def scheduler_api(argv: list[str], environ: Mapping[str, str] | None = None) -> Api | None:
    """The bundled scheduler from ``--scheduler-url`` or ``GPUWARDEN_SCHEDULER_URL`` (None:
    not configured), with ``GPUWARDEN_SCHEDULER_TOKEN``, which every scheduler read needs."""
    env = os.environ if environ is None else environ
    url = _option(argv, "--scheduler-url") or env.get("GPUWARDEN_SCHEDULER_URL", "")
    token = env.get("GPUWARDEN_SCHEDULER_TOKEN") or None
    return Api("the scheduler", url, token) if url else None
