"""wrk as the bench's HTTP load: what its scripts count as an answered send, and what happens without wrk."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bench import wrk
from bench.loadgen import Tally
from bench.wrk import WrkMissing, wrk_binary, wrk_posts, wrk_sends


@pytest.fixture(scope="module")
def installed() -> None:
    """wrk, installed as the bench would (Debian's package as root); else the tests say why they cannot run."""
    try:
        wrk_binary()
    except WrkMissing as exc:
        pytest.skip(f"wrk cannot be had here, so its loads are not tested: {exc}")


class Server:
    """Answers sends as the gateway would, or as told; notes what it was sent."""

    def __init__(self, status: int = 201, answer: bytes = b'{"message_id":"m"}') -> None:
        self.status, self.answer = status, answer
        self.bodies: list[bytes] = []
        self.authorizations: set[str | None] = set()
        self.committed: list[str] = []
        self.halves = 0
        self.url = ""

    async def send(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.read())
        self.authorizations.add(request.headers.get("authorization"))
        return web.Response(body=self.answer, status=self.status, content_type="application/json")

    async def half(self, request: web.Request) -> web.Response:
        await request.read()
        self.halves += 1
        answer = {"transaction_id": f"broker-a:{self.halves:08d}", "message_id": "m", "stored_at": 1}
        return web.json_response(answer, status=201)

    async def commit(self, request: web.Request) -> web.Response:
        transaction_id = request.match_info["transaction_id"]
        self.committed.append(transaction_id)
        return web.json_response({"transaction_id": transaction_id, "message_id": "m", "outcome": "COMMIT"})


async def serving(server: Server) -> AsyncIterator[Server]:
    app = web.Application()
    app.router.add_post("/v1/topics/bench/messages", server.send)
    app.router.add_post("/v1/topics/bench/transactions", server.half)
    app.router.add_post("/v1/transactions/{transaction_id}/commit", server.commit)
    async with TestServer(app, host="127.0.0.1") as test_server:
        server.url = str(test_server.make_url("/v1/topics/bench"))
        yield server


@pytest.fixture
async def server(installed: None) -> AsyncIterator[Server]:
    async for running in serving(Server()):
        yield running


async def sends(url: str, kind: str, api_key: str | None = None) -> Tally:
    """wrk's sends for a second, in a thread: the test server answers on this event loop meanwhile."""
    return await asyncio.to_thread(wrk_sends, url, kind, 0.0, 1.0, api_key)


async def test_every_single_send_is_the_1_kib_json_the_python_load_sends_and_2xx_answers_count(server: Server) -> None:
    tally = await sends(f"{server.url}/messages", "single", api_key="ptk_0123456789ab_secret")

    assert tally.errors == 0
    assert tally.requests >= len(server.bodies) - 32 > 0  # wrk stops with up to a request a connection in flight
    assert orjson.loads(server.bodies[0]) == {"body": "x" * 1024, "tag": "t"}
    assert server.authorizations == {"Bearer ptk_0123456789ab_secret"}
    assert tally.succeeded_per_second > 0


async def test_a_refused_send_is_an_error_with_its_answer_not_a_send(installed: None) -> None:
    async for server in serving(Server(status=401, answer=b'{"title":"no key"}')):
        tally = await sends(f"{server.url}/messages", "single")

        assert tally.requests > 0
        assert tally.errors == tally.requests
        assert tally.succeeded_per_second == 0
        assert tally.first_error == '401 {"title":"no key"}'


async def test_a_batch_whose_entry_failed_is_an_error(installed: None) -> None:
    failed_entry = b'{"results":[{"message_id":"m"},{"error":{"title":"too big"}}]}'
    async for server in serving(Server(status=200, answer=failed_entry)):
        tally = await sends(f"{server.url}/messages", "batch")

        assert len(orjson.loads(server.bodies[0])["messages"]) == 32
        assert tally.messages_per_request == 32
        assert tally.errors == tally.requests > 0


async def test_an_answer_without_the_required_text_is_an_error(server: Server) -> None:
    tally = await asyncio.to_thread(
        wrk_posts, f"{server.url}/messages", b"{}", 1, 0.0, 1.0, require='"routed":true', headers=["X-A: b"]
    )

    assert tally.errors == tally.requests > 0
    assert tally.first_error == '201 {"message_id":"m"}'


async def test_every_half_message_is_committed_and_a_pair_counts_once_committed(server: Server) -> None:
    tally = await sends(f"{server.url}/transactions", "transaction")

    assert tally.errors == 0
    assert len(server.committed) - 32 <= tally.requests <= len(server.committed)  # commits in flight at the end
    assert tally.requests > 0
    assert len(set(server.committed)) == len(server.committed)  # each transaction committed once
    assert server.halves - len(server.committed) <= 32  # halves answered as the run ended are left open


def test_without_wrk_and_no_way_to_install_it_the_bench_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wrk, "_FOUND", [])
    monkeypatch.setenv("PATH", str(tmp_path))
    installer = tmp_path / "install.sh"
    installer.write_text('echo "install_debian_package: wrk is not installed: run apt-get install -y wrk" >&2\n')

    with pytest.raises(WrkMissing, match=r"wrk is not installed and could not be installed here"):
        wrk_binary(installer)
