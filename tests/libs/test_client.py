"""InternalClient against real peers on loopback: JSON, errors across the boundary, retries, timeouts."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from pydantic import SecretStr

from libs.errors import CorruptRecord, ServiceUnavailable, TopicNotFound, Unauthorized, UpstreamError
from libs.http.app import binary_body, service_app
from libs.http.client import ClientOptions, InternalClient
from libs.settings import ServiceSettings
from tests.support.serving import ServeApp, bound_socket

FAST_RETRIES = ClientOptions(retries=2, retry_backoff=0.001)


@contextlib.asynccontextmanager
async def no_resources(app: FastAPI) -> AsyncIterator[None]:
    yield


def downstream(*, token: str | None = None, unavailable_first: int = 0) -> tuple[FastAPI, Counter[str]]:
    """A Petrel service built with service_app; `seen` counts requests per path."""
    settings = ServiceSettings(internal_token=SecretStr(token) if token else None, events_enabled=False)
    app = service_app("downstream", settings, lifespan=no_resources)
    seen: Counter[str] = Counter()

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        seen[request.url.path] += 1
        return await call_next(request)

    @app.post("/echo")
    async def echo(request: Request) -> Any:
        return await request.json()

    @app.get("/params")
    async def params(request: Request) -> dict[str, str]:
        return dict(request.query_params)

    @app.get("/headers/{name}")
    async def header(name: str, request: Request) -> dict[str, str | None]:
        return {name: request.headers.get(name)}

    @app.post("/binary", openapi_extra=binary_body())
    async def binary(request: Request) -> Response:
        return Response(await request.body(), media_type="application/octet-stream", headers={"x-size": "5"})

    @app.delete("/nothing", status_code=204)
    async def nothing() -> None:
        return None

    @app.get("/topics/{topic}")
    async def topic(topic: str) -> None:
        raise TopicNotFound(f"topic {topic!r} does not exist")

    @app.get("/segments/0")
    async def segment() -> None:
        raise CorruptRecord(4096, "CRC mismatch")

    @app.get("/teapot")
    async def teapot() -> PlainTextResponse:
        return PlainTextResponse("short and stout", status_code=418)

    @app.api_route("/flaky", methods=["GET", "POST"])
    async def flaky(request: Request) -> dict[str, int]:
        if seen["/flaky"] <= unavailable_first:
            raise ServiceUnavailable("still warming up")
        return {"attempt": seen["/flaky"]}

    return app, seen


@contextlib.asynccontextmanager
async def raw_peer(on_connection: Callable[[asyncio.StreamReader], Awaitable[None]]) -> AsyncIterator[str]:
    """A TCP peer that speaks no HTTP: `on_connection` decides what each connection gets."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await on_connection(reader)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_json_body_and_answer_round_trip(serve_app: ServeApp) -> None:
    base = serve_app(downstream()[0])
    body = {"topic": "orders", "keys": ["k1", "ключ"], "delay_ms": None, "nested": {"n": 1.5}}
    async with InternalClient() as client:
        assert await client.json("POST", f"{base}/echo", body=body) == body


async def test_query_parameters_are_sent(serve_app: ServeApp) -> None:
    base = serve_app(downstream()[0])
    async with InternalClient() as client:
        assert await client.json("GET", f"{base}/params", params={"group": "g1", "max": 32}) == {
            "group": "g1",
            "max": "32",
        }


async def test_no_content_answer_is_none(serve_app: ServeApp) -> None:
    base = serve_app(downstream()[0])
    async with InternalClient() as client:
        assert await client.json("DELETE", f"{base}/nothing") is None


async def test_binary_body_and_answer_round_trip(serve_app: ServeApp) -> None:
    base = serve_app(downstream()[0])
    payload = bytes(range(256)) * 4
    async with InternalClient() as client:
        response = await client.binary("POST", f"{base}/binary", body=payload)
    assert (response.status, response.body, response.headers["x-size"]) == (200, payload, "5")


async def test_downstream_problem_comes_back_as_the_same_exception(serve_app: ServeApp) -> None:
    base = serve_app(downstream()[0])
    async with InternalClient() as client:
        with pytest.raises(TopicNotFound) as raised:
            await client.json("GET", f"{base}/topics/orders")
    assert raised.value.detail == "topic 'orders' does not exist"


async def test_downstream_problem_extensions_come_back_too(serve_app: ServeApp) -> None:
    base = serve_app(downstream()[0])
    async with InternalClient(FAST_RETRIES) as client:
        with pytest.raises(CorruptRecord) as raised:
            await client.json("GET", f"{base}/segments/0")
    assert (raised.value.detail, raised.value.extensions) == ("record at offset 4096: CRC mismatch", {"offset": 4096})


async def test_error_answer_that_is_not_a_problem_is_an_upstream_error(serve_app: ServeApp) -> None:
    base = serve_app(downstream()[0])
    async with InternalClient() as client:
        with pytest.raises(UpstreamError) as raised:
            await client.json("GET", f"{base}/teapot")
    assert raised.value.detail == f"GET {base}/teapot answered 418: short and stout"
    assert raised.value.extensions == {"upstream_status": 418}


