"""AuthorizedRoute: the route class of every `/v1` router; checks the operation's needs before its handler runs.

The check runs where the path parameters are known and before the body is read, in
the route itself rather than as a FastAPI dependency: no dependency tree per request,
and a route that declares nothing cannot be built (the app fails to start).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from gateway.auth.audit import audit
from gateway.auth.needs import NEEDS, Need, is_admin_operation
from gateway.auth.principal import Principal, principal_of
from libs.errors import Forbidden, PetrelError

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class AuthorizedRoute(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        operation_id = kwargs.get("operation_id")
        needs = NEEDS.get(operation_id or "")
        if needs is None:
            raise RuntimeError(f"route {path} ({operation_id}) is in no entry of gateway.auth.needs.NEEDS")
        self.needs: tuple[Need, ...] = needs
        self.admin = is_admin_operation(needs)
        extra = dict(kwargs.get("openapi_extra") or {})
        extra["x-petrel-permissions"] = [need.text() for need in needs]
        kwargs["openapi_extra"] = extra
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Handler:
        handler: Handler = super().get_route_handler()

        async def authorized(request: Request) -> Response:
            return await self.guarded(request, lambda: handler(request))

        return authorized

    async def guarded(self, request: Request, call: Callable[[], Awaitable[Response]]) -> Response:
        """Run `call` (the handler) if the caller may: 403 otherwise; audited as the operation asks.

        FastAPI's handler and the hot path's call (libs.http.hot_routes) both run inside it.
        """
        principal = principal_of(request)
        operation = self.operation_id or self.name
        try:
            check(principal, self.needs, request.path_params)
        except Forbidden as exc:
            audit(request, "forbidden", 403, principal, operation=operation, reason=exc.detail)
            raise
        if not self.admin or principal.key_id is None:
            return await call()
        try:
            response = await call()
        except PetrelError as exc:
            audit(request, "admin_call", exc.status, principal, operation=operation, reason=exc.detail)
            raise
        audit(request, "admin_call", response.status_code, principal, operation=operation)
        return response


def check(principal: Principal, needs: tuple[Need, ...], path_params: dict[str, Any]) -> None:
    for need in needs:
        if need.kind == "cluster":
            principal.require(need.actions, "cluster")
        elif need.param is not None:
            principal.require(*need.resource(path_params))
        else:
            principal.require_some(need.actions)
