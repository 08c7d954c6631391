"""The generated day's calls: `stored`, `delivered` and `acked` events grouped into lines as the broker writes them.

The broker writes one line per put (`stored`), per receive (`delivered`) and per ack call (`acked`): the fields the
call's events share once, each message's own in a `batch` list (`libs.events.writer.emit_batch`; a call of one
message is a plain line). The day's traffic is told message by message, so the calls are made here: the events of
one process, kind and shared fields (broker, group, client; a put's topic) within `WINDOW_MS` of each other go in
one line of at most `MAX_ITEMS`, as concurrent sends share a put and a consumer takes what is there. The line's
`ts` is its last event's, the moment the call ended and the line was written.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from libs.events.contract import BATCH

WINDOW_MS = 5
MAX_ITEMS = 32
HORIZON_MS = 1_000
"""A call is written once the day's clock is this far past its window (its events arrive out of time order)."""

Call = tuple[int, int, str, str]
"""(bucket of WINDOW_MS, process, event, shared fields): the key of an open call."""


class CallBatcher:
    def __init__(self, add: Callable[[int, int, str, int], None], processes: tuple[str, ...]) -> None:
        self.add = add
        """add(ts, process, line, events): a line holding `events` events."""
        self.pids = [name.rsplit("-", 1)[1] for name in processes]
        self.open: dict[Call, tuple[int, list[str]]] = {}
        """The calls not written yet -> (their latest ts, their items' fields)."""
        self.opened: list[Call] = []
        """The same keys as a heap, oldest window first (a key written at MAX_ITEMS stays here until popped)."""
        self.pending = 0
        """Events in open calls."""

    def event(self, ts: int, process: int, event: str, shared: str, item: str) -> None:
        """One event of a call: `shared` and `item` are JSON members (`"broker":"broker-a","group":"g"`)."""
        key = (ts // WINDOW_MS, process, event, shared)
        call = self.open.get(key)
        if call is None:
            call = (ts, [])
            heapq.heappush(self.opened, key)
        latest, items = call
        items.append(item)
        self.pending += 1
        if len(items) >= MAX_ITEMS:
            del self.open[key]
            self._write(key, max(latest, ts), items)
        else:
            self.open[key] = (max(latest, ts), items)

    def written_before(self, now_ms: int) -> None:
        """Write every call whose window ended more than HORIZON_MS before `now_ms`."""
        last = (now_ms - HORIZON_MS) // WINDOW_MS
        while self.opened and self.opened[0][0] < last:
            key = heapq.heappop(self.opened)
            call = self.open.pop(key, None)
            if call is not None:
                self._write(key, *call)

    def finish(self) -> None:
        """Write every open call (the end of the day)."""
        while self.opened:
            key = heapq.heappop(self.opened)
            call = self.open.pop(key, None)
            if call is not None:
                self._write(key, *call)

    def _write(self, key: Call, ts: int, items: list[str]) -> None:
        _, process, event, shared = key
        head = f'{{"ts":{ts},"event":"{event}","service":"broker","pid":{self.pids[process]},{shared}'
        if len(items) == 1:
            line = f"{head},{items[0]}}}"
        else:
            line = f'{head},"{BATCH}":[{",".join("{" + item + "}" for item in items)}]}}'
        self.pending -= len(items)
        self.add(ts, process, line, len(items))
