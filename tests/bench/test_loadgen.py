"""The load generator's requests: the API key it is given rides on every one, and a refusal is not a send."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bench.loadgen import drive

Answer = Callable[[web.Request], web.Response]


class Receiver:
    """A local HTTP server that notes each request's Authorization header and answers as `answer` says."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.authorizations: list[str | None] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.authorizations.append(request.headers.get("authorization"))
        return self.answer(request)


@pytest.fixture
async def receiver(request: pytest.FixtureRequest) -> AsyncIterator[Receiver]:
    status: int = getattr(request, "param", 201)
    receiver = Receiver(lambda _: web.json_response({"message_id": "m"}, status=status))
    app = web.Application()
    app.router.add_post("/v1/topics/bench/messages", receiver.handle)
    async with TestServer(app, host="127.0.0.1") as server:
        receiver.url = str(server.make_url("/v1/topics/bench/messages"))
        yield receiver


async def test_with_a_key_every_send_carries_it_as_a_bearer_token_and_201s_count(receiver: Receiver) -> None:
    tally = await drive(receiver.url, "single", warmup=0.0, seconds=0.1, api_key="ptk_0123456789ab_secret")

    assert tally.requests > 0
    assert tally.errors == 0
    assert tally.succeeded_per_second > 0
    assert set(receiver.authorizations) == {"Bearer ptk_0123456789ab_secret"}


async def test_without_a_key_no_authorization_header_is_sent(receiver: Receiver) -> None:
    tally = await drive(receiver.url, "single", warmup=0.0, seconds=0.1)

    assert tally.requests > 0
    assert set(receiver.authorizations) == {None}


@pytest.mark.parametrize("receiver", [401], indirect=True)
async def test_a_refused_send_is_an_error_not_a_send(receiver: Receiver) -> None:
    tally = await drive(receiver.url, "single", warmup=0.0, seconds=0.1, api_key="ptk_0123456789ab_wrong")

    assert tally.requests > 0
    assert tally.errors == tally.requests
    assert tally.succeeded_per_second == 0
    assert tally.first_error is not None
    assert tally.first_error.startswith("401 ")
