"""The coordinator's HTTP API (FastAPI), served by the daemon's uvicorn thread.

Endpoints (docs/design.md, "The coordinator: leadership and liveness", and "What is pinned"):

- `GET /containerHeartbeat?executionContainerId=ID` -> {"alive": bool}   (pinned, no token)
- `GET /metrics` -> Prometheus text of the coordinator's own registry     (no token)
- `GET /sd` -> Prometheus HTTP service discovery: every live processor's metrics
  target with `job` and `processor` labels (pinned; no token, as `/metrics`)
- `POST /processors/register`, `POST /processors/heartbeat` (HeartbeatRequest -> HeartbeatReply)
- `GET /status`, `POST /plan`, `POST /drain`, `POST /forget`, `POST /expand`, `POST /split`,
  `POST /autoscale/decisions` (what `baton autoscale` decided), `GET /openapi.json`

Every endpoint but these three requires `Authorization: Bearer <token>`: the
processor token for `/processors/*`, the operator token for the rest (401 without a
valid one, 403 with the other kind's; see `credentials.py`). Reports must name tasks
and partitions of the job (422 naming the task); bodies over
`coordinator.max_request_bytes` get 413 (`limits.py`). A malformed request is the caller's fault and
always gets a 4xx with a reason, never a 5xx: bodies and parameters are validated by
pydantic models (422), and the core's refusals map to 400/404/409. 503 means the
coordinator cannot persist right now (broker trouble, or it was fenced) and the
caller should retry or look at the coordinator's log.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from confluent_kafka import KafkaException
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, ConfigDict, Field

from metrics import CONTENT_TYPE, render
from orchestrator.core import discovery
from orchestrator.core.coordinator import DrainError, ForgetError, UnknownProcessor
from orchestrator.core.split import SplitError
from orchestrator.core.views import PlanError
from orchestrator.daemon.credentials import Credentials, Kind, Refused
from orchestrator.daemon.growth import ExpansionError
from orchestrator.daemon.heartbeat_route import (
    HEARTBEAT_PATH,
    MAX_WAIT_MS,
    HeartbeatRoute,
    validation_reply,
)
from orchestrator.daemon.heartbeats import InvalidReport
from orchestrator.daemon.service import CoordinatorService
from orchestrator.daemon.tls import peer_name
from orchestrator.kafka.stream import StreamError
from orchestrator.kafka.topics import TopicsError
from orchestrator.wire.protocol import HeartbeatReply, HeartbeatRequest

__all__ = ["AliveReply", "AutoscaleDecision", "DrainRequest", "ExpandRequest",
           "ForgetRequest", "PlanRequest", "SplitRequest", "create_app"]

log = logging.getLogger("baton.coordinator.api")

_PROCESSOR_ID = r"^[A-Za-z0-9._-]+$"
_TOPIC = r"^[A-Za-z0-9._-]+$"
# Kafka's own bound on partitions per topic is far lower in practice; this only keeps
# a typo from asking the broker for a billion partitions.
_MAX_PARTITIONS = 100_000


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AliveReply(_Body):
    alive: bool


_ProcessorId = Annotated[str, Field(min_length=1, max_length=200, pattern=_PROCESSOR_ID)]


class PlanRequest(_Body):
    add: list[_ProcessorId] = Field(default_factory=list, max_length=1000)
    remove: list[_ProcessorId] = Field(default_factory=list, max_length=1000)


class DrainRequest(_Body):
    processor: _ProcessorId


class ForgetRequest(_Body):
    processor: _ProcessorId


class ExpandRequest(_Body):
    topic: str = Field(min_length=1, max_length=249, pattern=_TOPIC)
    partitions: int = Field(ge=1, le=_MAX_PARTITIONS)


class SplitRequest(_Body):
    dry_run: bool = False


class AutoscaleDecision(_Body):
    """One decision of `baton autoscale`, as it made it or when it ended."""

    direction: Literal["up", "down", "expand"]
    outcome: Literal["started", "done", "failed"]
    current: int = Field(ge=0, le=100_000)
    target: int = Field(ge=0, le=100_000)
    processors: list[_ProcessorId] = Field(default_factory=list, max_length=1000)
    reason: str = Field(default="", max_length=4000)
    inputs: dict[Annotated[str, Field(max_length=100)],
                 float | int | str | bool | None] = Field(default_factory=dict,
                                                          max_length=50)


_BEARER = HTTPBearer(auto_error=False, description="The operator or processor token")


class _TokenCheck:
    """The bearer-token dependency of one kind of endpoint (a class: FastAPI resolves
    its annotations from this module's globals, which a closure's locals are not)."""

    def __init__(self, credentials: Credentials, kind: Kind) -> None:
        self._credentials, self._kind = credentials, kind

    def __call__(self, given: Annotated[HTTPAuthorizationCredentials | None,
                                        Depends(_BEARER)]) -> None:
        try:
            self._credentials.check(self._kind, given.credentials if given else None)
        except Refused as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            raise HTTPException(exc.status, str(exc), headers=headers) from None


def create_app(service: CoordinatorService, credentials: Credentials,
               registry: CollectorRegistry | None = None,
               bind_ids: bool = False) -> HeartbeatRoute:
    """The API over `service`; `credentials` hold the tokens (never logged). With
    `bind_ids` (mutual TLS) a processor id must equal its certificate's common name.
    Heartbeats are served in front of FastAPI (`heartbeat_route.py`)."""
    app = FastAPI(title="Baton coordinator", version="1", docs_url=None, redoc_url=None,
                  openapi_url=None)
    auth = [Depends(_TokenCheck(credentials, "operator"))]
    processor_auth = [Depends(_TokenCheck(credentials, "processor"))]

    def admit(request: HeartbeatRequest, http: Request) -> None:
        """The processor's own identity and reports, before the core sees them."""
        if bind_ids and peer_name(http.scope) != request.processor_id:
            raise HTTPException(403, f"processor id {request.processor_id!r} does not match "
                                f"the client certificate's common name "
                                f"{peer_name(http.scope)!r}")
        service.heartbeats.check_reports(request)

    _add_error_handlers(app)

    @app.get("/containerHeartbeat", response_model=AliveReply, tags=["liveness"])
    def container_heartbeat(
            executionContainerId: Annotated[str, Query(min_length=1, max_length=200)],  # noqa: N803
    ) -> AliveReply:
        """Pinned: is this execution its processor's valid one?"""
        return AliveReply(alive=service.heartbeats.alive(executionContainerId))

    @app.post("/processors/register", response_model=HeartbeatReply,
              dependencies=processor_auth,
              tags=["processors"])
    def register(request: HeartbeatRequest, http: Request) -> Response:
        """A processor execution starts; it becomes its id's one valid execution."""
        admit(request, http)
        return _json(service.heartbeats.register(request))

    @app.post(HEARTBEAT_PATH, response_model=HeartbeatReply,
              dependencies=processor_auth,
              tags=["processors"])
    def heartbeat(request: HeartbeatRequest, http: Request) -> Response:
        """Reports in, the whole assignment out (level-triggered); with `wait_ms`, a
        long poll answered as soon as the processor's assignment changes. (Served by
        `HeartbeatRoute`; this route gives the schema.)"""
        admit(request, http)
        wait_s = min(request.wait_ms or 0, MAX_WAIT_MS) / 1000
        return _json(service.heartbeats.heartbeat(request, wait_s))

    @app.get("/status", dependencies=auth, tags=["operators"])
    def status() -> dict[str, Any]:
        """The job model, processors, tasks with lag, handoffs in flight."""
        return service.operations.status()

    @app.post("/plan", dependencies=auth, tags=["operators"])
    def plan(request: PlanRequest) -> dict[str, Any]:
        """Dry run of adding/removing processors: moves, S2 sizes, catch-up estimate."""
        return service.operations.plan(request.add, request.remove)

    @app.post("/drain", dependencies=auth, tags=["operators"])
    def drain(request: DrainRequest) -> dict[str, Any]:
        """Scale in: move the processor's tasks away, then tell it to exit."""
        return service.operations.drain(request.processor)

    @app.post("/forget", dependencies=auth, tags=["operators"])
    def forget(request: ForgetRequest) -> dict[str, Any]:
        """Remove a dead processor for good (409 for a live one: drain that)."""
        return service.operations.forget(request.processor)

    @app.post("/expand", dependencies=auth, tags=["operators"])
    def expand(request: ExpandRequest) -> dict[str, Any]:
        """Grow an input topic and apply the fixed-task expansion (barriers recorded)."""
        return service.operations.expand(request.topic, request.partitions)

    @app.post("/split", dependencies=auth, tags=["operators"])
    def split(request: SplitRequest) -> dict[str, Any]:
        """Split every task that can split after an expansion (dry run: plan only)."""
        return service.operations.split(request.dry_run)

    @app.post("/autoscale/decisions", dependencies=auth, tags=["operators"])
    def autoscale_decision(request: AutoscaleDecision) -> dict[str, Any]:
        """A decision of `baton autoscale`: logged, counted, shown in /status."""
        return service.operations.autoscale_decision(request.model_dump())

    @app.get("/metrics", response_class=Response, tags=["metrics"])
    def metrics() -> Response:
        """The coordinator's Prometheus metrics (no token, like any scrape target)."""
        body = render(registry) if registry is not None else b""   # no core lock: views are copies
        return Response(body, media_type=CONTENT_TYPE)

    @app.get("/sd", tags=["metrics"])
    def service_discovery() -> list[dict[str, Any]]:
        """Prometheus HTTP service discovery (`http_sd_configs`): one target group per
        live processor, so scrape configs follow scale-out and in without editing."""
        with service.guard.lock:
            core = service.guard.core
            return discovery.sd_targets(core.picture.processors, core.picture.config.job)

    @app.get("/openapi.json", dependencies=auth, include_in_schema=False)
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = get_openapi(title=app.title, version=app.version,
                                             description=__doc__, routes=app.routes)
        return app.openapi_schema

    return HeartbeatRoute(app, service.heartbeats, credentials, bind_ids)


