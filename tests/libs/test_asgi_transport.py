"""InternalClient over AsgiTransport: apps called in-process by address, with their lifespans, as if served."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI, Request
from pydantic import SecretStr
from starlette.types import ASGIApp

from libs.errors import PetrelError, ServiceUnavailable, TopicNotFound
from libs.http.app import service_app
from libs.http.asgi import AsgiTransport, running
from libs.http.client import ClientOptions, InternalClient
from libs.http.disconnect import client_gone
from libs.http.lean_transport import LeanTransport
from libs.settings import ServiceSettings
from tests.support.serving import serving

ADDRESS = "127.0.0.1:7001"


def peer(events: list[str], token: str | None = None) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, object]]:
        events.append("started")
        yield {"greeting": "hello"}
        events.append("stopped")

    settings = ServiceSettings(internal_token=SecretStr(token) if token else None, events_enabled=False)
    app = service_app("peer", settings, lifespan=lifespan)

    @app.post("/echo")
    async def echo(request: Request) -> object:
        return {"body": await request.json(), "greeting": request.state.greeting, "q": request.query_params.get("q")}

    @app.get("/topics/{topic}")
    async def topic(topic: str) -> None:
        raise TopicNotFound(f"topic {topic!r} does not exist")

    @app.get("/fails")
    async def fails() -> None:
        raise RuntimeError("a bug")

    @app.get("/watches")
    async def watches(request: Request) -> object:
        async with client_gone(request) as gone:
            await asyncio.sleep(0)  # the watcher reads what the connection says after the body
            return {"gone": gone.done()}

    @app.get("/forever")
    async def forever() -> None:
        await asyncio.Event().wait()

    return app


async def test_a_call_reaches_the_app_at_its_address_and_sees_its_lifespan_state() -> None:
    events: list[str] = []
    async with running(peer(events)) as app:
        assert events == ["started"], "the lifespan did not start before the first call"
        async with InternalClient(transport=AsgiTransport({ADDRESS: app})) as client:
            answer = await client.json("POST", f"http://{ADDRESS}/echo", body={"n": 1}, params={"q": "x"})
    assert answer == {"body": {"n": 1}, "greeting": "hello", "q": "x"}
    assert events == ["started", "stopped"], "the lifespan did not stop when the block ended"


async def test_a_peers_problem_comes_back_as_its_error() -> None:
    async with running(peer([])) as app, InternalClient(transport=AsgiTransport({ADDRESS: app})) as client:
        with pytest.raises(TopicNotFound, match="topic 'orders' does not exist"):
            await client.json("GET", f"http://{ADDRESS}/topics/orders")


async def test_the_internal_token_travels_with_each_call() -> None:
    async with running(peer([], token="cluster-secret-of-thirty-two-bytes")) as app:
        apps: dict[str, ASGIApp] = {ADDRESS: app}
        async with InternalClient(
            ClientOptions(token="cluster-secret-of-thirty-two-bytes"), AsgiTransport(apps)
        ) as client:
            assert (await client.json("POST", f"http://{ADDRESS}/echo", body=1))["body"] == 1


async def test_an_address_without_an_app_is_a_connection_refused() -> None:
    options = ClientOptions(retries=1, retry_backoff=0.001)
    async with InternalClient(options, AsgiTransport({})) as client:
        with pytest.raises(ServiceUnavailable, match="no app there") as caught:
            await client.json("GET", f"http://{ADDRESS}/healthz")
    assert caught.value.extensions["request_sent"] is False


async def test_an_app_removed_from_the_map_is_gone_for_the_next_call() -> None:
    async with running(peer([])) as app:
        apps: dict[str, ASGIApp] = {ADDRESS: app}
        async with InternalClient(transport=AsgiTransport(apps)) as client:
            assert (await client.json("GET", f"http://{ADDRESS}/healthz"))["status"] == "ok"
            del apps[ADDRESS]
            with pytest.raises(ServiceUnavailable):
                await client.json("GET", f"http://{ADDRESS}/healthz")


async def test_a_call_past_its_timeout_times_out_and_may_have_been_acted_on() -> None:
    async with running(peer([])) as app, InternalClient(transport=AsgiTransport({ADDRESS: app})) as client:
        with pytest.raises(ServiceUnavailable, match="timed out") as caught:
            await client.json("GET", f"http://{ADDRESS}/forever", timeout=0.05)
    assert caught.value.extensions["request_sent"] is True


async def test_an_address_without_an_app_goes_to_the_fallback_transport() -> None:
    fallback = LeanTransport(connect_timeout=1.0, timeout=5.0, max_connections=4)
    with serving(peer([])) as served:
        async with (
            running(peer([])) as app,
            InternalClient(transport=AsgiTransport({ADDRESS: app}, fallback=fallback)) as client,
        ):
            in_process = await client.json("POST", f"http://{ADDRESS}/echo", body=1)
            over_tcp = await client.json("POST", f"{served.url}/echo", body=2)
    assert (in_process["body"], over_tcp["body"]) == (1, 2)


async def test_an_apps_unhandled_error_is_its_500_as_a_server_answers_it() -> None:
    async with running(peer([])) as app, InternalClient(transport=AsgiTransport({ADDRESS: app})) as client:
        with pytest.raises(PetrelError, match="an unexpected error occurred") as caught:
            await client.json("GET", f"http://{ADDRESS}/fails")
    assert not isinstance(caught.value, ServiceUnavailable), "the app's answer was taken for a lost connection"
    assert caught.value.status == 500


async def test_a_handler_watching_for_its_client_to_leave_is_not_told_so_while_the_call_waits() -> None:
    async with running(peer([])) as app, InternalClient(transport=AsgiTransport({ADDRESS: app})) as client:
        assert await client.json("GET", f"http://{ADDRESS}/watches") == {"gone": False}
