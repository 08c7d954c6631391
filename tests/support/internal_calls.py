"""What internal services were asked, as they decoded it: a recorder in front of a real service's app.

`CallRecorder(app, service, calls)` is an ASGI app that appends an `InternalCall` to
`calls` for each HTTP request, then hands the request to `app` unchanged. The call
names what the service's own router makes of the request: the path as its server
decoded it (`scope["path"]`: uvicorn for a served app, httpx's ASGI transport for one
in-process), its query, and the path parameters of the route it matches there, taken
with the app's own routes and Starlette's path compiler, as its router (and
libs.http.hot_routes) match them. So a test sees the topic or group an internal service
acted on, not what a client meant to send.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl

from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from starlette.routing import compile_path
from starlette.types import Receive, Scope, Send


@dataclass(frozen=True, slots=True)
class InternalCall:
    service: str
    method: str
    path: str
    """as the service's server decoded it"""
    params: dict[str, str]
    """the path parameters of the route the service's router matched (none when no route did)"""
    query: dict[str, str]
    """the query parameters, decoded (the last of a repeated one)"""

    def names(self, *kinds: str) -> list[tuple[str, str]]:
        """(parameter, value) of the path or query parameters named `kinds` (topic, group, ...) the call carries."""
        return [(kind, where[kind]) for where in (self.params, self.query) for kind in kinds if kind in where]


class CallRecorder:
    def __init__(self, app: FastAPI, service: str, calls: list[InternalCall]) -> None:
        self.app = app
        self.service = service
        self.calls = calls

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query = dict(parse_qsl(scope["query_string"].decode("latin-1")))
            self.calls.append(InternalCall(self.service, scope["method"], scope["path"], self._params(scope), query))
        await self.app(scope, receive, send)

    def _params(self, scope: Scope) -> dict[str, str]:
        for context in iter_route_contexts(self.app.router.routes):
            if context.path is None or scope["method"] not in (context.methods or ()):
                continue
            pattern, _, convertors = compile_path(context.path)  # as the router matches it
            found = pattern.match(scope["path"])
            if found is not None:
                return {name: str(convertors[name].convert(value)) for name, value in found.groupdict().items()}
        return {}
