"""LeanTransport: internal calls over pooled HTTP/1.1 keep-alive connections, one asyncio protocol each.

The internal client's calls go from one Petrel process to another on a trusted network:
plain HTTP/1.1, a known peer, small requests. aiohttp's client does far more per request
(cookie jars, redirects, tracing hooks, multidicts, payload classes, a task per response
body) and cost the gateway about as much CPU per call as the whole of a send's own work
(profiles of `petrel bench gateway`). Here a call is one `write` of the request (line,
headers and body together) and the answer is read by httptools (the C parser uvicorn
uses) in the protocol's `data_received`; no task is made per call.

What it keeps of a real client:
- pooled keep-alive connections per peer (`max_connections` for ordinary calls, an
  unbounded pool for long polls, `waiting=True`), each carrying
  one call at a time; an idle connection is dropped after `IDLE_SECONDS`, before the
  servers' keep-alive (75 s, libs.http.serve) lets it go, so a call never races a close;
- connect and total timeouts; an answer framed by Content-Length, chunked or close;
- the transport errors of `libs.http.transport`: ConnectFailed when the peer was never
  reached, ConnectionLost when the connection broke after the request went out,
  TimedOut; an idempotent call on a reused connection that the peer had closed is sent
  once more on a new one (nothing of it can have been read).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Final, cast
from urllib.parse import urlencode, urlsplit

import httptools

from libs.http.transport import BinaryResponse, Call, ConnectFailed, ConnectionLost, Headers, TimedOut

IDLE_SECONDS: Final = 30.0
IDEMPOTENT: Final = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


class _Connection(asyncio.Protocol):
    """One keep-alive connection: writes a request, parses its answer, then waits for the next."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.reusable = False
        self.idle_since = 0.0
        self.got_bytes = False
        self._answer: asyncio.Future[BinaryResponse] | None = None
        self._headers: dict[str, str] = {}
        self._headers_done = False
        self._body: list[bytes] = []

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ConnectionLost("the peer switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(ConnectionLost(f"the peer's answer is not HTTP: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._headers_done and not {"content-length", "transfer-encoding"} & self._headers.keys():
            self.on_message_complete()  # an answer framed by the close itself is whole now
        self._fail(ConnectionLost(f"the connection closed before the answer was whole{f': {exc}' if exc else ''}"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._headers_done = True

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        answer = self._answer
        self.reusable = self.parser.should_keep_alive() and not self.closed
        if answer is not None and not answer.done():
            status = self.parser.get_status_code()
            answer.set_result(BinaryResponse(status, b"".join(self._body), Headers(self._headers)))

    def send(self, request: bytes) -> asyncio.Future[BinaryResponse]:
        assert self.transport is not None
        self._answer = asyncio.get_running_loop().create_future()
        self._headers = {}
        self._headers_done = False
        self._body = []
        self.got_bytes = False
        self.reusable = False
        self.transport.write(request)
        return self._answer

    def closing(self) -> bool:
        """Closed or on its way (a write would be dropped, and its answer never come)."""
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, error: Exception) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(error)
        self.close()


@dataclass(slots=True)
class _Pool:
    """The connections to one peer: idle ones (most recent last) and how many are open."""

    limit: int
    """0: no limit"""
    idle: deque[_Connection] = field(default_factory=deque)
    open: int = 0
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)
    """calls waiting for a connection while `limit` are open"""

    def wake_one(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


class LeanTransport:
    def __init__(self, *, connect_timeout: float, timeout: float, max_connections: int) -> None:
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.max_connections = max_connections
        self._pools: dict[tuple[str, int, bool], _Pool] = {}
        self._started = False

    async def start(self) -> None:
        self._started = True

    async def close(self) -> None:
        self._started = False
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            while pool.idle:
                pool.idle.pop().close()

    async def send(self, call: Call) -> BinaryResponse:
        if not self._started:
            raise RuntimeError("InternalClient.start() was not called")
        parts = urlsplit(call.url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        request = _request(call, parts.path or "/", parts.query, parts.netloc)
        pool = self._pool(host, port, call.waiting)
        timeout = call.timeout or self.timeout
        try:
            async with asyncio.timeout(timeout):
                return await self._exchange(pool, host, port, request, call.method in IDEMPOTENT)
        except TimeoutError as exc:
            raise TimedOut from exc

    def _pool(self, host: str, port: int, waiting: bool) -> _Pool:
        key = (host, port, waiting)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _Pool(0 if waiting else self.max_connections)
        return pool

    async def _exchange(self, pool: _Pool, host: str, port: int, request: bytes, idempotent: bool) -> BinaryResponse:
        connection, reused = await self._acquire(pool, host, port)
        try:
            answer = await connection.send(request)
        except ConnectionLost:
            self._release(pool, connection)
            if not (reused and idempotent and not connection.got_bytes):
                raise
            connection, _ = await self._acquire(pool, host, port, fresh=True)  # the peer had closed it: once more
            try:
                answer = await connection.send(request)
            except BaseException:
                self._release(pool, connection)
                raise
        except BaseException:
            self._release(pool, connection)  # cancelled or timed out mid-answer: the connection is not reusable
            raise
        self._release(pool, connection)
        return answer

    async def _acquire(self, pool: _Pool, host: str, port: int, fresh: bool = False) -> tuple[_Connection, bool]:
        now = time.monotonic()
        while pool.idle and not fresh:
            connection = pool.idle.pop()
            if not connection.closed and not connection.closing() and now - connection.idle_since < IDLE_SECONDS:
                return connection, True
            pool.open -= 1
            connection.close()
        if pool.limit and pool.open >= pool.limit:
            waiter = asyncio.get_running_loop().create_future()
            pool.waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    pool.wake_one()  # woken, then cancelled: the turn goes to the next one
                raise
            return await self._acquire(pool, host, port, fresh)
        pool.open += 1
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, protocol = await asyncio.get_running_loop().create_connection(_Connection, host, port)
        except (OSError, TimeoutError) as exc:
            pool.open -= 1
            pool.wake_one()
            raise ConnectFailed(f"cannot connect to {host}:{port}: {exc or type(exc).__name__}") from exc
        except BaseException:
            pool.open -= 1
            pool.wake_one()
            raise
        return protocol, False

    def _release(self, pool: _Pool, connection: _Connection) -> None:
        if connection.reusable and not connection.closed:
            connection.idle_since = time.monotonic()
            pool.idle.append(connection)
        else:
            pool.open -= 1
            connection.close()
        pool.wake_one()


def _request(call: Call, path: str, query: str, netloc: str) -> bytes:
    """The request as it goes on the wire: line, headers and body in one buffer."""
    if call.params:
        extra = urlencode(call.params)
        query = f"{query}&{extra}" if query else extra
    target = f"{path}?{query}" if query else path
    lines = [f"{call.method} {target} HTTP/1.1\r\nhost: {netloc}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in call.headers.items())
    body = call.body or b""
    if call.body is not None or call.method in {"POST", "PUT", "PATCH"}:
        lines.append(f"content-length: {len(body)}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1") + body
