"""The HTTP API of ``gpuwarden scheduler serve`` (FastAPI); docs/scheduler.md has the contract.

    GET  /healthz                                   no token
    POST /v1/jobs  GET /v1/jobs[?state=]  GET /v1/jobs/{id}  POST /v1/jobs/{id}/cancel
    GET  /v1/jobs/{id}/logs[?task=&attempt=]        POST /v1/jobs/{id}/checkpoint
    GET  /v1/nodes   POST /v1/nodes/{node}/gpus/{i}/health (admin)
    GET  /v1/quota   PUT /v1/quota/{tenant} (admin)
    GET  /v1/billing?since=&until=[&format=csv]     GET /v1/audit?limit=&before_id=&since=&action=
    POST /v1/agents/{node}/register   POST /v1/agents/{node}/sync   (that node's agent token)

Every route but /healthz needs a bearer token (401 without), and a request with a body is
refused on its token before the body is read (``httpguard.BodyGuard``, which also bounds the
body to ``max_body_bytes`` and JSON nesting, and reads every body as JSON). A tenant sees only
its own jobs: another tenant's job is 404, so job ids do not leak. An agent route takes only the token of the
node in its path (``_auth``); any other token, the agents' master secret included, is a 403.
Bad input is a 400 naming the field; handlers run one at a time under the service's lock, so a
bad request changes nothing. A database failure (disk full, locked) is a 503 and changes nothing
either: the transaction rolls back and the in-memory scheduler is rebuilt from the file.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import Body, Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from gpuwarden.errors import GpuwardenError, InputError, StoreError
from gpuwarden.httpguard import BodyGuard
from gpuwarden.lifecycle import AppServer
from gpuwarden.scheduler._auth import NODE_NAME, TokenBook, bearer
from gpuwarden.scheduler._service_jobs import MAX_INT, MAX_TASKS
from gpuwarden.scheduler.billing import to_csv
from gpuwarden.scheduler.service import (
    ConflictError,
    NotFoundError,
    Principal,
    QueueFullError,
    SchedulerService,
)

_STATES = ("queued", "running", "checkpointing", "succeeded", "failed", "cancelled")


# ---- request bodies: every number bounded where it comes in, so none reaches SQLite (int64)
# or a placement loop too big, and no field takes inf or NaN (JSON's 1e400 parses as inf).
# Job specs are free-form JSON checked by ``normalise_spec``, quotas by ``quota_of``.

Whole = Annotated[int, Field(ge=0, le=MAX_INT)]
Attempt = Annotated[int, Field(ge=1, le=MAX_INT)]
TaskIndex = Annotated[int, Field(ge=0, lt=MAX_TASKS)]
#: Times an agent reports, unix seconds on its clock (the service clamps them, ``agent_time``).
AgentTime = Annotated[float | None, Field(ge=-MAX_INT, le=MAX_INT)]
#: What ``Popen.returncode`` can be: an exit status, or minus the signal that killed the task.
ExitCode = Annotated[int | None, Field(ge=-(2**31), lt=2**31)]
NodeName = Annotated[str, Path(pattern=NODE_NAME)]

#: Task reports and log chunks in one sync: far above what a node's tasks send.
MAX_SYNC_ITEMS = 10_000
#: Largest request body: an agent ships at most 4 MiB of log bytes per sync, which JSON
#: escaping can grow sixfold (``_agent_tasks.MAX_SYNC_LOG_BYTES``); everything else is far
#: smaller. A refused sync would be resent unchanged, so this stays well above what agents send.
DEFAULT_MAX_BODY_BYTES = 32 << 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class HealthChange(_Strict):
    health: str = Field(description="ok, at-risk or unhealthy", max_length=20)
    reason: str = Field("", max_length=2000)


class QuotaLimits(_Strict):
    gpus: float | None = None
    gpu_memory_mib: int | None = None
    guaranteed_gpus: float | None = None


class AgentGpu(_Strict):
    index: int = Field(ge=0, le=63)
    uuid: str = Field("", max_length=200)
    model: str = Field(min_length=1, max_length=100)
    memory_mib: int | None = Field(None, gt=0, le=MAX_INT)
    mode: Literal["whole", "fractional", "mig"] | None = None
    driver_version: str | None = Field(None, max_length=40, description="NVML's, e.g. 550.54.15")
    cuda_version: str | None = Field(None, max_length=20, description="the driver's own CUDA")
    cuda_compat: str | None = Field(None, max_length=20, description="cuda-compat package's CUDA")


class Registration(_Strict):
    cpu_milli: Whole
    memory_mib: Whole
    gpus: list[AgentGpu] = Field(max_length=64)
    cost_class: Literal["owned", "reserved", "spot"] = "owned"
    mac: str | None = Field(None, pattern=r"^[0-9A-Fa-f]{2}([:-]?[0-9A-Fa-f]{2}){5}$")
    models: list[Annotated[str, Field(min_length=1, max_length=300)]] | None = Field(
        None, max_length=4096
    )


class ReclaimBody(_Strict):
    deadline: float = Field(ge=0, le=MAX_INT, description="unix seconds the node goes away")
    reason: str = Field("spot reclaim", max_length=200)


class TaskReport(_Strict):
    job_id: str = Field(max_length=200)
    attempt: Attempt
    task: TaskIndex
    state: Literal["running", "exited"]
    exit_code: ExitCode = None
    pid: int | None = Field(None, ge=0, lt=2**31)
    checkpoint_at: AgentTime = None
    started_at: AgentTime = Field(None, description="when the agent launched it (its clock)")
    ended_at: AgentTime = Field(None, description="when the agent saw it exit (its clock)")


class LogChunk(_Strict):
    job_id: str = Field(max_length=200)
    attempt: Attempt
    task: TaskIndex
    text: str = Field(max_length=1 << 20)
    offset: Whole | None = None


class GpuUsage(_Strict):
    index: int = Field(ge=0, le=63)
    util_pct: float | None = Field(None, ge=0, le=100, description="mean since the last sync")
    energy_mj: float | None = Field(None, ge=0, le=1e15, description="energy since the last sync")
    span_s: float | None = Field(None, ge=0, le=1e9, description="seconds energy_mj covers")


class Sync(_Strict):
    tasks: list[TaskReport] = Field([], max_length=MAX_SYNC_ITEMS)
    logs: list[LogChunk] = Field([], max_length=MAX_SYNC_ITEMS)
    models: list[Annotated[str, Field(min_length=1, max_length=300)]] | None = Field(
        None, max_length=4096, description="model weights the node's local cache holds"
    )
    gpus: list[GpuUsage] | None = Field(
        None, max_length=64, description="measured per GPU; absent where there is no NVML"
    )


class CheckpointReport(_Strict):
    at: float | None = Field(None, ge=-MAX_INT, le=MAX_INT)


# ---- who is asking ------------------------------------------------------------------------

_SECRET_REFUSED = (
    "this is the agents' master secret, which authenticates no one; give each node its own "
    "token: use `gpuwarden scheduler agent-token NODE` on the service host"
)


def _token(request: Request) -> str:
    token = bearer(request.headers.get("authorization", ""))
    if token is None:
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    if request.app.state.tokens.is_secret(token):
        raise HTTPException(403, _SECRET_REFUSED)
    return token


def _principal(request: Request) -> Principal:
    who = request.app.state.tokens.who(_token(request))
    if who is None:
        raise HTTPException(401, "unknown bearer token", headers={"WWW-Authenticate": "Bearer"})
    return who


def _role(*kinds: str) -> Callable[[Principal], Principal]:
    def check(who: Annotated[Principal, Depends(_principal)]) -> Principal:
        if who.kind not in kinds:
            wanted = " or ".join(kinds)
            raise HTTPException(
                403, f"this needs {'an' if wanted[0] in 'aeiou' else 'a'} {wanted} token"
            )
        return who

    return check


def _node_agent(request: Request, node: NodeName) -> Principal:
    """The agent of the node the path names, by that node's own token (``_auth``)."""
    tokens: TokenBook = request.app.state.tokens
    token = _token(request)
    if tokens.is_node(token, node):
        return Principal("agent", node)
    if tokens.who(token) is not None:
        raise HTTPException(403, f"this needs the agent token of node {node}")
    # a token of another node looks like any unknown token: say what would work
    raise HTTPException(
        403,
        f"this is not the agent token of node {node}: each node has its own, printed by "
        f"`gpuwarden scheduler agent-token {node}`",
    )


