"""Calling ASGI apps in this process as if they were served: the internal client's in-process transport.

`AsgiTransport(apps)` routes a call to `http://host:port/...` to the app registered
under "host:port"; an address with no app goes to the `fallback` transport when there
is one (real peers on loopback beside in-process ones), else is a connection refused.
Tests use it to run brokers in-process; colocated mode (deploy.colocated) uses it for
the gateway's calls to the broker in its own process. `running(app)` runs an app's
lifespan and gives the app to register: each request then sees the lifespan's state,
as under a server (`stateful(app, state)` does the same for a state a server's
lifespan holds).

    apps: dict[str, ASGIApp] = {}
    async with running(create_app(settings)) as app:
        apps[settings.address] = app
        async with InternalClient(transport=AsgiTransport(apps)) as client: ...

The mapping is read at each call: an app registered, replaced or removed later
(a broker restarted, stopped) is seen by the next call.

A call is one ASGI call (`call_app`): the scope built from the call, one `receive`
giving the whole body, the answer collected from `send`. httpx's `ASGITransport`
did the same through httpx's request and response models: about 190 us of CPU a call
against 14 us here (a 1 KiB POST to a bare app through InternalClient), more than the
TCP hop it replaces in colocated mode.
After the body, `receive` waits until the answer is whole and then says the client
disconnected, as a server says it once a response is sent. An app's unhandled error is
logged; before it answered it is its 500 (as a server answers it), after a whole answer
that answer, and in the middle of one a lost connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, MutableMapping
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from libs.http.transport import BinaryResponse, Call, ConnectFailed, ConnectionLost, Headers, TimedOut, Transport

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 5.0
"""Of a call that names no timeout of its own (InternalClient always names one)."""
ASGI_VERSION = {"version": "3.0", "spec_version": "2.4"}
CLIENT = ("127.0.0.1", 0)
"""The caller an in-process call comes from: this machine."""


class AsgiTransport:
    def __init__(
        self, apps: Mapping[str, ASGIApp], *, fallback: Transport | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self.apps = apps
        self.fallback = fallback
        self.timeout = timeout

    async def start(self) -> None:
        if self.fallback is not None:
            await self.fallback.start()

    async def close(self) -> None:
        if self.fallback is not None:
            await self.fallback.close()

    async def send(self, call: Call) -> BinaryResponse:
        parts = urlsplit(call.url)
        app = self.apps.get(parts.netloc)
        if app is None:
            if self.fallback is not None:
                return await self.fallback.send(call)
            raise ConnectFailed(f"Cannot connect to host {parts.netloc}: no app there")
        try:
            async with asyncio.timeout(call.timeout or self.timeout):
                return await call_app(app, call, parts.netloc, parts.path, parts.query)
        except TimeoutError as exc:
            raise TimedOut from exc


async def call_app(app: ASGIApp, call: Call, netloc: str, path: str, query: str) -> BinaryResponse:
    """The app's answer to `call` (addressed to `netloc`, at `path`?`query`, as `urlsplit` gives them)."""
    answer = _Answer()
    try:
        await app(_scope(call, netloc, path or "/", query), answer.receive(call.body or b""), answer.send)
    except Exception as exc:
        log.exception("the app failed on %s %s", call.method, call.url)
        if answer.status and not answer.whole:
            raise ConnectionLost(f"the app failed while answering: {exc!r}") from exc
        if not answer.status:
            return BinaryResponse(500, b"Internal Server Error", Headers({"content-type": "text/plain; charset=utf-8"}))
        # answered, then raised (Starlette's error middleware sends its 500, then raises for the server to log)
    finally:
        answer.finish()
    if not answer.whole:
        raise ConnectionLost("the app returned before its answer was whole")
    body = answer.body[0] if len(answer.body) == 1 else b"".join(answer.body)
    return BinaryResponse(answer.status, body, Headers(answer.headers))


def _scope(call: Call, netloc: str, path: str, query: str) -> Scope:
    if call.params:
        extra = urlencode(call.params)
        query = f"{query}&{extra}" if query else extra
    headers = [(b"host", netloc.encode("latin-1"))]
    headers.extend((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in call.headers.items())
    if call.body is not None or call.method in {"POST", "PUT", "PATCH"}:
        headers.append((b"content-length", str(len(call.body or b"")).encode("latin-1")))
    host, _, port = netloc.rpartition(":")
    return {
        "type": "http",
        "asgi": ASGI_VERSION,
        "http_version": "1.1",
        "method": call.method,
        "scheme": "http",
        "path": unquote(path),
        "raw_path": path.encode("latin-1"),
        "query_string": query.encode("latin-1"),
        "root_path": "",
        "headers": headers,
        "client": CLIENT,
        "server": (host, int(port or 80)),
    }


class _Answer:
    """What the app sends back, and what it is told when it reads more than the body."""

    __slots__ = ("_done", "body", "headers", "status", "whole")

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.whole = False
        self._done: asyncio.Future[None] | None = None

    def receive(self, body: bytes) -> Receive:
        given = False

        async def receive() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            if self._done is None:
                self._done = asyncio.get_running_loop().create_future()
            await self._done  # the caller is there until the answer is whole (a long poll watches for it to leave)
            return {"type": "http.disconnect"}

        return receive

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            self.headers = {
                name.decode("latin-1").lower(): value.decode("latin-1") for name, value in message.get("headers", ())
            }
        elif kind == "http.response.body":
            chunk = message.get("body", b"")
            if chunk:
                self.body.append(chunk)
            if not message.get("more_body", False):
                self.whole = True

    def finish(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(None)


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


def stateful(app: ASGIApp, state: MutableMapping[str, Any]) -> ASGIApp:
    """`app` as a server with that lifespan state serves it: each request sees a copy of `state`."""
    return _WithState(app, state)


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
