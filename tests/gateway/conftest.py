from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.settings import GatewaySettings
from services.broker.app import create_app as broker_app
from services.broker.settings import BrokerSettings
from tests.conftest import broker_settings, in_process
from tests.support.serving import ServedApp, start_app


@pytest.fixture
def broker_overrides() -> dict[str, Any]:
    """Settings of the test's two brokers (a test module overrides this fixture)."""
    return {}


@pytest.fixture
def gateway_overrides() -> dict[str, Any]:
    """Settings of the test's gateway (a test module overrides this fixture)."""
    return {}


@pytest.fixture
def broker_configs(nameserver: ServedApp, broker_overrides: dict[str, Any]) -> dict[str, BrokerSettings]:
    return {name: broker_settings(nameserver, name, **broker_overrides) for name in ("broker-a", "broker-b")}


@pytest.fixture
def brokers(broker_configs: dict[str, BrokerSettings]) -> Iterator[dict[str, ServedApp]]:
    served = {name: start_app(broker_app(settings), settings.port) for name, settings in broker_configs.items()}
    yield served
    for app in served.values():
        if app.thread.is_alive():
            app.stop()


@pytest.fixture
async def gateway(
    nameserver: ServedApp, brokers: dict[str, ServedApp], gateway_overrides: dict[str, Any]
) -> AsyncIterator[httpx.AsyncClient]:
    settings = GatewaySettings(nameservers=[nameserver.address], **gateway_overrides)
    async for client in in_process(create_app(settings)):
        yield client