_AGENT_PATH = re.compile(r"^/v1/agents/([^/]+)/[^/]+$")


def _authenticate(request: Request) -> None:
    """Whether a request may send a body, from its headers: a tenant's or the admin's token,
    or on an agent route the agent token of the node it names (the routes check roles)."""
    agent = _AGENT_PATH.match(request.url.path)
    if agent:
        _node_agent(request, agent.group(1))
    else:
        _principal(request)


# module level: FastAPI resolves these annotations by name (``from __future__ import annotations``)
Person = Annotated[Principal, Depends(_role("tenant", "admin"))]
Admin = Annotated[Principal, Depends(_role("admin"))]
NodeAgent = Annotated[Principal, Depends(_node_agent)]


def create_app(
    service: SchedulerService, tokens: TokenBook, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> FastAPI:
    """The API over ``service``; ``tokens`` says who each bearer token is."""
    # no /docs or /openapi.json: every route but /healthz needs a token
    app = FastAPI(
        title="gpuwarden scheduler", version="1", docs_url=None, redoc_url=None, openapi_url=None
    )

    app.state.tokens = tokens
    app.add_middleware(BodyGuard, authenticate=_authenticate, max_body_bytes=max_body_bytes)

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
        elif isinstance(exc, QueueFullError):
            code = 429
        elif isinstance(exc, InputError):
            code = 400
        elif isinstance(exc, StoreError):
            code = 503
        return JSONResponse({"detail": str(exc)}, status_code=code)

    @app.exception_handler(sqlite3.Error)
    async def _db_error(request: Request, exc: sqlite3.Error) -> JSONResponse:
        # the transaction rolled back and the in-memory scheduler was rebuilt: nothing changed
        detail = f"the scheduler's database failed ({exc}); nothing was changed, try again"
        return JSONResponse({"detail": detail}, status_code=503)

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
        task: Annotated[int | None, Query(ge=0, lt=MAX_TASKS)] = None,
        attempt: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
    ) -> PlainTextResponse:
        return PlainTextResponse(service.logs(who, job_id, attempt=attempt, task=task))

    # ---- cluster, quotas, billing, audit ---------------------------------------------------

    @app.get("/v1/nodes")
    def nodes(who: Person) -> list[dict[str, Any]]:
        return service.nodes()

    @app.post("/v1/nodes/{node}/gpus/{index}/health")
    def health(
        node: str, index: Annotated[int, Path(ge=0, le=63)], change: HealthChange, who: Admin
    ) -> dict[str, Any]:
        return service.set_health(who, node, index, change.health, change.reason)

    @app.post("/v1/nodes/{node}/reclaim")
    def reclaim_node(node: str, body: ReclaimBody, who: Admin) -> dict[str, Any]:
        return service.reclaim(who, node, body.deadline, body.reason)

    @app.get("/v1/quota")
    def quota(who: Person) -> list[dict[str, Any]]:
        return service.quota_rows(who)

    @app.put("/v1/quota/{tenant}")
    def set_quota(
        tenant: Annotated[str, Path(max_length=200)], limits: QuotaLimits, who: Admin
    ) -> dict[str, Any]:
        return service.set_quota(
            who, tenant, limits.gpus, limits.gpu_memory_mib, limits.guaranteed_gpus
        )

    @app.get("/v1/billing", response_model=None)
    def billing(
        since: Annotated[float, Query(allow_inf_nan=False)],
        until: Annotated[float, Query(allow_inf_nan=False)],
        who: Person,
        format: Literal["json", "csv"] = "json",
    ) -> Response | list[dict[str, Any]]:
        rows = service.billing(who, since, until)
        if format == "csv":
            return Response(to_csv(rows), media_type="text/csv")
        power = service.billing_energy(rows, since, until)
        return [
            {"tenant": r.tenant, "job_id": r.job_id, "name": r.name, "gpu_hours": r.gpu_hours,
             "kwh": e.kwh, "co2_kg": e.co2_kg, "kwh_source": e.source}
            for r, e in zip(rows, power, strict=True)
        ]  # fmt: skip

    @app.get("/v1/audit")
    def audit(
        who: Person,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        before_id: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
        since: Annotated[float | None, Query(allow_inf_nan=False)] = None,
        action: Annotated[str | None, Query(max_length=40, pattern=r"^[a-z][a-z-]*$")] = None,
    ) -> list[dict[str, Any]]:
        return service.audit(who, limit, before_id=before_id, since=since, action=action)

    # ---- node agents -----------------------------------------------------------------------

    @app.post("/v1/agents/{node}/register")
    def register(body: Registration, who: NodeAgent) -> dict[str, Any]:
        return service.register(who.name, body.model_dump())

    @app.post("/v1/agents/{node}/reclaim")
    def agent_reclaim(body: ReclaimBody, who: NodeAgent) -> dict[str, Any]:
        return service.reclaim(who, str(who.name), body.deadline, body.reason)

    @app.post("/v1/agents/{node}/sync")
    def agent_sync(body: Sync, who: NodeAgent) -> dict[str, Any]:
        return service.agent_sync(who.name, body.model_dump())

    return app


class SchedulerServer(AppServer[SchedulerService]):
    """The API under uvicorn in a thread plus the service's round loop, started and stopped
    together (``gpuwarden.lifecycle.AppServer``)."""

    def __init__(
        self,
        service: SchedulerService,
        tokens: TokenBook,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        super().__init__(create_app(service, tokens, max_body_bytes=max_body_bytes), service)


__all__ = ["DEFAULT_MAX_BODY_BYTES", "SchedulerServer", "create_app"]
