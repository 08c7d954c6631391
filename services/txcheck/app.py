"""txcheck's health process: ready when the Redis that Celery will use answers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import redis.asyncio as aioredis
from fastapi import FastAPI, Request

from libs.http.app import service_app
from libs.redis_url import failure
from services.txcheck.settings import TxcheckSettings


def create_app(settings: TxcheckSettings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, object]]:
        client = aioredis.Redis.from_url(settings.redis_url, socket_connect_timeout=1, socket_timeout=1)
        try:
            yield {"redis": client}
        finally:
            await client.aclose()

    async def readiness(request: Request) -> dict[str, str]:
        try:
            await request.state.redis.ping()
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready", said in the answer
            return {"redis": failure(settings.redis_url, exc)}
        return {"redis": "ok"}

    return service_app(
        "txcheck", settings, lifespan=lifespan, readiness=readiness, description="Transaction check-backs."
    )
