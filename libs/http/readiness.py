"""Readiness (/readyz): checked at most once a second however many ask, told in detail only to who may see it.

Every service answers /readyz without a credential: probes carry none. So a flood of
probes must not become a flood of checks (the gateway's asks a nameserver):
`CachedReadiness` runs the service's check at most once per `READINESS_TTL_SECONDS`,
concurrent callers sharing the run in flight. And what is wrong (a peer's address, its
error) is told only to a caller who may see it (a `DetailPolicy`); everyone else reads
`{"status": "ready"}` or `{"status": "not ready"}`, with 200 or 503. On an internal
service that is a caller with the cluster token (everyone when there is none: a
cluster on loopback); the gateway gives its own policy (gateway.app).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Final, Literal

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from libs.cluster_token import INTERNAL_TOKEN_HEADER

READINESS_TTL_SECONDS: Final = 1.0

ReadinessCheck = Callable[[Request], Awaitable[dict[str, str]]]
"""Returns check name -> "ok" or what is wrong; the service is ready when all are "ok"."""
DetailPolicy = Callable[[Request], Awaitable[bool]]
"""Whether the caller may read the checks (else: the status alone)."""


class Readiness(BaseModel):
    """The status alone, or with the checks to a caller who may see them (a field is left out, never null)."""

    status: Literal["ready", "not ready"]
    ready: bool | SkipJsonSchema[None] = Field(default=None, description="the status as a boolean; with the checks")
    service: str | SkipJsonSchema[None] = Field(default=None, description="with the checks")
    checks: dict[str, str] | SkipJsonSchema[None] = Field(
        default=None,
        description="each check: ok, or what is wrong; told only to a caller who may see it (one with the cluster "
        "token; on the gateway, a key with admin on the cluster, or anyone while auth is off)",
    )


class CachedReadiness:
    """Runs `check` at most once per `ttl` seconds: callers meanwhile share the run in flight, or its result."""

    def __init__(
        self, check: ReadinessCheck, ttl: float = READINESS_TTL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.check = check
        self.ttl = ttl
        self.clock = clock
        self._last: tuple[float, dict[str, str]] | None = None
        self._running: asyncio.Future[dict[str, str]] | None = None

    async def checks(self, request: Request) -> dict[str, str]:
        if self._last is not None and 0 <= self.clock() - self._last[0] < self.ttl:
            return self._last[1]
        if self._running is None:
            self._running = asyncio.ensure_future(self._run(request))
        # shielded: a caller who hangs up does not cancel the run the others wait for
        return await asyncio.shield(self._running)

    async def _run(self, request: Request) -> dict[str, str]:
        started = self.clock()
        try:
            result = await self.check(request)
        finally:
            self._running = None
        self._last = (started, result)
        return result


def token_holders(token: str | None) -> DetailPolicy:
    """The internal services' policy: a caller with the cluster token, or anyone when the cluster has none."""
    expected = None if token is None else token.encode()

    async def holds_the_token(request: Request) -> bool:
        if expected is None:
            return True
        return hmac.compare_digest(request.headers.get(INTERNAL_TOKEN_HEADER, "").encode(), expected)

    return holds_the_token


def readiness_answer(service: str, checks: dict[str, str], detailed: bool) -> JSONResponse:
    ready = all(result == "ok" for result in checks.values())
    body = Readiness(status="ready" if ready else "not ready")
    if detailed:
        body = Readiness(status=body.status, ready=ready, service=service, checks=checks)
    return JSONResponse(body.model_dump(exclude_none=True), status_code=200 if ready else 503)
