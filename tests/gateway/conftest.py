from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from gateway.app import create_app
from gateway.settings import GatewaySettings
from services.broker.app import create_app as broker_app
from tests.conftest import broker_settings, in_process
from tests.support.serving import ServedApp, start_app


@pytest.fixture
def brokers(nameserver: ServedApp) -> Iterator[dict[str, ServedApp]]:
    served = {}
    for name in ("broker-a", "broker-b"):
        settings = broker_settings(nameserver, name)
        served[name] = start_app(broker_app(settings), settings.port)
    yield served
    for app in served.values():
        if app.thread.is_alive():
            app.stop()


@pytest.fixture
async def gateway(nameserver: ServedApp, brokers: dict[str, ServedApp]) -> AsyncIterator[httpx.AsyncClient]:
    settings = GatewaySettings(nameservers=[nameserver.address])
    async for client in in_process(create_app(settings)):
        yield client
