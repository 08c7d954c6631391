"""AuthMiddleware: every call but health, readiness, metrics and the docs carries a valid key, within its rate.

Pure ASGI, in front of routing and before any body is read: a call without a valid
key costs the gateway a header lookup, whatever it sends after. It answers 401 (with
`WWW-Authenticate: Bearer`) or 429 (with `Retry-After`) as problem+json, and puts the
caller in the scope for the routes' permission checks (gateway.auth.route).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.auth.audit import audit_scope
from gateway.auth.directory import KeyDirectory
from gateway.auth.principal import EVERYONE, SCOPE_KEY, Principal
from gateway.auth.rates import RateLimiter
from libs.auth.keys import KeyStore
from libs.errors import PetrelError, RateLimited, Unauthorized
from libs.problem import error_response

OPEN_PATHS: Final = frozenset({"/healthz", "/readyz", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc"})
OPEN_SPEC: Final = "/openapi.json"


@dataclass(slots=True)
class Authenticator:
    """What the middleware asks, opened in the gateway's lifespan (state `auth`): None directory means auth off."""

    keys: KeyStore
    directory: KeyDirectory | None
    rates: RateLimiter | None

    async def principal(self, authorization: str | None) -> Principal:
        return EVERYONE if self.directory is None else await self.directory.authenticate(authorization)


class AuthMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or scope["path"] == OPEN_SPEC:
            await self.app(scope, receive, send)
            return
        auth: Authenticator = scope["state"]["auth"]
        try:
            principal = await auth.principal(_authorization(scope))
        except Unauthorized as exc:
            audit_scope(scope, "unauthorized", 401, key_id=exc.extensions.get("key_id"), reason=exc.detail)
            await _refuse(scope, send, exc, (b"www-authenticate", b'Bearer realm="petrel"'))
            return
        if auth.rates is not None and principal.key_id is not None:
            wait = auth.rates.admit(principal.key_id, principal.rate_per_second)
            if wait is not None:
                seconds = max(1, math.ceil(wait))
                refused = RateLimited(
                    f"key {principal.describe()} is over its rate of {principal.rate_per_second:g} calls a second",
                    retry_after=seconds,
                )
                audit_scope(scope, "rate_limited", 429, principal, reason=refused.detail)
                await _refuse(scope, send, refused, (b"retry-after", str(seconds).encode()))
                return
        scope[SCOPE_KEY] = principal
        await self.app(scope, receive, send)


def _authorization(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return str(value.decode("latin-1"))
    return None


async def _refuse(scope: Scope, send: Send, exc: PetrelError, header: tuple[bytes, bytes]) -> None:
    response = error_response(exc, scope.get("path"))
    response.raw_headers.append(header)

    async def no_body() -> Message:
        return {"type": "http.disconnect"}

    await response(scope, no_body, send)
