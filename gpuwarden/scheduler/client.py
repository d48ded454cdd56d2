"""A small client for the scheduler service's HTTP API (docs/scheduler.md has the contract).

    with SchedulerClient("http://127.0.0.1:8477", token) as c:
        job = c.submit({"name": "train", "command": ["python", "train.py"], "gpus_per_task": 2})
        c.jobs(states=["queued", "running"])

Every failure is a ``SchedulerHTTPError`` (a ``GpuwardenError``) carrying the server's message
and, for 401 and 404, one line saying what it usually means. The token is sent only in the
``Authorization`` header and never appears in an error message.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from gpuwarden.errors import ConfigError, GpuwardenError

DEFAULT_URL = "http://127.0.0.1:8477"
URL_ENV = "GPUWARDEN_SCHEDULER_URL"
TOKEN_ENV = "GPUWARDEN_SCHEDULER_TOKEN"

_HINTS = {
    401: "the token was refused: set $GPUWARDEN_SCHEDULER_TOKEN (or --token-file) to a tenant "
    "or admin token of this scheduler",
    403: "this token may not do that (an admin token is needed)",
    404: "not found: no such job or node, or it belongs to another tenant",
}


class SchedulerHTTPError(GpuwardenError):
    """The scheduler answered with an error (``status`` is its HTTP status) or did not answer
    at all (``status`` 0)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def read_token(token_file: str | Path | None = None) -> str:
    """The bearer token: the first line of ``token_file`` when given, else
    ``$GPUWARDEN_SCHEDULER_TOKEN``. Never a command-line value (it would land in shell history)."""
    if token_file is not None:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip().splitlines()
        except OSError as exc:
            raise ConfigError(f"cannot read token file {token_file}: {exc.strerror}") from exc
        if not token or not token[0].strip():
            raise ConfigError(f"token file {token_file} is empty")
        return token[0].strip()
    token_env = os.environ.get(TOKEN_ENV, "").strip()
    if not token_env:
        raise ConfigError(f"no scheduler token: set ${TOKEN_ENV} or pass --token-file")
    return token_env


class SchedulerClient:
    """Calls the scheduler at ``url`` with bearer ``token``; ``transport`` is a test seam."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str = "",
        *,
        timeout_s: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"scheduler URL must be http(s)://host:port, got {url!r}")
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout_s, transport=transport
        )

    # ---- jobs ------------------------------------------------------------------------------

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Submit a job (the contract's ``POST /v1/jobs`` body); returns the job JSON. The same
        ``idempotency_key`` returns the job already made."""
        return self._call("POST", "/v1/jobs", json=spec)

    def jobs(self, states: Sequence[str] = ()) -> list[dict[str, Any]]:
        params = {"state": ",".join(states)} if states else None
        return self._call("GET", "/v1/jobs", params=params)

    def job(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/jobs/{_seg(job_id)}")

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/jobs/{_seg(job_id)}/cancel")

    def logs(self, job_id: str, *, task: int | None = None, attempt: int | None = None) -> str:
        params = {k: v for k, v in (("task", task), ("attempt", attempt)) if v is not None}
        return self._call("GET", f"/v1/jobs/{_seg(job_id)}/logs", params=params, text=True)

    # ---- cluster, quotas, billing ----------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/nodes")

    def set_health(self, node: str, gpu: int, health: str, reason: str = "") -> dict[str, Any]:
        body = {"health": health, "reason": reason}
        return self._call("POST", f"/v1/nodes/{_seg(node)}/gpus/{int(gpu)}/health", json=body)

    def reclaim(self, node: str, deadline: float, reason: str = "spot reclaim") -> dict[str, Any]:
        body = {"deadline": deadline, "reason": reason}
        return self._call("POST", f"/v1/nodes/{_seg(node)}/reclaim", json=body)

    def quota(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/quota")

    def billing(self, since: float, until: float) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/billing", params={"since": since, "until": until})

    def billing_csv(self, since: float, until: float) -> str:
        params = {"since": since, "until": until, "format": "csv"}
        return self._call("GET", "/v1/billing", params=params, text=True)

    def audit(
        self,
        limit: int = 100,
        *,
        before_id: int | None = None,
        since: float | None = None,
        action: str | None = None,
    ) -> list[dict[str, Any]]:
        """Audit rows newest first, each with its ``id``: the next page of a full one is
        ``before_id=rows[-1]["id"]``; ``since`` (unix s) and ``action`` ("preempt") filter."""
        params: dict[str, Any] = {"limit": limit}
        for name, value in (("before_id", before_id), ("since", since), ("action", action)):
            if value is not None:
                params[name] = value
        return self._call("GET", "/v1/audit", params=params)

    # ---- plumbing --------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SchedulerClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, method: str, path: str, *, text: bool = False, **kw: Any) -> Any:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.TimeoutException as exc:
            raise SchedulerHTTPError(f"scheduler at {self.url} did not answer in time") from exc
        except httpx.TransportError as exc:
            raise SchedulerHTTPError(f"cannot reach the scheduler at {self.url}: {exc}") from exc
        if resp.status_code >= 400:
            raise _error(method, path, resp)
        if text:
            return resp.text
        try:
            return resp.json()
        except ValueError as exc:
            raise SchedulerHTTPError(
                f"{method} {path}: the scheduler answered {resp.status_code} with no JSON",
                resp.status_code,
            ) from exc


def _error(method: str, path: str, resp: httpx.Response) -> SchedulerHTTPError:
    """One line: what was asked, the status, the server's own message and, if known, a hint."""
    detail = ""
    try:
        body = resp.json()
        detail = body.get("detail", "") if isinstance(body, dict) else ""
    except ValueError:
        detail = resp.text.strip()[:200]
    if not isinstance(detail, str):
        detail = str(detail)
    message = f"{method} {path}: HTTP {resp.status_code}"
    if detail:
        message += f": {detail}"
    # the service's own 403 says which token it needs; the hint is for a bare status
    if resp.status_code in _HINTS and not (resp.status_code == 403 and detail):
        message += f" ({_HINTS[resp.status_code]})"
    return SchedulerHTTPError(message, resp.status_code)


def _seg(value: str) -> str:
    """One URL path segment (a job id or node name may not smuggle in a '/')."""
    return quote(str(value), safe="")
