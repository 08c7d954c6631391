"""Fixtures shared by service tests: settings pointed at a temporary data dir, served apps."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from services.broker.app import create_app as broker_app
from services.broker.settings import BrokerSettings
from services.nameserver.app import create_app as nameserver_app
from services.nameserver.settings import NameserverSettings
from tests.support.serving import ServedApp, free_port, serving


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No PETREL_* setting of the developer's shell leaks into a test."""
    import os

    for name in list(os.environ):
        if name.startswith("PETREL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PETREL_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture
def nameserver() -> Iterator[ServedApp]:
    with serving(nameserver_app(NameserverSettings(port=0))) as served:
        yield served


SMALL_STORE: dict[str, object] = {
    "segment_size": 4 * 1024 * 1024 + 64 * 1024,
    "index_slot_count": 4096,
    "index_max_entries": 100_000,
    "cq_units_per_file": 1000,
}
"""Store sizes for tests: real files, small enough to preallocate in a blink."""


def broker_settings(nameserver: ServedApp | str, name: str = "broker-a", **overrides: object) -> BrokerSettings:
    port = free_port()
    address = nameserver if isinstance(nameserver, str) else nameserver.address
    values = SMALL_STORE | {"port": port, "broker_name": name, "nameservers": [address]} | overrides
    return BrokerSettings(**values)  # type: ignore[arg-type]


@pytest.fixture
def broker(nameserver: ServedApp) -> Iterator[ServedApp]:
    settings = broker_settings(nameserver)
    with serving(broker_app(settings), settings.port) as served:
        yield served


async def in_process(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client calling the app in-process, with its lifespan running."""
    async with LifespanManager(app) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client
