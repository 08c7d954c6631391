"""How the internal client's calls travel: a `Transport` sends one request and returns the raw answer.

As httpx separates its client from its transports (`HTTPTransport`, `ASGITransport`,
`MockTransport`), `InternalClient` keeps the retries, the token header and the error
mapping, and hands each attempt to a transport:

- `LeanTransport` (production, the default; in `libs.http.lean_transport`): pooled keep-alive
  HTTP/1.1 connections over TCP, one asyncio protocol each.
- `AiohttpTransport`: the same over aiohttp's client (the reference the lean one is measured against).
- `AsgiTransport` (tests, in `libs.http.asgi`): calls ASGI apps in this process by address.

Exceptions a transport raises (anything else is a bug)::

    TransportError           the call got no answer
    ├── ConnectFailed        the peer was never reached: safe to send again
    ├── ConnectionLost       the connection broke mid-call: the peer may have acted
    └── TimedOut             no answer in time: the peer may have acted
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from libs import jsonutil


class TransportError(Exception):
    """The call got no answer (see the subclasses for whether the peer may have acted on it)."""

    request_sent = True


class ConnectFailed(TransportError):
    request_sent = False


class ConnectionLost(TransportError):
    pass


class TimedOut(TransportError):
    def __init__(self) -> None:
        super().__init__("timed out")


@dataclass(frozen=True, slots=True)
class BinaryResponse:
    status: int
    body: bytes
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Call:
    """One attempt of an internal call, as a transport sends it."""

    method: str
    url: str
    body: bytes | None
    headers: Mapping[str, str]
    params: Mapping[str, str | int] | None = None
    timeout: float | None = None
    """This call's total timeout; None: the transport's default."""
    waiting: bool = False
    """The peer may hold the call (a long poll): it must not take a connection other calls need."""


class Transport(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def send(self, call: Call) -> BinaryResponse:
        """The peer's answer, whatever its status; a TransportError when none came."""
        ...


class AiohttpTransport:
    """Two pooled keep-alive sessions: one for ordinary calls, one for long polls (`waiting`).

    A call the peer may hold for seconds never takes a connection that a send, an ack or
    an admin call needs. The long-poll pool has no per-host limit of its own; whoever opens
    long polls bounds how many wait at once (the gateway's LongPollGate). aiohttp itself
    re-sends an idempotent request once when a pooled keep-alive connection turns out to
    be closed.
    """

    def __init__(self, *, connect_timeout: float, timeout: float, max_connections: int) -> None:
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._waiting: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = self._open(self.max_connections)
        self._waiting = self._open(0)  # 0: no limit; the long polls' callers bound them

    def _open(self, limit: int) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, keepalive_timeout=30),
            timeout=aiohttp.ClientTimeout(total=self.timeout, connect=self.connect_timeout),
            json_serialize=lambda v: jsonutil.dumps(v).decode(),
        )

    async def close(self) -> None:
        for session in (self._session, self._waiting):
            if session is not None:
                await session.close()
        self._session = self._waiting = None

    async def send(self, call: Call) -> BinaryResponse:
        session = self._waiting if call.waiting else self._session
        if session is None:
            raise RuntimeError("InternalClient.start() was not called")
        timeout = aiohttp.ClientTimeout(total=call.timeout, connect=self.connect_timeout) if call.timeout else None
        try:
            async with session.request(
                call.method,
                call.url,
                data=call.body,
                params=call.params,
                headers=dict(call.headers),
                timeout=timeout or aiohttp.helpers.sentinel,
            ) as response:
                return BinaryResponse(response.status, await response.read(), response.headers)
        except aiohttp.ClientConnectorError as exc:
            raise ConnectFailed(_describe(exc)) from exc
        except TimeoutError as exc:  # aiohttp's own timeouts are TimeoutErrors too
            raise TimedOut from exc
        except aiohttp.ClientConnectionError as exc:
            raise ConnectionLost(_describe(exc)) from exc


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
