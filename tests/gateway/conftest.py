"""The gateway's tests: a gateway and two brokers in this process, a nameserver on loopback.

The gateway calls the brokers in-process (`AsgiTransport`, their lifespans run by
`running`): no server thread, no socket. The nameserver stays a served app, so
that tests can register brokers with it over HTTP (a silent one, a dropping one),
and whatever is not in-process (it, a raw socket a test opens) is reached over TCP
through the fallback transport.

The modules in SERVED_MODULES reach the brokers' sockets themselves (count their
connections, stop and start them, call their URLs with a plain HTTP client): their
brokers are served on loopback as before.
"""

import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp

from gateway.app import create_app
from gateway.settings import GatewaySettings
from libs.http.asgi import AsgiTransport, running
from libs.http.lean_transport import LeanTransport
from libs.http.transport import Transport
from services.broker.app import create_app as broker_app
from services.broker.settings import BrokerSettings
from tests.support.apps import broker_settings, in_process
from tests.support.in_process import InProcessApp
from tests.support.serving import ServedApp, start_app

SERVED_MODULES = frozenset(
    {
        "test_cluster_view",
        "test_flush_timeout",
        "test_long_polls",
        "test_route_cache",
        "test_slave_reads",
        "test_transactions",
        "test_transaction_lists",
    }
)
BOTH_PATHS_MODULES = frozenset({"test_messages", "test_consume", "test_auth"})
"""Their tests run twice: on the hot path (libs.http.hot_routes) and with every route through FastAPI."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "hot_path" in metafunc.fixturenames and metafunc.module.__name__.rsplit(".", 1)[-1] in BOTH_PATHS_MODULES:
        metafunc.parametrize("hot_path", [True, False], ids=["hot", "fastapi"])


@pytest.fixture
def hot_path() -> bool:
    """Whether the gateway and brokers serve their hot routes without FastAPI's request cycle (`hot_path`)."""
    return True


@pytest.fixture
def broker_overrides() -> dict[str, Any]:
    """Settings of the test's two brokers (a test module overrides this fixture)."""
    return {}


@pytest.fixture
def gateway_overrides() -> dict[str, Any]:
    """Settings of the test's gateway (a test module overrides this fixture)."""
    return {}


@pytest.fixture
def gateway_clock() -> Callable[[], float]:
    """The test's gateway's wall clock (a test module overrides this fixture with a FakeClock)."""
    return time.time


@pytest.fixture
def broker_configs(
    nameserver: ServedApp, broker_overrides: dict[str, Any], hot_path: bool
) -> dict[str, BrokerSettings]:
    overrides = {"hot_path": hot_path} | broker_overrides
    return {name: broker_settings(nameserver, name, **overrides) for name in ("broker-a", "broker-b")}


@pytest.fixture
def in_process_apps() -> dict[str, ASGIApp]:
    """Address -> app of everything this test runs in-process."""
    return {}


@pytest.fixture
def transport(in_process_apps: dict[str, ASGIApp]) -> Transport:
    """How a gateway of this test calls brokers and nameservers: in-process where it can, else over TCP."""
    fallback = LeanTransport(connect_timeout=1.0, timeout=5.0, max_connections=256)
    return AsgiTransport(in_process_apps, fallback=fallback)


@pytest.fixture
def served_brokers(broker_configs: dict[str, BrokerSettings]) -> Iterator[dict[str, ServedApp]]:
    served = {name: start_app(broker_app(settings), settings.port) for name, settings in broker_configs.items()}
    yield served
    for app in served.values():
        if app.thread.is_alive():
            app.stop()


@pytest.fixture
async def brokers(
    request: pytest.FixtureRequest, broker_configs: dict[str, BrokerSettings], in_process_apps: dict[str, ASGIApp]
) -> AsyncIterator[dict[str, Any]]:
    if request.module.__name__.rsplit(".", 1)[-1] in SERVED_MODULES:
        yield request.getfixturevalue("served_brokers")
        return
    async with AsyncExitStack() as running_brokers:
        started: dict[str, Any] = {}
        for name, settings in broker_configs.items():
            app = await running_brokers.enter_async_context(running(broker_app(settings)))
            in_process_apps[settings.address] = app
            started[name] = InProcessApp(app, settings.port)
        yield started
        in_process_apps.clear()


@pytest.fixture
async def gateway(
    nameserver: ServedApp,
    brokers: dict[str, Any],
    gateway_overrides: dict[str, Any],
    transport: Transport,
    gateway_clock: Callable[[], float],
    hot_path: bool,
) -> AsyncIterator[httpx.AsyncClient]:
    settings = GatewaySettings(nameservers=[nameserver.address], **({"hot_path": hot_path} | gateway_overrides))
    async for client in in_process(create_app(settings, transport=transport, clock=gateway_clock)):
        yield client
