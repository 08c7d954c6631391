"""Choosing where a message goes: QueueSelector and BrokerAvoidance (DESIGN section 1).

- Round robin over the writable queues of every broker in the topic's route.
- A message with a `message_group` always goes to the same queue (a stable
  hash over the route's queues), so its group stays in order.
- A broker that failed a send is avoided for `avoid_seconds`, unless every
  writable broker is being avoided (then all are tried again).
"""

from __future__ import annotations

import itertools
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from libs.errors import ServiceUnavailable
from libs.routing import TopicRoute
from libs.topic import Perm


@dataclass(frozen=True, slots=True)
class QueueTarget:
    broker: str
    address: str
    queue_id: int


def writable_queues(route: TopicRoute) -> list[QueueTarget]:
    targets: list[QueueTarget] = []
    for queue_data in route.queues:
        broker = route.broker(queue_data.broker_name)
        address = broker.master if broker else None
        if address is None or not queue_data.perm & Perm.WRITE:
            continue
        targets.extend(QueueTarget(queue_data.broker_name, address, q) for q in range(queue_data.write_queues))
    return targets


class BrokerAvoidance:
    def __init__(self, avoid_seconds: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.avoid_seconds = avoid_seconds
        self.clock = clock
        self._until: dict[str, float] = {}

    def failed(self, broker: str) -> None:
        self._until[broker] = self.clock() + self.avoid_seconds

    def succeeded(self, broker: str) -> None:
        self._until.pop(broker, None)

    def avoided(self, broker: str) -> bool:
        until = self._until.get(broker)
        return until is not None and until > self.clock()

    def any(self) -> bool:
        """Whether some broker may be avoided now (False: none is; expired entries may make it True)."""
        return bool(self._until)


class QueueSelector:
    def __init__(self, avoidance: BrokerAvoidance) -> None:
        self.avoidance = avoidance
        self._counter = itertools.count()
        self._targets: dict[str, tuple[TopicRoute, list[QueueTarget]]] = {}

    def _writable(self, route: TopicRoute) -> list[QueueTarget]:
        cached = self._targets.get(route.topic)
        if cached is None or cached[0] is not route:  # a refreshed route is a new object
            cached = (route, writable_queues(route))
            self._targets[route.topic] = cached
        return cached[1]

    def select(self, topic: str, route: TopicRoute, message_group: str | None, exclude: set[str]) -> QueueTarget:
        targets = self._writable(route)
        if not targets:
            raise ServiceUnavailable(f"topic {topic!r} has no writable queue on any live broker")
        if message_group is not None:
            return targets[zlib.crc32(message_group.encode()) % len(targets)]
        if not exclude and not self.avoidance.any():  # nearly every send: nothing to filter
            return targets[next(self._counter) % len(targets)]
        preferred = [t for t in targets if t.broker not in exclude and not self.avoidance.avoided(t.broker)]
        candidates = preferred or [t for t in targets if t.broker not in exclude] or targets
        return candidates[next(self._counter) % len(candidates)]
