"""KeyCheck: every call but health, readiness, metrics, the docs and the console's pages carries a valid key.

A guard (libs.http.guards), in front of routing and before any body is read: a call without a valid
key costs the gateway a header lookup, whatever it sends after. It answers 401 (with
`WWW-Authenticate: Bearer`) or 429 (with `Retry-After`) as problem+json, and puts the
caller in the scope for the routes' permission checks (gateway.auth.route).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from starlette.types import Scope

from gateway.auth.audit import audit_scope
from gateway.auth.directory import KeyDirectory
from gateway.auth.principal import EVERYONE, SCOPE_KEY, Principal
from gateway.auth.rates import RateLimiter
from libs.auth.keys import KeyStore
from libs.errors import RateLimited, Unauthorized
from libs.http.guards import HTTP_ONLY, Refusal
from libs.http.middleware import header

OPEN_PATHS: Final = frozenset(
    {"/healthz", "/readyz", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/", "/console"}
)
OPEN_SPEC: Final = "/openapi.json"
OPEN_PREFIX: Final = "/console/"
"""The console's page shells and static files: they hold no data, and each page asks for a key when /v1 answers 401."""


@dataclass(slots=True)
class Authenticator:
    """What the middleware asks, opened in the gateway's lifespan (state `auth`): None directory means auth off."""

    keys: KeyStore
    directory: KeyDirectory | None
    rates: RateLimiter | None

    async def principal(self, authorization: str | None) -> Principal:
        return EVERYONE if self.directory is None else await self.directory.authenticate(authorization)


class KeyCheck:
    """The guard (libs.http.guards) that lets in a call with a valid key within its rate, and notes who it is."""

    scopes = HTTP_ONLY

    async def refusal(self, scope: Scope) -> Refusal | None:
        path = scope["path"]
        if path in OPEN_PATHS or path == OPEN_SPEC or path.startswith(OPEN_PREFIX):
            return None
        auth: Authenticator = scope["state"]["auth"]
        try:
            principal = await auth.principal(_authorization(scope))
        except Unauthorized as exc:
            audit_scope(scope, "unauthorized", 401, key_id=exc.extensions.get("key_id"), reason=exc.detail)
            return Refusal(exc, ((b"www-authenticate", b'Bearer realm="petrel"'),))
        if auth.rates is not None and principal.key_id is not None:
            wait = auth.rates.admit(principal.key_id, principal.rate_per_second)
            if wait is not None:
                seconds = max(1, math.ceil(wait))
                refused = RateLimited(
                    f"key {principal.describe()} is over its rate of {principal.rate_per_second:g} calls a second",
                    retry_after=seconds,
                )
                audit_scope(scope, "rate_limited", 429, principal, reason=refused.detail)
                return Refusal(refused, ((b"retry-after", str(seconds).encode()),))
        scope[SCOPE_KEY] = principal
        return None


def _authorization(scope: Scope) -> str | None:
    value = header(scope, b"authorization")
    return None if value is None else value.decode("latin-1")
