"""PullWaiters: pulls held open until a matching message arrives (long polling).

The store calls `on_dispatch` for every message it dispatches; a waiting pull
whose filter accepts the message's tag code is woken at once. Nothing re-polls.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from libs.filters import MessageFilter


@dataclass(slots=True)
class _Waiter:
    message_filter: MessageFilter | None
    future: asyncio.Future[None]


class PullWaiters:
    def __init__(self) -> None:
        self._waiting: dict[tuple[str, int], list[_Waiter]] = {}

    def on_dispatch(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> None:
        waiters = self._waiting.get((topic, queue_id))
        if not waiters:
            return
        keep: list[_Waiter] = []
        for waiter in waiters:
            if waiter.future.done():
                continue
            if waiter.message_filter is None or waiter.message_filter.matches_code(tags_code):
                waiter.future.set_result(None)
            else:
                keep.append(waiter)
        if keep:
            self._waiting[(topic, queue_id)] = keep
        else:
            del self._waiting[(topic, queue_id)]

    async def wait(self, topic: str, queue_id: int, message_filter: MessageFilter | None, timeout: float) -> bool:
        """True when woken by a matching message, False when the wait ran out."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault((topic, queue_id), []).append(_Waiter(message_filter, future))
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return False
        finally:
            if not future.done():
                future.cancel()
            with contextlib.suppress(KeyError, ValueError):
                waiters = self._waiting[(topic, queue_id)]
                waiters[:] = [w for w in waiters if not w.future.done()]
                if not waiters:
                    del self._waiting[(topic, queue_id)]
        return True

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiting.values())
