"""Fixtures for the timer service: a TimerScheduler on a fake clock, a real broker served on a port."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from libs.events import EventWriter
from libs.http.client import ClientOptions, InternalClient
from tests.support.apps import broker_settings
from tests.support.clock import FakeClock
from tests.support.serving import ServedApp
from tests.support.timer_service import Broker, Timer, open_scheduler


@pytest.fixture
def broker_overrides() -> dict[str, object]:
    """Settings of the test's broker (a test module overrides this fixture)."""
    return {}


@pytest.fixture
def broker(nameserver: ServedApp, broker_overrides: dict[str, object]) -> Iterator[Broker]:
    served = Broker(broker_settings(nameserver, "broker-a", **broker_overrides))
    served.start()
    served.create("orders")
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture
async def timer(tmp_path: Path, nameserver: ServedApp, broker: Broker) -> AsyncIterator[Timer]:
    clock = FakeClock(time.time())
    events = EventWriter(tmp_path / "export", "timer", clock=clock)
    async with InternalClient(ClientOptions(timeout=5.0)) as client:
        made = Timer(open_scheduler(tmp_path, nameserver, client, clock, events), clock, events)
        try:
            yield made
        finally:
            made.scheduler.store.close()
            events.close()
