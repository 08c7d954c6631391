"""Calling ASGI apps in this process as if they were served: the internal client's transport for tests.

`AsgiTransport(apps)` routes a call to `http://host:port/...` to the app registered
under "host:port" (httpx's `ASGITransport` does the ASGI call); an address with no
app goes to the `fallback` transport when there is one (real peers on loopback
beside in-process ones), else is a connection refused. `running(app)` runs an app's lifespan and gives the
app to register: each request then sees the lifespan's state, as under a server.

    apps: dict[str, ASGIApp] = {}
    async with running(create_app(settings)) as app:
        apps[settings.address] = app
        async with InternalClient(transport=AsgiTransport(apps)) as client: ...

The mapping is read at each call: an app registered, replaced or removed later
(a broker restarted, stopped) is seen by the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from libs.http.transport import BinaryResponse, Call, ConnectFailed, TimedOut, Transport

DEFAULT_TIMEOUT = 5.0
"""Of a call that names no timeout of its own (InternalClient always names one)."""


class AsgiTransport:
    def __init__(
        self, apps: Mapping[str, ASGIApp], *, fallback: Transport | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self.apps = apps
        self.fallback = fallback
        self.timeout = timeout
        self._clients: dict[int, httpx.AsyncClient] = {}

    async def start(self) -> None:
        if self.fallback is not None:
            await self.fallback.start()

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
        if self.fallback is not None:
            await self.fallback.close()

    async def send(self, call: Call) -> BinaryResponse:
        address = urlsplit(call.url).netloc
        app = self.apps.get(address)
        if app is None:
            if self.fallback is not None:
                return await self.fallback.send(call)
            raise ConnectFailed(f"Cannot connect to host {address}: no app there")
        try:
            async with asyncio.timeout(call.timeout or self.timeout):
                response = await self._client(app).request(
                    call.method, call.url, content=call.body, params=call.params, headers=dict(call.headers)
                )
        except TimeoutError as exc:
            raise TimedOut from exc
        return BinaryResponse(response.status_code, response.content, response.headers)

    def _client(self, app: ASGIApp) -> httpx.AsyncClient:
        client = self._clients.get(id(app))
        if client is None:
            # raise_app_exceptions=False: an app's unhandled error is its 500 answer, as a server gives it
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            client = self._clients[id(app)] = httpx.AsyncClient(transport=transport, trust_env=False)
        return client


@contextlib.asynccontextmanager
async def running(app: ASGIApp) -> AsyncIterator[ASGIApp]:
    """The app with its lifespan started (stopped when the block ends); its requests see the lifespan's state."""
    state: dict[str, Any] = {}
    lifespan = _Lifespan(app, state)
    await lifespan.startup()
    try:
        yield _WithState(app, state)
    finally:
        await lifespan.shutdown()


class _WithState:
    def __init__(self, app: ASGIApp, state: MutableMapping[str, Any]) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in {"http", "websocket"}:
            scope = {**scope, "state": dict(self.state)}
        await self.app(scope, receive, send)


class _Lifespan:
    """The ASGI lifespan protocol, as a server speaks it: startup before any request, shutdown after."""

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self.app = app
        self.state = state
        self._to_app: asyncio.Queue[Message] = asyncio.Queue()
        self._from_app: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Future[None] | None = None

    async def startup(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        self._task = asyncio.ensure_future(self.app(scope, self._to_app.get, self._from_app.put))
        try:
            await self._exchange("startup")
        except BaseException:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            raise

    async def shutdown(self) -> None:
        try:
            await self._exchange("shutdown")
        finally:
            assert self._task is not None
            await self._task

    async def _exchange(self, step: str) -> None:
        await self._to_app.put({"type": f"lifespan.{step}"})
        answer = asyncio.ensure_future(self._from_app.get())
        assert self._task is not None
        waits: set[asyncio.Future[Any]] = {answer, self._task}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if not answer.done():
            answer.cancel()
            self._task.result()  # the app's own exception, if it raised
            raise RuntimeError(f"the app ended during its lifespan {step}")
        message = answer.result()
        if message["type"] == f"lifespan.{step}.failed":
            raise RuntimeError(f"the app's lifespan {step} failed: {message.get('message', '')}")
