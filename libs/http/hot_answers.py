"""Hot routes answered straight from uvicorn's request cycle: no ASGI app stack, no ASGI messages.

A Petrel service's protocol (libs.http.connection_limits) starts a request for a hot route
(libs.http.hot_routes) with `hot_call` instead of the service app. The request's task runs
HotPath's checks and endpoint, reads the body through uvicorn's cycle (its `receive`: the 100
Continue, flow control, the disconnect, the body limits and timeouts), and writes the Response
as the cycle's `send` would: the status line, the server's default headers and the response's
own (checked as uvicorn checks them), then the body, in one write; the connection closed after
it when the request is not kept alive. Errors end as uvicorn's `run_asgi` ends them.

What it skips, per request: the service app's dispatch (ServiceApp.__call__), the two ASGI
messages of the answer and the cycle's header loop, and starlette's Response.__call__; and
uvicorn's proxy-headers middleware, which only acts on a request that carries X-Forwarded-For
or X-Forwarded-Proto (it then takes the client's address and scheme from them, for a trusted
proxy: the audit log's `remote`): such a request goes the ASGI way. A trivial hot route
cost 57.7 us of CPU a request through those (wrk, 32 connections), against 34 us for a bare
ASGI app under uvicorn and 9.8 us for a bare httptools protocol (2026-11-29).

The service app still answers every other request, and a hot route's too when the service keeps
a request log or an access log (they wrap the app), for HEAD, and for a response without a
whole body (streamed): those go through the cycle's ASGI `send`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, cast

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE, STATUS_LINE, RequestResponseCycle

from libs.http.hot_routes import HotPath

log = logging.getLogger("uvicorn.error")
"""uvicorn's own logger: an endpoint's crash is logged where run_asgi logs it."""

PROXY_HEADERS = frozenset({b"x-forwarded-for", b"x-forwarded-proto"})
"""What uvicorn's ProxyHeadersMiddleware reads (header names as the cycle keeps them: lower case)."""
NO_BODY_STATUSES = (204, 304)
"""Answers that carry no body, hence no content-length (the others: uvicorn would chunk them without one)."""


def hot_call(config: Config, cycle: RequestResponseCycle) -> Coroutine[Any, Any, None] | None:
    """The request's answer as a hot route's, to run as its task; None: the service app's to answer."""
    service = config.app
    hot_path = getattr(service, "hot_path", None)
    if (
        not isinstance(hot_path, HotPath)
        or getattr(service, "request_log", None) is not None
        or cycle.access_log
        or config.reset_contextvars
        or cycle.scope["method"] == "HEAD"
        or (config.proxy_headers and _forwarded(cycle.scope["headers"]))
    ):
        return None
    scope, receive, send = _asgi(cycle)
    found = hot_path.find(scope)
    if found is None:
        return None
    route, params = found
    return _run(hot_path.serve(cast(ASGIApp, service), route, params, scope, receive, send, _writer(cycle)), cycle)


def _forwarded(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Would uvicorn's proxy-headers middleware rewrite this request's client or scheme (from a trusted proxy)?"""
    return any(name in PROXY_HEADERS for name, _ in headers)


def _asgi(cycle: RequestResponseCycle) -> tuple[Scope, Receive, Send]:
    """The cycle's scope, receive and send as starlette types them (uvicorn types them more narrowly)."""
    return cast(Scope, cycle.scope), cast(Receive, cycle.receive), cast(Send, cycle.send)


async def _run(answer: Coroutine[Any, Any, None], cycle: RequestResponseCycle) -> None:
    """As uvicorn's RequestResponseCycle.run_asgi."""
    try:
        await answer
    except BaseException as exc:
        log.error("Exception in ASGI application\n", exc_info=exc)
        if not cycle.response_started:
            await cycle.send_500_response()
        else:
            cycle.transport.close()
    else:
        if not cycle.response_started and not cycle.disconnected:
            log.error("ASGI callable returned without starting response.")
            await cycle.send_500_response()
    finally:
        cycle.on_response = lambda: None


def _writer(cycle: RequestResponseCycle) -> Callable[[Response], Awaitable[None]]:
    async def write(response: Response) -> None:
        await write_response(cycle, response)

    return write


async def write_response(cycle: RequestResponseCycle, response: Response) -> None:
    """Write `response` as the cycle's ASGI `send` would, in one write; through `send` when it has no whole body."""
    body = getattr(response, "body", None)
    status = response.status_code
    lines = [STATUS_LINE[status]]
    keep_alive = cycle.keep_alive
    close_said = sized = False
    for given, value in (*cycle.default_headers, *response.raw_headers):
        if HEADER_RE.search(given) or HEADER_VALUE_RE.search(value):
            raise RuntimeError("Invalid HTTP header name or value.")
        name = given.lower()
        if name == b"content-length":
            sized = int(value) == len(body) if isinstance(body, bytes) else False
        elif name == b"connection" and b"close" in [token.strip().lower() for token in value.split(b",")]:
            keep_alive, close_said = False, True
        lines += (name, b": ", value, b"\r\n")
    if not isinstance(body, bytes) or not (sized or (status in NO_BODY_STATUSES and not body)):
        await response(*_asgi(cycle))  # streamed, or sized otherwise: the ASGI way
        return
    if cycle.flow.write_paused and not cycle.disconnected:
        await cycle.flow.drain()
    if cycle.disconnected:
        return
    if not keep_alive and not close_said:
        lines.append(b"connection: close\r\n")
    lines.append(b"\r\n")
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    cycle.keep_alive = keep_alive
    cycle.transport.write(b"".join(lines))
    cycle.transport.write(body)  # one syscall with the head (libs.http.one_write)
    cycle.response_complete = True
    cycle.message_event.set()
    if not cycle.keep_alive:
        cycle.transport.close()
    cycle.on_response()
