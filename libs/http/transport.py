"""How the internal client's calls travel: a `Transport` sends one request and returns the raw answer.

As httpx separates its client from its transports (`HTTPTransport`, `ASGITransport`,
`MockTransport`), `InternalClient` keeps the retries, the token header and the error
mapping, and hands each attempt to a transport:

- `LeanTransport` (production, the default; in `libs.http.lean_transport`): pooled keep-alive
  HTTP/1.1 connections over TCP, one asyncio protocol each.
- `AsgiTransport` (tests, and colocated mode's calls to its own broker; in `libs.http.asgi`): calls ASGI apps in
  this process by address.

Exceptions a transport raises (anything else is a bug)::

    TransportError           the call got no answer
    ├── ConnectFailed        the peer was never reached: safe to send again
    ├── ConnectionLost       the connection broke mid-call: the peer may have acted
    └── TimedOut             no answer in time: the peer may have acted
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol


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


class Headers(Mapping[str, str]):
    """An answer's headers, looked up without regard to case (names are kept lowercase)."""

    __slots__ = ("_items",)

    def __init__(self, items: dict[str, str]) -> None:
        self._items = items

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return self._items.get(name.lower(), default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


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