def _json(reply: HeartbeatReply) -> Response:
    """The reply serialized once, by pydantic's own encoder (FastAPI would validate it
    again and encode it through the standard library: most of a heartbeat's cost)."""
    return Response(reply.model_dump_json(), media_type="application/json")


def _add_error_handlers(app: FastAPI) -> None:
    """Map every refusal to a 4xx with a reason; persistence trouble to 503."""

    def handler(status: int) -> Any:
        async def respond(request: Request, exc: Exception) -> JSONResponse:
            if status >= 500:
                log.error("%s %s: %s", request.method, request.url.path, exc)
            return JSONResponse({"detail": str(exc)}, status_code=status)
        return respond

    app.add_exception_handler(UnknownProcessor, handler(404))
    app.add_exception_handler(DrainError, handler(409))
    app.add_exception_handler(ForgetError, handler(409))
    app.add_exception_handler(PlanError, handler(400))
    app.add_exception_handler(ExpansionError, handler(400))
    app.add_exception_handler(SplitError, handler(400))
    app.add_exception_handler(InvalidReport, handler(422))
    app.add_exception_handler(TopicsError, handler(409))
    app.add_exception_handler(StreamError, handler(503))
    app.add_exception_handler(KafkaException, handler(503))  # the broker, after retries

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        errors = exc.errors() if isinstance(exc, RequestValidationError) else []
        return JSONResponse(validation_reply(errors), status_code=422)

    app.add_exception_handler(RequestValidationError, invalid)
