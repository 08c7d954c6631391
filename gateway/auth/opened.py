"""`opened_auth`: the gateway's key store, its copy of the keys and its rate limiter, for the app's lifespan."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import redis.asyncio as aioredis

from gateway.auth.directory import KeyDirectory
from gateway.auth.key_check import Authenticator
from gateway.auth.rates import RateLimiter
from gateway.settings import GatewaySettings
from libs.auth.keys import KeyStore, open_key_engine

RATE_PREFIX = "petrel:rate:"
"""Per-key windows in Redis: a key id is random, so clusters sharing a Redis do not mix their counts."""


@contextlib.asynccontextmanager
async def opened_auth(settings: GatewaySettings, redis: aioredis.Redis) -> AsyncIterator[Authenticator]:
    """Keys read and refreshed, rates counted (auth required); the store alone (auth off, for /v1/keys)."""
    engine = await asyncio.to_thread(open_key_engine, settings.metadata_url)
    keys = KeyStore(engine)
    directory = rates = None
    background: list[asyncio.Task[None]] = []
    try:
        if settings.auth_required():
            directory = KeyDirectory(keys, settings.key_refresh_seconds, settings.key_rate_per_second)
            await directory.load()
            rates = RateLimiter(redis, RATE_PREFIX)
            background = [asyncio.create_task(directory.run()), asyncio.create_task(rates.run())]
        yield Authenticator(keys, directory, rates)
    finally:
        if rates is not None:
            rates.stop()  # its last flush ends by itself; the refresh is cancelled (its thread finishes alone)
        for task in background[:1]:
            task.cancel()
        if background:
            await asyncio.wait(background, timeout=settings.broker_timeout_seconds)
        engine.dispose()
