"""PullWaiters: pulls and receives held open until a matching message arrives (long polling).

The store calls `on_dispatch` for every message it dispatches; a waiter whose
filter accepts the message's tag code is woken at once. `notify` wakes every
waiter of a queue whatever its filter (a leased message given back, a FIFO
queue unblocked). A receive waits on several queues at once, for its group:
the consumers of one group compete for a message, so a dispatch wakes one
waiting receive per group (the longest waiting), not all of them. Nothing re-polls.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from libs.filters import MessageFilter

QueueKey = tuple[str, int]


@dataclass(slots=True)
class _Waiter:
    message_filter: MessageFilter | None
    future: asyncio.Future[None]
    group: str | None
    """Waiters of one group compete: one of them is woken per dispatch."""


class PullWaiters:
    def __init__(self) -> None:
        self._waiting: dict[QueueKey, list[_Waiter]] = {}

    def on_dispatch(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> None:
        self._wake((topic, queue_id), tags_code)

    def notify(self, topic: str, queue_id: int) -> None:
        self._wake((topic, queue_id), None)

    def _wake(self, key: QueueKey, tags_code: int | None) -> None:
        waiters = self._waiting.get(key)
        if not waiters:
            return
        keep: list[_Waiter] = []
        woken: set[str] = set()
        for waiter in waiters:
            if waiter.future.done():
                continue
            if waiter.group is not None and waiter.group in woken and tags_code is not None:
                keep.append(waiter)
            elif tags_code is None or waiter.message_filter is None or waiter.message_filter.matches_code(tags_code):
                waiter.future.set_result(None)
                if waiter.group is not None:
                    woken.add(waiter.group)
            else:
                keep.append(waiter)
        if keep:
            self._waiting[key] = keep
        else:
            del self._waiting[key]

    async def wait(
        self,
        topic: str,
        queue_id: int,
        message_filter: MessageFilter | None,
        timeout: float,
        gone: asyncio.Future[None] | None = None,
    ) -> bool:
        """True when woken by a matching message, False when the wait ran out (or the client is `gone`)."""
        return await self.wait_any([(topic, queue_id)], message_filter, timeout, gone=gone)

    async def wait_any(
        self,
        keys: Sequence[QueueKey],
        message_filter: MessageFilter | None,
        timeout: float,
        group: str | None = None,
        *,
        unfiltered: Sequence[QueueKey] = (),
        gone: asyncio.Future[None] | None = None,
    ) -> bool:
        """True when a matching message arrived in any of the queues, False when the wait ran out.

        Any message at all of the `unfiltered` queues wakes the wait too (a group's retry queue).
        `gone` (libs.http.disconnect): the client went away; the wait ends at once, False, and
        the waiter no longer counts as one of its group's (a dispatch wakes a live one instead).
        """
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        filtered, everything = _Waiter(message_filter, future, group), _Waiter(None, future, group)
        registered = [(key, filtered) for key in keys] + [(key, everything) for key in unfiltered]
        for key, waiter in registered:
            self._waiting.setdefault(key, []).append(waiter)
        try:
            waits: set[asyncio.Future[None]] = {future} if gone is None else {future, gone}
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if not future.done() or future.cancelled():
                return False
        finally:
            if not future.done():
                future.cancel()
            for key, _ in registered:
                with contextlib.suppress(KeyError, ValueError):
                    waiters = self._waiting[key]
                    waiters[:] = [w for w in waiters if not w.future.done()]
                    if not waiters:
                        del self._waiting[key]
        return True

    @property
    def waiting(self) -> int:
        return len({id(w.future) for waiters in self._waiting.values() for w in waiters})
