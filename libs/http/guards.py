"""Guards: the checks a request passes before any body is read (Host, cluster token, API keys, media type).

A guard looks at a request's scope and answers a `Refusal` (a problem and the headers that
go with it) or None. Each guard is one object, run in two places in the same order:
`GuardMiddleware` runs it for a request on its way to FastAPI's routing, and the hot path
(libs.http.hot_routes) calls it directly, without a middleware's coroutine around the route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from libs.errors import PetrelError
from libs.problem import error_response

Call = Callable[[], Awaitable[Response]]


@runtime_checkable
class GuardedRoute(Protocol):
    """A route class whose handler runs inside checks of its own (the gateway's permissions): the hot path
    (libs.http.hot_routes) calls it too. Defined here, not there, because a compiled module (mypyc) cannot make a
    runtime-checkable Protocol."""

    async def guarded(self, request: Request, call: Call) -> Response: ...


HTTP_ONLY: Final = frozenset({"http"})
HTTP_AND_WEBSOCKET: Final = frozenset({"http", "websocket"})


@dataclass(frozen=True, slots=True)
class Refusal:
    error: PetrelError
    headers: Sequence[tuple[bytes, bytes]] = ()

    def response(self, path: str | None) -> Response:
        response = error_response(self.error, path)
        response.raw_headers.extend(self.headers)
        return response


class Guard(Protocol):
    scopes: frozenset[str]
    """the scope types it checks (every other request passes)"""

    async def refusal(self, scope: Scope) -> Refusal | None: ...


class GuardMiddleware:
    """Runs one guard in front of the app: a refused request is answered, never handed on."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in self.guard.scopes:
            refused = await self.guard.refusal(scope)
            if refused is not None:
                await send_refusal(scope, send, refused)
                return
        await self.app(scope, receive, send)


async def send_refusal(scope: Scope, send: Send, refused: Refusal) -> None:
    """Answer a refusal without reading the body; a WebSocket handshake is closed (the client sees a 403)."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": refused.error.detail[:120]})
        return

    async def no_body() -> Message:
        return {"type": "http.disconnect"}

    await refused.response(scope.get("path"))(scope, no_body, send)


async def send_problem(scope: Scope, send: Send, exc: PetrelError) -> None:
    """Answer `exc` as problem+json from a pure ASGI middleware, without reading the body."""
    await send_refusal(scope, send, Refusal(exc))
