"""The HTTP API of ``gpuwarden serve`` (FastAPI).

    GET  /healthz                      200 ok / 503 with the reason
    GET  /metrics                      Prometheus text: telemetry, risk scores, states, counters
    GET  /v1/gpus                      every GPU's state, risk, reasons, since when
    GET  /v1/gpus/{uuid}
    GET  /v1/audit?limit=&since=&uuid=&hostname=&hook=
    POST /v1/gpus/{uuid}/state         {"state": "ok|at-risk|unhealthy", "reason": ..., "actor": ...}
    GET  /v1/breaker                   re-tags the circuit breaker refused
    POST /v1/breaker/release           {"actor": ...} apply them past the breaker, once
    POST /alertmanager                 Alertmanager's webhook (payload version 4)

Every POST needs ``Authorization: Bearer $GPUWARDEN_API_TOKEN`` (401 otherwise, and nothing
changes); with no token configured, state changes are refused altogether. ``httpguard.BodyGuard``
checks the token of any request with a body before reading it, reads at most ``max_body_bytes``
(413 beyond, before parsing) and refuses JSON nested too deep (400); the webhook body is then
checked whole (400 with the reason).
"""

from __future__ import annotations

import hmac
import math
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from gpuwarden.alerts.alertmanager import parse_webhook
from gpuwarden.alerts.base import Transition
from gpuwarden.alerts.decision import GpuStatus
from gpuwarden.errors import GpuwardenError, InputError, StoreError
from gpuwarden.exporter import CONTENT_TYPE
from gpuwarden.httpguard import BodyGuard
from gpuwarden.serve.metrics import render

if TYPE_CHECKING:
    from gpuwarden.serve.service import RiskService

ENV_API_TOKEN = "GPUWARDEN_API_TOKEN"
DEFAULT_MAX_BODY_BYTES = 1 << 20  # 1 MiB: Alertmanager groups of a few thousand alerts fit


class StateChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    state: str = Field(description="ok, at-risk or unhealthy")
    reason: str = Field(min_length=1, max_length=2000)
    actor: str = Field(min_length=1, max_length=200, description="who decides (a person)")


class Release(BaseModel):
    model_config = ConfigDict(extra="forbid")
    actor: str = Field(min_length=1, max_length=200)


def _num(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else x


def gpu_json(s: GpuStatus) -> dict[str, Any]:
    return {
        "hostname": s.gpu.hostname,
        "gpu": s.gpu.index,
        "uuid": s.gpu.uuid,
        "model": s.gpu.model,
        "state": str(s.state),
        "risk": _num(s.risk),
        "risk_ts": s.risk_ts,
        "since": s.since,
        "source": s.source,
        "reasons": list(s.reasons),
        "action": s.action,
        "firing_alerts": list(s.firing),
        "pinned_until": s.pinned_until,
    }


def transition_json(t: Transition) -> dict[str, Any]:
    return {
        "ts": t.ts,
        "hostname": t.gpu.hostname,
        "gpu": t.gpu.index,
        "uuid": t.gpu.uuid,
        "old_state": str(t.old),
        "new_state": str(t.new),
        "risk": _num(t.risk),
        "reasons": list(t.reasons),
        "action": t.action,
        "source": t.source,
        "actor": t.actor,
    }


def create_app(
    service: RiskService, *, token: str | None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> FastAPI:
    """The API over ``service``. ``token``: the bearer token POSTs need (None: POSTs refused)."""
    app = FastAPI(title="gpuwarden serve", version="1", docs_url="/docs", redoc_url=None)

    def require_token(request: Request) -> None:
        if not token:
            raise HTTPException(
                401,
                f"state changes are disabled: set {ENV_API_TOKEN} for gpuwarden serve",
                headers={"WWW-Authenticate": "Bearer"},
            )
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            value.strip().encode(), token.encode()
        ):
            raise HTTPException(
                401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    def refused(path: str, status: int) -> None:
        if path == "/alertmanager":  # the webhook counts every answer, refusals included
            service.counters.webhook_requests[status] += 1

    app.add_middleware(
        BodyGuard, authenticate=require_token, max_body_bytes=max_body_bytes, on_refuse=refused
    )

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:3]]
        return JSONResponse({"detail": "; ".join(problems)}, status_code=400)

    @app.exception_handler(GpuwardenError)
    async def _domain_error(request: Request, exc: GpuwardenError) -> JSONResponse:
        code = 400 if isinstance(exc, InputError) else 503 if isinstance(exc, StoreError) else 500
        return JSONResponse({"detail": str(exc)}, status_code=code)

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        ok, why = service.health()
        return JSONResponse(
            {"status": "ok" if ok else "unhealthy", "detail": why}, 200 if ok else 503
        )

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(render(service), media_type=CONTENT_TYPE)

    @app.get("/v1/gpus")
    def gpus() -> list[dict[str, Any]]:
        return [gpu_json(s) for s in service.engine.statuses()]

    @app.get("/v1/gpus/{uuid}")
    def gpu(uuid: str) -> dict[str, Any]:
        try:
            return gpu_json(service.engine.status(uuid))
        except InputError as exc:
            raise HTTPException(404, str(exc)) from None

    @app.get("/v1/audit")
    def audit(
        limit: int = Query(100, ge=1, le=10_000),
        since: float | None = None,
        uuid: str | None = None,
        hostname: str | None = None,
        hook: str | None = None,
    ) -> list[dict[str, Any]]:
        rows = service.audit.rows(limit=limit, since=since, uuid=uuid, hostname=hostname, hook=hook)
        return [r.__dict__ for r in rows]

    @app.post("/v1/gpus/{uuid}/state", dependencies=[Depends(require_token)])
    def set_state(uuid: str, change: StateChange) -> dict[str, Any]:
        try:
            service.engine.status(uuid)
        except InputError as exc:
            raise HTTPException(404, str(exc)) from None
        t, hooks = service.override(uuid, change.state, reason=change.reason, actor=change.actor)
        return {"transition": transition_json(t), "hooks": [h.__dict__ for h in hooks]}

    @app.get("/v1/breaker")
    def breaker() -> dict[str, Any]:
        return {
            "hooks": [
                {"hook": t.name, "open": t.is_open(), "limit": t.limit(), "refusals": t.trips}
                for t in service.taggers
            ],
            "held": [
                {"hook": hook, "hostname": host, **transition_json(t)}
                for (hook, host), t in sorted(service.actor.held.items())
            ],
        }

    @app.post("/v1/breaker/release", dependencies=[Depends(require_token)])
    def release(body: Release) -> dict[str, Any]:
        return {"hooks": [h.__dict__ for h in service.release_held(body.actor)]}

    @app.post("/alertmanager")
    async def alertmanager(request: Request) -> JSONResponse:
        code, body = await _receive(request)
        service.counters.webhook_requests[code] += 1
        return JSONResponse(body, status_code=code)

    async def _receive(request: Request) -> tuple[int, dict[str, Any]]:
        try:
            require_token(request)
        except HTTPException as exc:  # a request without a body: BodyGuard let it through
            return exc.status_code, {"detail": exc.detail}
        try:  # BodyGuard read it, within max_body_bytes
            payload = parse_webhook(await request.body())
        except InputError as exc:
            return 400, {"detail": str(exc)}
        return 200, await run_in_threadpool(service.receive_alerts, payload)

    return app


__all__ = ["DEFAULT_MAX_BODY_BYTES", "ENV_API_TOKEN", "create_app"]
