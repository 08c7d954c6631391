"""Limits on a connection, before any request reaches the app: header size, header time, connection count.

uvicorn's httptools protocol buffers a request's headers without a bound, waits
for them without a deadline, and accepts every connection. `limited_protocol`
gives `libs.http.serve` a subclass that, per service process:

- answers 431 (problem+json, then closes) once a request's line and headers pass
  `max_header_bytes`, having fed the parser no more than that. The count starts
  where a request starts; for a pipelined request, bytes that came in the same
  read as the end of the one before are not counted (at most one read, 256 KiB).
- closes a connection whose request headers are not complete within
  `header_timeout_seconds` of connecting, or of the request's first bytes: with a
  408 when some of a request had come, without a word when nothing had. A
  connection idle between requests is the keep-alive timeout's, not this one's.
- closes a connection at once, before reading it, when `max_connections` are
  open. uvicorn's own `limit_concurrency` is not enough: it answers 503 only once
  a request's headers are complete, so connections that never finish them
  (slowloris) still pile up.

An answer that closes the connection is followed by a lingering close: our side
is shut for writing and what the client still sends is read and dropped for a
moment, so that its unread bytes do not make the kernel reset the connection
and destroy the answer before the client reads it.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from libs.errors import PetrelError, RequestHeaderTimeout, RequestHeaderTooLarge
from libs.http.one_write import HeadWithBody
from libs.problem import error_response
from libs.settings import ServiceSettings

LINGER_SECONDS = 2.0
"""How long a refused connection's further bytes are read and dropped before it is closed outright."""

Refused = Callable[[str], None]
"""Told the reason each time a connection is refused or closed by a limit (for a metric)."""


class Reason(enum.StrEnum):
    TOO_MANY_CONNECTIONS = "too_many_connections"
    HEADER_TOO_LARGE = "header_too_large"
    HEADER_TIMEOUT = "header_timeout"


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_header_bytes: int
    header_timeout_seconds: float
    max_connections: int

    @classmethod
    def of(cls, settings: ServiceSettings) -> ConnectionLimits:
        return cls(settings.max_header_bytes, settings.header_timeout_seconds, settings.max_connections)


class _Phase(enum.Enum):
    IDLE = enum.auto()  # no byte of the next request yet
    HEADERS = enum.auto()  # its line and headers are coming
    BODY = enum.auto()  # its headers are complete, the app has it


def _ignore(reason: str) -> None:
    pass


def limited_protocol(limits: ConnectionLimits, refused: Refused = _ignore) -> type[HttpToolsProtocol]:
    """The protocol class to pass as uvicorn's `http=`, bound to these limits."""
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), {"limits": limits, "refused": refused})


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    limits: ClassVar[ConnectionLimits]
    refused: ClassVar[Refused]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._phase = _Phase.IDLE
        self._header_bytes = 0
        self._header_timer: asyncio.TimerHandle | None = None
        self._lingering = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self.connections.discard(self)
            transport.close()
            type(self).refused(Reason.TOO_MANY_CONNECTIONS)
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        while data and not self.transport.is_closing():
            if self._phase is _Phase.BODY:
                super().data_received(data)
                break
            data = self._receive_head(data)
        if self._phase is _Phase.HEADERS and self._header_timer is None and not self.transport.is_closing():
            self._arm_header_timer()

    def _receive_head(self, data: bytes) -> bytes:
        """Feeds the parser up to the header bound; answers what is left for the next request, if any."""
        room = self.limits.max_header_bytes - self._header_bytes
        head, rest = (data, b"") if len(data) <= room else (data[:room], data[room:])
        self._header_bytes += len(head)
        if head:
            super().data_received(head)
        over = self._header_bytes >= self.limits.max_header_bytes and rest
        if over and self._phase is not _Phase.BODY and not self.transport.is_closing():
            limit = self.limits.max_header_bytes
            self._refuse(RequestHeaderTooLarge(f"the request line and headers pass {limit} bytes", limit=limit))
            type(self).refused(Reason.HEADER_TOO_LARGE)
            return b""
        return rest

    # Parser callbacks: where a request's headers start and end.
    def on_message_begin(self) -> None:
        self._phase = _Phase.HEADERS
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._phase = _Phase.BODY
        self._cancel_header_timer()
        super().on_headers_complete()
        if self.cycle is not None:
            self.cycle.transport = HeadWithBody(self.transport)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        self._phase = _Phase.IDLE
        self._header_bytes = 0
        super().on_message_complete()

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(self.limits.header_timeout_seconds, self._header_timed_out)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self._phase is _Phase.BODY:
            return
        if self._answering():
            # A request pipelined behind one still being answered: its time runs from that answer.
            self._arm_header_timer()
            return
        type(self).refused(Reason.HEADER_TIMEOUT)
        if self._phase is _Phase.IDLE:
            self.transport.close()  # nothing was sent: no request to answer
            return
        seconds = self.limits.header_timeout_seconds
        self._refuse(RequestHeaderTimeout(f"the request headers did not come within {seconds:g} s", limit=seconds))

    def _answering(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _refuse(self, exc: PetrelError) -> None:
        """Answers `exc` and closes (lingering); a response under way is not interleaved with: just closed."""
        self._cancel_header_timer()
        if self._answering():
            self.transport.close()
            return
        self.transport.write(self._answer(exc))
        self._lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_SECONDS, self.transport.close)
        else:
            self.transport.close()

    def _answer(self, exc: PetrelError) -> bytes:
        response = error_response(exc)
        lines = [STATUS_LINE[exc.status]]
        for name, value in [*self.server_state.default_headers, *response.raw_headers, (b"connection", b"close")]:
            lines.append(b"%s: %s\r\n" % (name, value))
        return b"".join([*lines, b"\r\n", response.body])