async def test_refused_connection_is_service_unavailable() -> None:
    with bound_socket() as sock:  # bound but not listening: connections are refused
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/healthz"
        async with InternalClient(FAST_RETRIES) as client:
            with pytest.raises(ServiceUnavailable) as raised:
                await client.json("GET", url)
    assert raised.value.detail.startswith(f"GET {url} failed: ")


async def test_idempotent_get_is_retried_through_503s_until_it_succeeds(serve_app: ServeApp) -> None:
    app, seen = downstream(unavailable_first=2)
    base = serve_app(app)
    async with InternalClient(FAST_RETRIES) as client:
        assert await client.json("GET", f"{base}/flaky") == {"attempt": 3}
    assert seen["/flaky"] == 3


async def test_get_gives_up_after_its_retries(serve_app: ServeApp) -> None:
    app, seen = downstream(unavailable_first=10)
    base = serve_app(app)
    async with InternalClient(FAST_RETRIES) as client:
        with pytest.raises(ServiceUnavailable) as raised:
            await client.json("GET", f"{base}/flaky")
    assert raised.value.detail == "still warming up"
    assert seen["/flaky"] == 1 + FAST_RETRIES.retries


async def test_post_answered_503_is_not_retried(serve_app: ServeApp) -> None:
    app, seen = downstream(unavailable_first=1)
    base = serve_app(app)
    async with InternalClient(FAST_RETRIES) as client:
        with pytest.raises(ServiceUnavailable):
            await client.json("POST", f"{base}/flaky", body={})
    assert seen["/flaky"] == 1


async def test_post_declared_idempotent_is_retried(serve_app: ServeApp) -> None:
    app, seen = downstream(unavailable_first=1)
    base = serve_app(app)
    async with InternalClient(FAST_RETRIES) as client:
        assert await client.json("POST", f"{base}/flaky", body={}, idempotent=True) == {"attempt": 2}
    assert seen["/flaky"] == 2


def counting_hang_up(connections: list[int]) -> Callable[[asyncio.StreamReader], Awaitable[None]]:
    async def hang_up(reader: asyncio.StreamReader) -> None:
        connections.append(1)
        await reader.readuntil(b"\r\n\r\n")  # read the request head, then close without answering

    return hang_up


async def test_post_whose_connection_drops_is_sent_once() -> None:
    connections: list[int] = []
    async with raw_peer(counting_hang_up(connections)) as base, InternalClient(FAST_RETRIES) as client:
        with pytest.raises(ServiceUnavailable) as raised:
            await client.binary("POST", f"{base}/put", body=b"x")
    assert raised.value.detail.startswith(f"POST {base}/put failed: ")
    assert len(connections) == 1


async def test_get_whose_connection_drops_is_sent_at_most_one_plus_retries_times() -> None:
    connections: list[int] = []
    async with raw_peer(counting_hang_up(connections)) as base, InternalClient(FAST_RETRIES) as client:
        with pytest.raises(ServiceUnavailable):
            await client.binary("GET", f"{base}/segments/0")
    assert len(connections) <= 1 + FAST_RETRIES.retries, (
        f"the peer saw the GET {len(connections)} times with retries={FAST_RETRIES.retries}"
    )


async def test_internal_token_header_is_sent_when_configured(serve_app: ServeApp) -> None:
    base = serve_app(downstream()[0])
    url = f"{base}/headers/x-petrel-internal-token"
    async with InternalClient(ClientOptions(token="cluster-secret-of-thirty-two-bytes")) as client:
        assert await client.json("GET", url) == {"x-petrel-internal-token": "cluster-secret-of-thirty-two-bytes"}
    async with InternalClient() as client:
        assert await client.json("GET", url) == {"x-petrel-internal-token": None}


async def test_token_protected_peer_accepts_the_configured_token_only(serve_app: ServeApp) -> None:
    base = serve_app(downstream(token="cluster-secret-of-thirty-two-bytes")[0])
    async with InternalClient(ClientOptions(token="cluster-secret-of-thirty-two-bytes")) as client:
        assert await client.json("POST", f"{base}/echo", body=[1]) == [1]
    async with InternalClient(ClientOptions(token="a-stale-secret-of-thirty-two-bytes")) as client:
        with pytest.raises(Unauthorized):
            await client.json("POST", f"{base}/echo", body=[1])


async def test_per_call_timeout_is_service_unavailable(serve_app: ServeApp) -> None:
    async def never_answer(reader: asyncio.StreamReader) -> None:
        await reader.read()  # until the client gives up and closes the connection

    # The session's own timeout is long, so only the per-call one can end this call.
    options = ClientOptions(timeout=30, retries=0)
    async with raw_peer(never_answer) as base, InternalClient(options) as client:
        with pytest.raises(ServiceUnavailable) as raised:
            await client.json("GET", f"{base}/long-poll", timeout=0.2)
    assert raised.value.detail == f"GET {base}/long-poll failed: timed out"


async def test_calling_before_start_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match=r"^InternalClient.start\(\) was not called$"):
        await InternalClient().json("GET", "http://127.0.0.1:9/healthz")
