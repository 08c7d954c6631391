"""The request log: one JSON line per HTTP request, on the `petrel.requests` logger (off unless a setting turns it on).

A line holds `time` (UTC, ISO 8601 with milliseconds), `method`, `path` (without its query), `status`,
`duration_ms`, `request_id` and, when the service knows who called, `key_id`; never a key, a header's value
other than the request id, a query string or a body. The request id is the caller's `x-request-id` when it is a
plain token (letters, digits, `.`, `_`, `-`, at most 64), else a new one; either way the answer carries it back
in `x-request-id`, so a client can quote it. The line is written when the request is done (status 500 when no answer
was started).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Final

import orjson
from starlette.types import Message, Receive, Scope, Send

LOGGER_NAME: Final = "petrel.requests"
HEADER: Final = b"x-request-id"
_PLAIN_ID: Final = re.compile(rb"[A-Za-z0-9._-]{1,64}")

KeyIdOf = Callable[[Scope], str | None]


def request_id(scope: Scope) -> str:
    """The caller's x-request-id when it is a plain token, else a new one."""
    for name, value in scope.get("headers", ()):
        if name == HEADER and _PLAIN_ID.fullmatch(value):
            return str(value.decode("ascii"))
    return uuid.uuid4().hex


class RequestLog:
    """Serves a request through `app` and logs its line (the service's app calls `serve` around all it does)."""

    def __init__(
        self,
        key_id_of: KeyIdOf = lambda _scope: None,
        *,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.key_id_of = key_id_of
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self.clock = clock
        self.wall = wall

    async def serve(
        self, app: Callable[[Scope, Receive, Send], Awaitable[None]], scope: Scope, receive: Receive, send: Send
    ) -> None:
        started_at, started = self.wall(), self.clock()
        rid = request_id(scope)
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message = {**message, "headers": [*message.get("headers", ()), (HEADER, rid.encode())]}
            await send(message)

        try:
            await app(scope, receive, send_with_id)
        finally:
            self.logger.info(self.line(scope, status, started_at, self.clock() - started, rid))

    def line(self, scope: Scope, status: int, started_at: float, seconds: float, rid: str) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(started_at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "method": scope.get("method", ""),
            "path": scope.get("path", ""),
            "status": status,
            "duration_ms": round(seconds * 1000, 2),
            "request_id": rid,
        }
        if (key_id := self.key_id_of(scope)) is not None:
            entry["key_id"] = key_id
        return orjson.dumps(entry).decode()


def plain_lines(logger_name: str = LOGGER_NAME) -> None:
    """The request log's lines alone on standard error (the service's log), without the log format's prefix: each
    line is one JSON document a log shipper can parse."""
    logger = logging.getLogger(logger_name)
    if not any(getattr(handler, "petrel_request_log", False) for handler in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.petrel_request_log = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
