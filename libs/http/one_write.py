"""Answers in one write: a response's status line and headers go out with the start of its body.

uvicorn's response cycle writes the head when the app sends `http.response.start` and the
body when it sends `http.response.body`: two `write` calls, so two syscalls and two TCP
segments for every small answer (a send's result, a broker's put answer). On the hot paths
that second syscall was a tenth of a process's CPU (profiles of `petrel bench gateway`).
`HeadWithBody` stands between the cycle and its transport: it holds the head and writes it
together with the first body part, whatever comes next (the body, a close). A
`100 Continue` interim answer is not held: a client waits for it before sending its body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

CONTINUE: Final = b"HTTP/1.1 100 "
JOIN_UP_TO: Final = 64 * 1024
"""A body part up to this size is copied behind the head (one buffer); a larger one follows it in writelines."""


class HeadWithBody:
    """The transport as one response cycle sees it (uvicorn makes a cycle per request)."""

    __slots__ = ("_close", "_head", "_headed", "_transport")

    def __init__(self, transport: asyncio.Transport, close: Callable[[], None] | None = None) -> None:
        """`close`: how the cycle's close of the connection is done (the protocol's own, a lingering one, say)."""
        self._transport = transport
        self._close = close or transport.close
        self._head: bytes | None = None
        self._headed = False

    def write(self, data: bytes) -> None:
        if not self._headed:
            if data.startswith(CONTINUE):
                self._transport.write(data)
                return
            self._headed = True
            self._head = data
            return
        head, self._head = self._head, None
        if head is None:
            self._transport.write(data)
        elif len(data) <= JOIN_UP_TO:
            self._transport.write(head + data)
        else:
            self._transport.writelines((head, data))

    def close(self) -> None:
        head, self._head = self._head, None
        if head is not None and not self._transport.is_closing():
            self._transport.write(head)
        self._close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
