"""HotRoutesMiddleware: the routes a service answers most, called without FastAPI's request cycle.

FastAPI gives each request a walk over the routes, a dependency tree, an exit stack and
its exception middleware: on a send, a receive, an ack or a broker's put that machinery
cost more than the work (profiles of `petrel bench gateway`). A hot route is served by its
own FastAPI route's endpoint, called with the arguments a `Binder` takes from the request
(the service's context from the lifespan state, path parameters validated as the route's
dependencies validate them, a header), and its `Response` is sent as it is. So both paths
run one handler, one schema and one set of checks; the FastAPI route stays the spec's
source, and answers every request this middleware passes on (other paths, other methods,
and all of them when the service runs with `hot_path=false`).

It sits innermost in `service_app`'s middleware: the request metrics, the guards (API keys,
the Host check, the cluster token), the media type, body size and JSON shape checks run for
a hot request as for any other. A route class that guards its handler (the gateway's
`AuthorizedRoute`: permissions, audit) guards the hot call too (`GuardedRoute`). Errors are
answered by the same mapping as FastAPI's exception handlers (`libs.problem.answer_error`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from fastapi.routing import RouteContext, iter_route_contexts
from starlette.convertors import Convertor
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from libs.problem import answer_error

Binder = Callable[[Request], dict[str, Any]]
"""The endpoint's keyword arguments for this request (raises the problem a dependency would)."""

Call = Callable[[], Awaitable[Response]]


@runtime_checkable
class GuardedRoute(Protocol):
    """A route class whose handler runs inside checks of its own (the gateway's permissions)."""

    async def guarded(self, request: Request, call: Call) -> Response: ...


@dataclass(frozen=True, slots=True)
class HotRoute:
    context: RouteContext
    """the FastAPI route: its path template labels the metrics (`scope["route"]`), its endpoint answers"""
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
        endpoint = self.context.endpoint
        assert endpoint is not None

        async def run() -> Response:
            response = await endpoint(**self.bind(request))
            if not isinstance(response, Response):
                raise TypeError(f"hot route {self.context.path} answered {type(response).__name__}, not a Response")
            return response

        return await (self.guard.guarded(request, run) if self.guard is not None else run())


class HotRoutesMiddleware:
    """Serves the routes named in `binders` (operation id -> Binder); passes every other request on.

    `routes`: the app's routes, read when the first request comes (the routers are included by then).
    """

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute], binders: Mapping[str, Binder]) -> None:
        self.app = app
        self.routes = routes
        self.binders = dict(binders)
        self._by_method: dict[str, list[HotRoute]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._by_method is None:
            self._by_method = self._resolve()
        for route in self._by_method.get(scope["method"], ()):
            params = route.match(scope["path"])
            if params is not None:
                scope["route"] = route.context
                scope["path_params"] = params
                request = Request(scope, receive)
                try:
                    response = await route.call(request)
                except Exception as exc:  # noqa: BLE001 - answered as FastAPI's exception handlers answer it
                    response = await answer_error(request, exc)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _resolve(self) -> dict[str, list[HotRoute]]:
        by_method: dict[str, list[HotRoute]] = {}
        found: set[str] = set()
        for context in iter_route_contexts(self.routes):
            operation = getattr(context, "operation_id", None)
            bind = self.binders.get(operation or "")
            if bind is None or context.path is None:
                continue
            pattern, _, convertors = compile_path(context.path)
            original = context.original_route
            guard = original if isinstance(original, GuardedRoute) else None
            route = HotRoute(context, pattern, convertors, bind, guard)
            for method in context.methods or ():
                by_method.setdefault(method, []).append(route)
            found.add(operation or "")
        missing = sorted(set(self.binders) - found)
        if missing:
            raise RuntimeError(f"hot routes name operations the app does not have: {', '.join(missing)}")
        return by_method
