"""Registration with the nameserver at 100,000 topics: paged at start, then only what changed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from sqlalchemy import insert
from starlette.types import ASGIApp, Receive, Scope, Send

from libs.routing import REGISTRATION_PAGE
from services.broker.app import create_app
from services.broker.metadata import TopicRow, open_engine
from services.nameserver.app import create_app as nameserver_app
from services.nameserver.settings import NameserverSettings
from tests.support.apps import broker_settings, in_process
from tests.support.serving import ServedApp, free_port, serving

TOPICS = 100_000
SMALL = 2_048
"""Bytes: a request about one topic."""


class RequestSizes:
    """The nameserver app, recording each request's method, path and body size."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[tuple[str, str, int]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            length = dict(scope["headers"]).get(b"content-length", b"0")
            self.seen.append((scope["method"], scope["path"], int(length)))
        await self.app(scope, receive, send)


@pytest.fixture
def recorded() -> Iterator[tuple[ServedApp, RequestSizes]]:
    recorder = RequestSizes(nameserver_app(NameserverSettings(port=0)))
    with serving(recorder) as served:
        yield served, recorder


def seed_topics(url: str, count: int) -> None:
    engine = open_engine(url)
    rows = [
        {"name": f"t-{i:06d}", "read_queues": 4, "write_queues": 4, "perm": 6, "message_type": "NORMAL"}
        for i in range(count)
    ]
    with engine.begin() as connection:
        connection.execute(insert(TopicRow), rows)
    engine.dispose()


async def slow_start(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """As tests.conftest.in_process, with time to load and register 100,000 topics on a busy machine."""
    async with LifespanManager(app, startup_timeout=120) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client


async def route(nameserver: ServedApp, topic: str) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.get(f"{nameserver.url}/internal/routes/{topic}")


async def test_100k_topics_register_and_one_change_sends_only_that_topic(
    recorded: tuple[ServedApp, RequestSizes],
) -> None:
    nameserver, recorder = recorded
    # a page of topics is bounded work, but on a slow day (the machine 4x slower, helpers beside it) more than the
    # production 3 s; this test is about what is sent, not how fast
    settings = broker_settings(nameserver, nameserver_timeout_seconds=60.0)
    settings.store_dir.mkdir(parents=True, exist_ok=True)
    seed_topics(settings.metadata_url, TOPICS)

    async for broker in slow_start(create_app(settings)):
        for topic in ("t-000000", "t-050000", f"t-{TOPICS - 1:06d}"):
            assert (await route(nameserver, topic)).status_code == 200, topic
        registration = list(recorder.seen)
        assert len(registration) >= TOPICS // REGISTRATION_PAGE, "the table went in pages"
        assert max(size for _, _, size in registration) < 2 * 1024 * 1024, "no request near a body limit"

        recorder.seen.clear()
        created = await broker.put("/internal/topics/new-topic", json={"read_queues": 2, "write_queues": 2})
        assert created.status_code == 200, created.text
        ((method, path, size),) = recorder.seen
        assert (method, path) == ("POST", "/internal/brokers/broker-a/0/topics")
        assert size < SMALL, f"one topic changed, {size} bytes sent"
        assert (await route(nameserver, "new-topic")).json()["queues"][0]["write_queues"] == 2

        recorder.seen.clear()
        assert (await broker.delete("/internal/topics/t-000001")).status_code == 204
        assert [size < SMALL for _, _, size in recorder.seen] == [True]
        assert (await route(nameserver, "t-000001")).status_code == 404
        assert (await route(nameserver, "t-000002")).status_code == 200


async def test_a_change_sent_to_a_nameserver_that_lost_its_state_registers_everything_again() -> None:
    port = free_port()
    with serving(nameserver_app(NameserverSettings()), port) as first:
        app = create_app(broker_settings(first.address))  # heartbeats every 30 s: none within this test
        async for broker in in_process(app):
            await broker.put("/internal/topics/orders", json={"read_queues": 4, "write_queues": 4})
            first.stop()
            with serving(nameserver_app(NameserverSettings()), port) as restarted:
                await broker.put("/internal/topics/audit", json={"read_queues": 1, "write_queues": 1})

                assert (await route(restarted, "audit")).status_code == 200
                assert (await route(restarted, "orders")).status_code == 200, "the whole table went again"
