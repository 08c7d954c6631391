"""The latency load's paced sends: each answered send timed, a refused or unanswered one an error, never a silence."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bench.consumeload import LatencyRun, parse_latency_body

RATE = 200.0
SECONDS = 0.1


class Topic:
    """A local HTTP server taking sends to one topic, answering each with `status`."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.sequences: list[int] = []
        self.content_types: set[str] = set()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        message = orjson.loads(await request.read())
        self.sequences.append(parse_latency_body(message["body"])[0])
        self.content_types.add(request.headers.get("content-type", ""))
        return web.json_response({"message_id": "m"}, status=self.status)


@pytest.fixture
async def topic(request: pytest.FixtureRequest) -> AsyncIterator[Topic]:
    topic = Topic(getattr(request, "param", 201))
    app = web.Application()
    app.router.add_post("/v1/topics/latency/messages", topic.handle)
    async with TestServer(app, host="127.0.0.1") as server:
        topic.url = str(server.make_url("")).rstrip("/")
        yield topic


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_every_paced_send_is_posted_as_json_and_its_round_trip_measured(topic: Topic) -> None:
    measured = await LatencyRun(topic.url, "latency", RATE, 0.0, SECONDS, consumers=0).round_trips_only()

    assert measured.sent == int(RATE * SECONDS)
    assert (measured.received, measured.lost, measured.errors) == (measured.sent, 0, 0)
    assert all(ms > 0 for ms in measured.ms)
    assert sorted(topic.sequences) == list(range(measured.sent))
    assert topic.content_types == {"application/json"}


@pytest.mark.parametrize("topic", [503], indirect=True)
async def test_a_refused_send_is_an_error_and_not_measured(topic: Topic) -> None:
    measured = await LatencyRun(topic.url, "latency", RATE, 0.0, SECONDS, consumers=0).round_trips_only()

    assert measured.received == 0
    assert measured.errors == measured.sent > 0
    assert measured.first_error is not None
    assert measured.first_error.startswith("send: 503")


async def test_a_send_that_gets_no_answer_is_an_error_not_a_silent_loss() -> None:
    url = f"http://127.0.0.1:{closed_port()}"

    measured = await LatencyRun(url, "latency", RATE, 0.0, SECONDS, consumers=0).round_trips_only()

    assert measured.received == 0
    assert measured.errors == measured.sent > 0
    assert measured.first_error is not None
    assert "cannot connect" in measured.first_error
