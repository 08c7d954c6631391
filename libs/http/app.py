"""The frame every Petrel service is built in: health, readiness, metrics, errors, limits.

Limits come before work: a body of a media type its route does not take is refused
from its headers (libs.http.media), one over the size limit as it is read
(libs.http.middleware), and a JSON body nested too deep or holding too many items
before it is parsed (libs.http.json_shape).

`service_app` gives each service the same outer shape so that `petrel up`, load
balancers and Prometheus can treat them alike; the service adds its routers.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from importlib import metadata
from typing import Any, TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field, ValidationError
from starlette.responses import Response
from starlette.types import Lifespan, Receive, Scope, Send

from libs.cluster_token import INTERNAL_TOKEN_HEADER, require_token_off_loopback
from libs.events.writer import EventWriter
from libs.http.guards import Guard, GuardMiddleware
from libs.http.hot_routes import Binder, Checks, HotPath
from libs.http.json_shape import JsonShapeMiddleware
from libs.http.media import MediaTypeCheck
from libs.http.middleware import (
    OPEN_PATHS,
    BodyLimitMiddleware,
    ClusterTokenCheck,
    HostCheck,
    RequestMetrics,
    RequestMetricsMiddleware,
)
from libs.http.readiness import (
    CachedReadiness,
    DetailPolicy,
    Readiness,
    ReadinessCheck,
    readiness_answer,
    token_holders,
)
from libs.http.request_log import RequestLog
from libs.problem import PROBLEM_MEDIA_TYPE, PROBLEM_SCHEMA_REF, Problem, install_problem_handlers
from libs.settings import ServiceSettings

M = TypeVar("M", bound=BaseModel)


class Health(BaseModel):
    status: str
    service: str
    worker: str | None = Field(
        default=None,
        description="the gateway's worker that answered (gateway, gateway-2, ... when several processes share "
        "its port); other services leave it out",
    )
    version: str = Field(description="the Petrel version this process runs (`petrel status` shows it)")


def installed_version() -> str:
    """The version of the installed petrel package (what a process started now runs)."""
    try:
        return metadata.version("petrel")
    except metadata.PackageNotFoundError:
        return "0.0.0"


async def _always_ready(request: Request) -> dict[str, str]:
    return {}


def service_app(
    name: str,
    settings: ServiceSettings,
    *,
    lifespan: Lifespan[Any],
    readiness: ReadinessCheck = _always_ready,
    public: bool = False,
    max_body_bytes: int = 8 * 1024 * 1024,
    description: str = "",
    version: str | None = None,
    guards: Sequence[Guard] = (),
    hot_routes: Mapping[str, Binder] | None = None,
    worker: str | None = None,
    readiness_detail: DetailPolicy | None = None,
    readiness_clock: Callable[[], float] = time.monotonic,
    cdn_docs: bool = True,
    request_log: RequestLog | None = None,
) -> FastAPI:
    """A FastAPI app with Petrel's common endpoints and middleware.

    Internal services (public=False) require the cluster token when one is
    configured and answer only to IP addresses, localhost and `host_names()` in
    the Host header; the gateway (public=True) has its own auth, given as `guards`:
    guards (libs.http.guards) that run inside the request metrics (their refusals
    are counted) and before the body limit and the routes. Any service listening on
    an address other than loopback refuses to be built without a cluster token
    (ClusterTokenError): the gateway needs it to call the others. `worker` names this process among several
    serving one port (SO_REUSEPORT, libs.http.serve): /healthz answers it.

    `hot_routes` (operation id -> Binder): routes served without FastAPI's request cycle, inside every
    check (libs.http.hot_routes), unless the settings turn the hot path off.

    `request_log`: one JSON line per request (libs.http.request_log), around everything, the hot path too.

    `readiness` runs at most once a second (`readiness_clock`), and its checks are told only to callers
    `readiness_detail` lets see them (default: those with the cluster token): libs.http.readiness.

    `version`: the spec's and /healthz's (default: the installed petrel package's, what the process runs).

    `cdn_docs`: FastAPI's /docs and /redoc pages, which load their scripts from a CDN; a service that serves its
    own (the gateway: gateway.console) turns them off.
    """
    version = version or installed_version()
    token = settings.cluster_token()
    require_token_off_loopback(name, settings.host, token)
    telemetry_on = settings.otel_enabled
    app = ServiceApp(
        telemetry={"tracing": telemetry_on, "metrics": telemetry_on, "logs": telemetry_on},
        title=f"Petrel {name}",
        version=version,
        description=description,
        lifespan=_with_events(name, settings, lifespan),
        docs_url="/docs" if cdn_docs else None,
        redoc_url="/redoc" if cdn_docs else None,
    )
    metrics = RequestMetrics(name)
    app.state.metrics = metrics
    app.request_log = request_log
    install_problem_handlers(app)

    @app.get(
        "/healthz", response_model=Health, response_model_exclude_none=True, operation_id="getHealth", tags=["ops"]
    )
    async def healthz() -> Health:
        """Liveness: the process is up and serving."""
        return Health(status="ok", service=name, worker=worker, version=version)

    @app.get(
        "/readyz",
        response_model=Readiness,
        operation_id="getReadiness",
        tags=["ops"],
        response_model_exclude_none=True,
        responses={503: {"model": Readiness, "description": "Not ready: the checks (to who may see them) say why"}},
    )
    async def readyz(request: Request) -> Response:
        """Readiness: the service can do its work (503 when it cannot); checked at most once a second."""
        return readiness_answer(name, await cached.checks(request), await may_see_detail(request))

    cached = CachedReadiness(readiness, clock=readiness_clock)
    may_see_detail = readiness_detail or token_holders(token)

    @app.get(
        "/metrics",
        operation_id="getMetrics",
        tags=["ops"],
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}}}},
    )
    async def prometheus_metrics() -> Response:
        """Prometheus text exposition."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    _document_problems(app)
    if not public:
        _document_cluster_token(app)
    # Outermost first: metrics, the gateway's guards (401, 429) or the Host check (400) and the cluster token
    # (401), media type (415), body size (413), JSON shape (400/413), the hot routes, FastAPI's routes.
    # The hot path (libs.http.hot_routes) runs the same objects in the same order, as plain calls.
    checked: list[Guard] = [*guards] if public else [HostCheck(settings.host_names())]
    if not public and token is not None:
        checked.append(ClusterTokenCheck(token))
    if not public:
        checked.extend(guards)  # an internal service's own (a slave broker's refusal of writes): after the token
    checked.append(MediaTypeCheck(app.router.routes))
    app.add_middleware(JsonShapeMiddleware, max_depth=settings.max_json_depth, max_items=settings.max_json_items)
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes)
    for guard in reversed(checked):
        app.add_middleware(GuardMiddleware, guard=guard)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)
    if hot_routes and settings.hot_path:
        checks = Checks(metrics, checked, max_body_bytes, settings.max_json_depth, settings.max_json_items)
        app.hot_path = HotPath(app.router.routes, hot_routes, checks)
    return app


