"""ConsumeWindow: one consumer's progress in one queue, and the messages it has leased there.

RocketMQ's POP model on a sliding window. `cursor` is the next offset not yet
looked at; every offset before it is either done (acked, handed to retry, or
skipped by the filter), leased (`in_flight`), or waiting to be delivered again
in place (`returned`: FIFO retries, broadcast leases that ran out). The
consumer offset that is persisted is the lowest offset not yet done, so a
broker restart delivers again what was in flight: never lost, at least once.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class WindowKey:
    owner: str
    """The group, or for a broadcast group `group@client_id` (each client has its own offsets)."""
    topic: str
    queue_id: int


@dataclass(slots=True)
class InFlight:
    """A leased message."""

    offset: int
    lease: int
    expires_at: int
    attempt: int
    physical_offset: int
    size: int
    message_id: str | None
    ending: bool = False
    """A failed attempt is being handed on: the lease is over, the offset not yet done."""


@dataclass(slots=True)
class ConsumeWindow:
    key: WindowKey
    cursor: int
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    returned: list[int] = field(default_factory=list)
    """A heap of offsets to deliver again before the cursor moves on."""
    in_place_attempts: dict[int, int] = field(default_factory=dict)
    """Failed attempts of messages redelivered in place (FIFO, broadcast)."""
    suspended_until: int = 0
    """FIFO: a failed message holds its queue until then."""

    @property
    def committed(self) -> int:
        """The lowest offset not yet done: where a restarted broker starts again."""
        low = min(self.cursor, *self.in_flight) if self.in_flight else self.cursor
        if self.returned:
            low = min(low, self.returned[0])
        return low

    def blocked(self, now_ms: int) -> bool:
        """FIFO: the queue waits while a message is leased or suspended."""
        return bool(self.in_flight) or now_ms < self.suspended_until

    def take_returned(self) -> int | None:
        return heapq.heappop(self.returned) if self.returned else None

    def give_back(self, offset: int) -> None:
        """Deliver `offset` again, in place, before the cursor's messages."""
        heapq.heappush(self.returned, offset)

    def release(self, offset: int) -> InFlight | None:
        return self.in_flight.pop(offset, None)

    def reset(self, offset: int) -> list[InFlight]:
        """Start again at `offset`; the leases in flight end (their handles are answered as ended)."""
        ended = list(self.in_flight.values())
        self.in_flight.clear()
        self.returned.clear()
        self.in_place_attempts.clear()
        self.suspended_until = 0
        self.cursor = offset
        return ended
