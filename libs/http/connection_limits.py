"""Limits on a connection, below the app: header size, header and body time, connection count.

uvicorn's httptools protocol buffers a request's headers without a bound, waits
for them and for the body without a deadline, keeps a connection open after
answering a request whose body it never read, and accepts every connection.
`limited_protocol` gives `libs.http.serve` a subclass that, per service process:

- answers 431 (problem+json, then closes) once a request's line and headers pass
  `max_header_bytes`, having fed the parser no more than that. The count starts
  where a request starts; for a pipelined request, bytes that came in the same
  read as the end of the one before are not counted (at most one read, 256 KiB).
- closes a connection whose request headers are not complete within
  `header_timeout_seconds` of connecting, or of the request's first bytes: with a
  408 when some of a request had come, without a word when nothing had. A
  connection idle between requests is the keep-alive timeout's, not this one's;
  but bytes that begin no request (a stray CRLF) stop uvicorn's keep-alive timer
  for good, so they start the header timeout instead.
- gives a request's body `body_timeout_seconds` from the end of its headers, and
  1/`body_min_rate` s more for each byte of it that comes (Apache's mod_reqtimeout,
  `body=20,MinRate=500`): a body that stalls, or trickles slower than the rate
  however long it keeps trickling, gets a 408 (unless an answer has begun: then
  just the close) and its connection is closed; the app's read of it ends as at a
  disconnect. An idle timeout alone would not do: a byte every 29 s would hold a
  socket for months. While the server is the one not reading (the app has not
  taken what came, or the request waits behind a pipelined one), the clock starts
  again.
- answers a request whose body has not all come with `Connection: close`, and
  closes after the answer: a refusal answered from the headers (401, 413, 415)
  leaves the body unread, and uvicorn would keep the connection (and, once the
  client sends one more byte, without any timer) for a next request that cannot
  come before that body.
- closes a connection at once, before reading it, when `max_connections` are
  open. uvicorn's own `limit_concurrency` is not enough: it answers 503 only once
  a request's headers are complete, so connections that never finish them
  (slowloris) still pile up.

An answer that closes the connection before its request was all read is followed by
a lingering close: our side is shut for writing and what the client still sends is
read and dropped for a moment, so that its unread bytes do not make the kernel reset
the connection and destroy the answer before the client reads it.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn._types import ASGI3Application
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from libs.errors import PetrelError, RequestBodyTimeout, RequestHeaderTimeout, RequestHeaderTooLarge
from libs.http.hot_answers import hot_call
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
    BODY_TIMEOUT = "body_timeout"


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_header_bytes: int
    header_timeout_seconds: float
    max_connections: int
    body_timeout_seconds: float
    body_min_rate: int
    """bytes a second"""

    @classmethod
    def of(cls, settings: ServiceSettings) -> ConnectionLimits:
        return cls(
            settings.max_header_bytes,
            settings.header_timeout_seconds,
            settings.max_connections,
            settings.body_timeout_seconds,
            settings.body_min_rate,
        )


class _Phase(enum.Enum):
    IDLE = enum.auto()  # no byte of the next request yet
    HEADERS = enum.auto()  # its line and headers are coming
    BODY = enum.auto()  # its headers are complete, the app has it, its body is coming


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
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_since: float | None = None  # when the body's clock started; None: no body of ours is coming
        self._body_bytes = 0  # of the body, since its clock started
        self._keep_alive = False  # the request's, given back to its cycle once its body has all come
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
        self._cancel_body_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        while data and not self.transport.is_closing():
            if self._phase is _Phase.BODY:
                super().data_received(data)
                break
            data = self._receive_head(data)
        if not self.transport.is_closing():
            self._arm_timers()

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

    def _arm_timers(self) -> None:
        """After a read, the timer that bounds what the connection waits for now, unless one runs already."""
        if self._phase is _Phase.BODY:
            if self._body_timer is None and self._body_since is not None:
                self._body_timer = self.loop.call_later(self.limits.body_timeout_seconds, self._body_timed_out)
        elif self._header_timer is None and (self._phase is _Phase.HEADERS or self._stray_bytes()):
            self._arm_header_timer()

    def _stray_bytes(self) -> bool:
        """Bytes came that began no request, with nothing being answered: uvicorn stopped its keep-alive for them."""
        return self.timeout_keep_alive_task is None and not self._answering()

    # Parser callbacks: where a request's headers start and end, and its body.
    def on_message_begin(self) -> None:
        self._phase = _Phase.HEADERS
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._phase = _Phase.BODY
        self._cancel_header_timer()
        answering = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is None or cycle is answering:
            return  # upgraded to a WebSocket: no request of this protocol's
        cycle.transport = HeadWithBody(self.transport, self._close_after_answer)  # type: ignore[assignment]
        # Kept alive once its body has all come; an answer before that says close.
        self._keep_alive, cycle.keep_alive = cycle.keep_alive, False
        self._body_since, self._body_bytes = self.loop.time(), 0

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        """A hot route's request is answered straight from its cycle (libs.http.hot_answers), the others by the app."""
        call = hot_call(self.config, cycle) if app is self.app else None  # not uvicorn's 503 for its concurrency
        if call is None:
            super()._start_asgi_task(cycle, app)
            return
        task = self.loop.create_task(call)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._phase = _Phase.IDLE
        self._header_bytes = 0
        self._cancel_body_timer()
        ours, self._body_since = self._body_since is not None, None
        if ours and not self.cycle.response_started:
            self.cycle.keep_alive = self._keep_alive
        super().on_message_complete()

    def shutdown(self) -> None:
        self._keep_alive = False  # a request whose body is still coming is the connection's last
        super().shutdown()

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

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timed_out(self) -> None:
        """The body's deadline, as far as its bytes have pushed it: re-armed there, or the end of the request."""
        self._body_timer = None
        if self._body_since is None or self.transport.is_closing() or self._lingering:
            return
        now = self.loop.time()
        if self._server_waits():
            self._body_since, self._body_bytes = now, 0
        timeout, rate = self.limits.body_timeout_seconds, self.limits.body_min_rate
        left = self._body_since + timeout + self._body_bytes / rate - now
        if left > 0:
            self._body_timer = self.loop.call_later(left, self._body_timed_out)
            return
        type(self).refused(Reason.BODY_TIMEOUT)
        detail = f"the request body did not come within {timeout:g} s, or came slower than {rate} bytes a second"
        self._refuse(RequestBodyTimeout(detail, limit=timeout, min_rate=rate))

    def _server_waits(self) -> bool:
        """The body is not coming because of the server: it is not reading (the app has not taken what came, the
        request waits behind a pipelined one), or the client waits for its 100 Continue."""
        return self.flow.read_paused or bool(self.pipeline) or self.cycle.waiting_for_100_continue

    def _answering(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _refuse(self, exc: PetrelError) -> None:
        """Answers `exc` and closes (lingering); a response under way is not interleaved with: just closed.

        In a body, the request is the one being answered: its app's read ends as at a disconnect, and what it
        answers is dropped.
        """
        self._cancel_header_timer()
        if self._answering():
            cycle: RequestResponseCycle = self.cycle
            if self._phase is not _Phase.BODY or cycle.response_started:
                self.transport.close()
                return
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.write(self._answer(exc))
        self._close_lingering()

    def _close_after_answer(self) -> None:
        """A cycle's close: lingering when the request's body is still coming (its answer came before it)."""
        if self._phase is _Phase.BODY:
            self._close_lingering()
        else:
            self.transport.close()

    def _close_lingering(self) -> None:
        self._lingering = True
        self._cancel_body_timer()
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