def add_routers(app: FastAPI, *routers: APIRouter) -> None:
    """Serve the routers' routes, in order, as the routers built them.

    A router (a module's, made at import) analysed each route's parameters and response models once, when the
    route was declared; FastAPI's `include_router` would analyse each again for every app built (about 40 ms of
    CPU for a gateway's 52 routes, at its first request or when its hot routes resolve). A route holds no app and
    no settings, so apps built with any settings share them; what `include_router` adds to a route (the app's
    prefix, tags and dependencies, `app.dependency_overrides`) Petrel's apps do not use.
    """
    for router in routers:
        app.router.routes.extend(router.routes)


class ServiceApp(FastAPI):
    """A Petrel service's app: FastAPI, with its hot routes answered before FastAPI's stack (libs.http.hot_routes)."""

    hot_path: HotPath | None = None
    request_log: RequestLog | None = None
    """one JSON line per request (libs.http.request_log) when set; it wraps the hot path too"""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.request_log is not None:
            await self.request_log.serve(self._answer, scope, receive, send)
            return
        await self._answer(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.hot_path is not None:
            found = self.hot_path.find(scope)
            if found is not None:
                await self.hot_path.serve(self, *found, scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def _with_events(name: str, settings: ServiceSettings, lifespan: Lifespan[Any]) -> Lifespan[Any]:
    """The service's lifespan, inside one that opens its lifecycle event writer.

    Handlers reach the writer as `request.state.events`; it is flushed when the
    service stops, after the service's own shutdown.
    """

    @contextlib.asynccontextmanager
    async def combined(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        hot_path = getattr(app, "hot_path", None)
        if hot_path is not None:
            hot_path.resolve()  # a hot route naming no operation of the app stops it here, not at its first call
        events = EventWriter(settings.data_dir / "export", name, enabled=settings.events_enabled)
        events.start()
        app.state.events = events  # for the service's own lifespan (background tasks emit too)
        try:
            async with lifespan(app) as state:
                yield {**(state or {}), "events": events}
        finally:
            events.close()

    return combined


def _document_cluster_token(app: FastAPI) -> None:
    """An internal service's spec says that every call but health, readiness and metrics carries the token."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = generate()
        spec.setdefault("components", {}).setdefault("securitySchemes", {})["clusterToken"] = {
            "type": "apiKey",
            "in": "header",
            "name": INTERNAL_TOKEN_HEADER,
            "description": "the cluster token (<data_dir>/cluster.token, PETREL_INTERNAL_TOKEN_FILE); 401 without it",
        }
        spec["security"] = [{"clusterToken": []}]
        for path, operations in spec.get("paths", {}).items():
            if path in OPEN_PATHS:
                for operation in operations.values():
                    operation["security"] = []
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def _document_problems(app: FastAPI) -> None:
    """Error responses carry the Problem schema under application/problem+json only.

    A response documented with another schema (readiness's 503) is left as it is.
    """
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = generate()
        problem = {"schema": {"$ref": PROBLEM_SCHEMA_REF}}
        used = False
        for operations in spec.get("paths", {}).values():
            for operation in operations.values():
                responses = operation.get("responses", {})
                if _is_fastapi_validation_error(responses.get("422", {})):
                    del responses["422"]  # Petrel answers a Problem; a route where 422 can happen documents it
                for code, response in responses.items():
                    if code.startswith(("4", "5")) and _is_problem(response.get("content", {})):
                        response["content"] = {PROBLEM_MEDIA_TYPE: problem}
                        used = True
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        if used:  # routes that document problems by content (problem_responses) name no model FastAPI would add
            schemas.setdefault("Problem", Problem.model_json_schema())
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def _is_fastapi_validation_error(response: dict[str, Any]) -> bool:
    schema = response.get("content", {}).get("application/json", {}).get("schema", {})
    return bool(schema == {"$ref": "#/components/schemas/HTTPValidationError"})


def _is_problem(content: dict[str, Any]) -> bool:
    return any(body.get("schema") == {"$ref": PROBLEM_SCHEMA_REF} for body in content.values())


def json_body(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """`openapi_extra` documenting a request body that the handler parses itself (see `parse_json`)."""
    schema = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}}


def binary_body(media_type: str = "application/octet-stream", *, required: bool = True) -> dict[str, Any]:
    """`openapi_extra` of a route taking a binary body (the record codec): it then takes that type, not JSON."""
    content = {media_type: {"schema": {"type": "string", "format": "binary"}}}
    return {"requestBody": {"required": required, "content": content}}


def parse_json(model: type[M], raw: bytes) -> M:
    """Validate a JSON body straight from bytes (pydantic-core); errors map to problems as FastAPI's do."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False, include_input=False)]
        raise RequestValidationError(errors) from None


def register_schemas(app: FastAPI, models: list[type[BaseModel]]) -> None:
    """Add models that only `json_body` refers to into the spec's components."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = generate()
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        for model in models:
            definition = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, nested in definition.pop("$defs", {}).items():
                schemas.setdefault(name, nested)
            schemas.setdefault(model.__name__, definition)
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
