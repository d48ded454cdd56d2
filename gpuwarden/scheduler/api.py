"""The HTTP API of ``gpuwarden scheduler serve`` (FastAPI); docs/scheduler.md has the contract.

    GET  /healthz                                   no token
    POST /v1/jobs  GET /v1/jobs[?state=]  GET /v1/jobs/{id}  POST /v1/jobs/{id}/cancel
    GET  /v1/jobs/{id}/logs[?task=&attempt=]        POST /v1/jobs/{id}/checkpoint
    GET  /v1/nodes   POST /v1/nodes/{node}/gpus/{i}/health (admin)
    GET  /v1/quota   PUT /v1/quota/{tenant} (admin)
    GET  /v1/billing?since=&until=[&format=csv]     GET /v1/audit?limit=
    POST /v1/agents/{node}/register   POST /v1/agents/{node}/sync   (agent token)

Every route but /healthz needs a bearer token (401 without). A tenant sees only its own jobs:
another tenant's job is 404, so job ids do not leak. Bad input is a 400 naming the field;
handlers run one at a time under the service's lock, so a bad request changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import Body, Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from gpuwarden.errors import GpuwardenError, InputError, StoreError
from gpuwarden.scheduler._auth import TokenBook
from gpuwarden.scheduler.billing import to_csv
from gpuwarden.scheduler.service import (
    ConflictError,
    NotFoundError,
    Principal,
    SchedulerService,
)
from gpuwarden.serve.server import ServeHandle

_STATES = ("queued", "running", "checkpointing", "succeeded", "failed", "cancelled")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HealthChange(_Strict):
    health: str = Field(description="ok, at-risk or unhealthy")
    reason: str = Field("", max_length=2000)


class QuotaLimits(_Strict):
    gpus: float | None = Field(None, ge=0)
    gpu_memory_mib: int | None = Field(None, ge=0)
    guaranteed_gpus: float | None = Field(None, ge=0)


class AgentGpu(_Strict):
    index: int = Field(ge=0, le=63)
    uuid: str = ""
    model: str = Field(min_length=1)
    memory_mib: int | None = Field(None, gt=0)
    mode: Literal["whole", "fractional", "mig"] | None = None


class Registration(_Strict):
    cpu_milli: int = Field(ge=0)
    memory_mib: int = Field(ge=0)
    gpus: list[AgentGpu] = Field(max_length=64)


class TaskReport(_Strict):
    job_id: str
    attempt: int = Field(ge=1)
    task: int = Field(ge=0)
    state: Literal["running", "exited"]
    exit_code: int | None = None
    pid: int | None = None
    checkpoint_at: float | None = None
    started_at: float | None = Field(None, description="when the agent launched it (its clock)")
    ended_at: float | None = Field(None, description="when the agent saw it exit (its clock)")


class LogChunk(_Strict):
    job_id: str
    attempt: int = Field(ge=1)
    task: int = Field(ge=0)
    text: str = Field(max_length=1 << 20)
    offset: int | None = Field(None, ge=0)


class Sync(_Strict):
    tasks: list[TaskReport] = []
    logs: list[LogChunk] = []


class CheckpointReport(_Strict):
    at: float | None = None


def _principal(request: Request) -> Principal:
    who = request.app.state.tokens.who(request.headers.get("authorization", ""))
    if who is None:
        raise HTTPException(
            401, "missing or unknown bearer token", headers={"WWW-Authenticate": "Bearer"}
        )
    return who


def _role(*kinds: str) -> Callable[[Principal], Principal]:
    def check(who: Annotated[Principal, Depends(_principal)]) -> Principal:
        if who.kind not in kinds:
            raise HTTPException(403, f"this needs a {' or '.join(kinds)} token")
        return who

    return check


# module level: FastAPI resolves these annotations by name (``from __future__ import annotations``)
Person = Annotated[Principal, Depends(_role("tenant", "admin"))]
Admin = Annotated[Principal, Depends(_role("admin"))]
Agent = Annotated[Principal, Depends(_role("agent"))]
Anyone = Annotated[Principal, Depends(_role("tenant", "admin", "agent"))]


def create_app(service: SchedulerService, tokens: TokenBook) -> FastAPI:
    """The API over ``service``; ``tokens`` says who each bearer token is."""
    # no /docs or /openapi.json: every route but /healthz needs a token
    app = FastAPI(
        title="gpuwarden scheduler", version="1", docs_url=None, redoc_url=None, openapi_url=None
    )

    app.state.tokens = tokens

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:3]]
        return JSONResponse({"detail": "; ".join(problems)}, status_code=400)

    @app.exception_handler(GpuwardenError)
    async def _domain_error(request: Request, exc: GpuwardenError) -> JSONResponse:
        code = 500
        if isinstance(exc, NotFoundError):
            code = 404
        elif isinstance(exc, ConflictError):
            code = 409
        elif isinstance(exc, InputError):
            code = 400
        elif isinstance(exc, StoreError):
            code = 503
        return JSONResponse({"detail": str(exc)}, status_code=code)

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        ok, why = service.health()
        return JSONResponse(
            {"status": "ok" if ok else "unhealthy", "detail": why}, 200 if ok else 503
        )

    # ---- jobs ------------------------------------------------------------------------------

    @app.post("/v1/jobs")
    def submit(body: Annotated[dict[str, Any], Body()], who: Person) -> JSONResponse:
        job, created = service.submit(who, body)
        return JSONResponse(job, status_code=201 if created else 200)

    @app.get("/v1/jobs")
    def jobs(who: Person, state: str = "") -> list[dict[str, Any]]:
        states = [s for s in state.split(",") if s]
        if bad := [s for s in states if s not in _STATES]:
            raise InputError(f"state: unknown {', '.join(bad)}; one of {', '.join(_STATES)}")
        return service.jobs(who, states)

    @app.get("/v1/jobs/{job_id}")
    def job(job_id: str, who: Person) -> dict[str, Any]:
        return service.job(who, job_id)

    @app.post("/v1/jobs/{job_id}/cancel")
    def cancel(job_id: str, who: Person) -> dict[str, Any]:
        return service.cancel(who, job_id)

    @app.post("/v1/jobs/{job_id}/checkpoint")
    def checkpoint(
        job_id: str, who: Person, body: CheckpointReport | None = None
    ) -> dict[str, Any]:
        return service.report_checkpoint(who, job_id, body.at if body else None)

    @app.get("/v1/jobs/{job_id}/logs")
    def logs(
        job_id: str,
        who: Person,
        task: Annotated[int | None, Query(ge=0)] = None,
        attempt: Annotated[int | None, Query(ge=1)] = None,
    ) -> PlainTextResponse:
        return PlainTextResponse(service.logs(who, job_id, attempt=attempt, task=task))

    # ---- cluster, quotas, billing, audit ---------------------------------------------------

    @app.get("/v1/nodes")
    def nodes(who: Anyone) -> list[dict[str, Any]]:
        return service.nodes()

    @app.post("/v1/nodes/{node}/gpus/{index}/health")
    def health(node: str, index: int, change: HealthChange, who: Admin) -> dict[str, Any]:
        return service.set_health(who, node, index, change.health, change.reason)

    @app.get("/v1/quota")
    def quota(who: Person) -> list[dict[str, Any]]:
        return service.quota_rows(who)

    @app.put("/v1/quota/{tenant}")
    def set_quota(tenant: str, limits: QuotaLimits, who: Admin) -> dict[str, Any]:
        return service.set_quota(
            who, tenant, limits.gpus, limits.gpu_memory_mib, limits.guaranteed_gpus
        )

    @app.get("/v1/billing", response_model=None)
    def billing(
        since: float,
        until: float,
        who: Person,
        format: Literal["json", "csv"] = "json",
    ) -> Response | list[dict[str, Any]]:
        rows = service.billing(who, since, until)
        if format == "csv":
            return Response(to_csv(rows), media_type="text/csv")
        return [
            {"tenant": r.tenant, "job_id": r.job_id, "name": r.name, "gpu_hours": r.gpu_hours}
            for r in rows
        ]

    @app.get("/v1/audit")
    def audit(
        who: Person, limit: Annotated[int, Query(ge=1, le=10_000)] = 100
    ) -> list[dict[str, Any]]:
        return service.audit(who, limit)

    # ---- node agents -----------------------------------------------------------------------

    @app.post("/v1/agents/{node}/register")
    def register(node: str, body: Registration, who: Agent) -> dict[str, Any]:
        return service.register(node, body.model_dump())

    @app.post("/v1/agents/{node}/sync")
    def agent_sync(node: str, body: Sync, who: Agent) -> dict[str, Any]:
        return service.agent_sync(node, body.model_dump())

    return app


class SchedulerServer(ServeHandle):
    """The API under uvicorn in a thread plus the service's round loop, started and stopped
    together: ``ServeHandle``'s start/stop, with this service and app instead of the risk one."""

    def __init__(self, service: SchedulerService, tokens: TokenBook) -> None:
        # not ServeHandle.__init__: that builds the risk service's app
        self.service = service  # type: ignore[assignment]
        self.app = create_app(service, tokens)
        self._server = None
        self._thread = None
        self.host = ""
        self.port = 0


__all__ = ["SchedulerServer", "create_app"]
