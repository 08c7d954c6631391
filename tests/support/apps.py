"""Services' apps for tests: broker settings on small stores, and an httpx client calling an app in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from services.broker.settings import BrokerSettings
from tests.support.serving import ServedApp, free_port

SMALL_STORE: dict[str, object] = {
    "segment_size": 4 * 1024 * 1024 + 64 * 1024,
    "index_slot_count": 4096,
    "index_max_entries": 100_000,
    "cq_units_per_file": 1000,
}
"""Store sizes for tests: real files, small enough to preallocate in a blink."""


def broker_settings(nameserver: ServedApp | str, name: str = "broker-a", **overrides: object) -> BrokerSettings:
    """A broker on a free loopback port with a small store, registering with `nameserver`."""
    port = free_port()
    address = nameserver if isinstance(nameserver, str) else nameserver.address
    values = SMALL_STORE | {"port": port, "broker_name": name, "nameservers": [address]} | overrides
    return BrokerSettings(**values)  # type: ignore[arg-type]


LIFESPAN_SECONDS = 60


async def in_process(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client calling the app in-process, with its lifespan running."""
    async for client, _ in in_process_with_state(app):
        yield client


async def in_process_with_state(app: FastAPI) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, Any]]]:
    """As `in_process`, with the state its lifespan yielded (a broker's: {"broker": BrokerContext})."""
    # asgi-lifespan's 5 s for a start or a stop: a broker's start took longer on a loaded machine (the suite at
    # 0.75 CPU); the test's own timeout still bounds it
    async with LifespanManager(app, startup_timeout=LIFESPAN_SECONDS, shutdown_timeout=LIFESPAN_SECONDS) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client, manager._state  # asgi-lifespan keeps it there (no public name for it)
