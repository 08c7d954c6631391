"""HotPath: the routes a service answers most, served without FastAPI's request cycle or middleware stack.

FastAPI gives each request a walk over the routes, a dependency tree, an exit stack and a
dozen nested middleware coroutines (its own error, telemetry and body-limit layers, then
ours), each resumed every time the handler waits: on a send, a receive, an ack or a
broker's put that machinery cost more than the work (about 110 us of a single send's
300 us in the gateway and broker, measured in-process). A hot route is served by its own
FastAPI route's endpoint, called with the arguments a `Binder` takes from the request (the
service's context from the lifespan state, path parameters validated as the route's
dependencies validate them, a header), and its `Response` is sent as it is. Both paths run
one handler, one schema and one set of checks; the FastAPI route stays the spec's source
and answers every request the hot path passes on (other paths, other methods, and all of
them when the service runs with `hot_path=false`).

The checks run here as plain calls, in the middleware stack's order and with the same
objects (libs.http.app): the request metrics around it all, the guards (API keys; the Host
check and the cluster token), the media type, the body limit while the body is read, the
JSON shape. A route class that guards its handler (the gateway's `AuthorizedRoute`:
permissions, audit) guards the hot call too (`libs.http.guards.GuardedRoute`). Errors are answered by the
mapping FastAPI's exception handlers use (`libs.problem.answer_error`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi.routing import RouteContext, iter_route_contexts
from starlette.convertors import Convertor
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from libs.http.guards import Guard, GuardedRoute
from libs.http.json_shape import check_json_shape
from libs.http.media import MediaType, content_type
from libs.http.middleware import RequestMetrics, body_too_large, declared_length, read_body, replaying
from libs.problem import answer_error

Binder = Callable[[Request], dict[str, Any]]
"""The endpoint's keyword arguments for this request (raises the problem a dependency would)."""


@dataclass(frozen=True, slots=True)
class Checks:
    """What a request passes before its route, in the middleware stack's order (libs.http.app.service_app)."""

    metrics: RequestMetrics
    guards: Sequence[Guard]
    max_body_bytes: int
    max_json_depth: int
    max_json_items: int


@dataclass(frozen=True, slots=True)
class HotRoute:
    context: RouteContext
    """the FastAPI route: its path template labels the metrics (`scope["route"]`), its endpoint answers"""
    template: str
    endpoint: Callable[..., Awaitable[Any]]
    pattern: re.Pattern[str]
    convertors: dict[str, Convertor[Any]]
    bind: Binder
    guard: GuardedRoute | None

    def match(self, path: str) -> dict[str, Any] | None:
        found = self.pattern.match(path)
        if found is None:
            return None
        return {name: self.convertors[name].convert(value) for name, value in found.groupdict().items()}

    async def call(self, request: Request) -> Response:
        endpoint = self.endpoint

        async def run() -> Response:
            response = await endpoint(**self.bind(request))
            if not isinstance(response, Response):
                raise TypeError(f"hot route {self.template} answered {type(response).__name__}, not a Response")
            return response

        return await (self.guard.guarded(request, run) if self.guard is not None else run())


class HotPath:
    """Serves the routes named in `binders` (operation id -> Binder) of the app whose routes are `routes`."""

    def __init__(self, routes: Sequence[BaseRoute], binders: Mapping[str, Binder], checks: Checks) -> None:
        self.routes = routes
        self.binders = dict(binders)
        self.checks = checks
        self._by_method: dict[str, list[HotRoute]] | None = None

    def resolve(self) -> None:
        """Find each named operation's route (when the app starts: its routers are included by then)."""
        if self._by_method is None:
            self._by_method = self._resolve()

    def find(self, scope: Scope) -> tuple[HotRoute, dict[str, Any]] | None:
        """The hot route this request is for, with its path parameters; None: FastAPI's to answer."""
        self.resolve()
        assert self._by_method is not None
        for route in self._by_method.get(scope["method"], ()):
            params = route.match(scope["path"])
            if params is not None:
                return route, params
        return None

    async def serve(
        self,
        app: ASGIApp,
        route: HotRoute,
        params: dict[str, Any],
        scope: Scope,
        receive: Receive,
        send: Send,
        write: Callable[[Response], Awaitable[None]] | None = None,
    ) -> None:
        """Answer the request through `send`, or with `write` when given (it sends the Response itself:
        libs.http.hot_answers, straight from uvicorn's request cycle)."""
        started = time.perf_counter()
        scope["app"] = app
        scope["route"] = route.context
        scope["path_params"] = params
        status = 500
        try:
            response = await self._answer(route, scope, receive)
            if response is None:
                return  # the client left before its body was whole: nobody to answer
            status = response.status_code
            await (write(response) if write is not None else response(scope, receive, send))
        finally:
            self.checks.metrics.record(scope["method"], route.template, status, time.perf_counter() - started)

    async def _answer(self, route: HotRoute, scope: Scope, receive: Receive) -> Response | None:
        try:
            for guard in self.checks.guards:
                refused = await guard.refusal(scope)
                if refused is not None:
                    return refused.response(scope["path"])
            declared = declared_length(scope)
            if declared is not None and declared > self.checks.max_body_bytes:
                raise body_too_large(declared, self.checks.max_body_bytes)
            body = await read_body(receive, self.checks.max_body_bytes)
            header = content_type(scope)
            if body and header is not None and MediaType.parse(header).is_json:
                check_json_shape(body, max_depth=self.checks.max_json_depth, max_items=self.checks.max_json_items)
            return await route.call(Request(scope, replaying(body, receive)))
        except ClientDisconnect:
            return None
        except Exception as exc:  # noqa: BLE001 - answered as FastAPI's exception handlers answer it
            return await answer_error(Request(scope, receive), exc)

    def _resolve(self) -> dict[str, list[HotRoute]]:
        by_method: dict[str, list[HotRoute]] = {}
        found: set[str] = set()
        for context in iter_route_contexts(self.routes):
            operation = getattr(context, "operation_id", None)
            bind = self.binders.get(operation or "")
            if bind is None or context.path is None or context.endpoint is None:
                continue
            pattern, _, convertors = compile_path(context.path)
            original = context.original_route
            guard = original if isinstance(original, GuardedRoute) else None
            route = HotRoute(context, context.path, context.endpoint, pattern, convertors, bind, guard)
            for method in context.methods or ():
                by_method.setdefault(method, []).append(route)
            found.add(operation or "")
        missing = sorted(set(self.binders) - found)
        if missing:
            raise RuntimeError(f"hot routes name operations the app does not have: {', '.join(missing)}")
        return by_method
