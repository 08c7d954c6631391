"""LagHistory: each consumer group's lag per topic, sampled on this broker into a bounded ring.

Every `interval` seconds the sampler adds up, per group and subscribed topic, the lag of this
broker's queues (services.broker.consume.progress.group_lag: the broker's offset less the
group's committed one, retry queues counted under their retry topic), stamped with the wall
clock in ms. Each group keeps `history / interval` samples (an hour of 10 s samples by
default: 360 entries of a few topics each), older ones drop off the ring. Nothing is kept on
disk: a restarted broker starts a new history, and longer history is Prometheus's (the
`petrel_group_lag` gauge, deploy/grafana). The gateway adds the brokers' samples of the
same interval together (`GET /v1/groups/{group}/lag/history`). Each sample also notes what the
broker had stored per user topic and what its groups had consumed (`Activity`): the last two
give the send and receive rates of `GET /v1/overview` (services.broker.overview).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge

from libs.errors import PetrelError
from libs.names import is_public_topic
from services.broker.consume.pop import PopService
from services.broker.consume.progress import group_lag

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Activity:
    """What this broker had stored and its groups had consumed at one sample: rates come from two of them."""

    at: float
    """on the monotonic clock"""
    stored: dict[str, int]
    """user topic -> the sum of its queues' ends here (messages ever stored, retention aside)"""
    consumed: int
    """the sum of every group's consumer offsets here (messages done)"""


@dataclass(frozen=True, slots=True)
class Rates:
    send: float
    receive: float
    topics: dict[str, float]


@dataclass(frozen=True, slots=True)
class LagSample:
    at_ms: int
    topics: dict[str, int]
    """topic -> the group's lag on this broker's queues of it"""


class LagHistory:
    def __init__(
        self,
        interval: float,
        history: float,
        clock: Callable[[], float] = time.time,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.interval = interval
        self.history = history
        self.clock = clock
        self._length = max(1, int(history // interval))
        self._rings: dict[str, deque[LagSample]] = {}
        self._activity: deque[Activity] = deque(maxlen=2)
        self._gauge = Gauge(
            "petrel_group_lag",
            "a consumer group's lag on this broker's queues of a topic, at the last sample (messages)",
            ["group", "topic"],
            registry=registry,
        )

    def sample(self, pop: PopService) -> None:
        """One sample of every group this broker knows; groups deleted since are forgotten."""
        at_ms = int(self.clock() * 1000)
        known = set()
        consumed = 0
        for config in pop.groups.all():
            known.add(config.name)
            try:
                queues = group_lag(pop, config.name)
            except PetrelError:
                continue  # deleted between the listing and its lag
            topics: dict[str, int] = {}
            for queue in queues:
                topics[queue.topic] = topics.get(queue.topic, 0) + queue.lag
                consumed += queue.consumer_offset
            ring = self._rings.get(config.name)
            if ring is None:
                ring = self._rings[config.name] = deque(maxlen=self._length)
            ring.append(LagSample(at_ms, topics))
            for topic, lag in topics.items():
                self._gauge.labels(config.name, topic).set(lag)
        self._activity.append(Activity(time.monotonic(), _stored(pop), consumed))
        for gone in set(self._rings) - known:
            for topic in self._rings.pop(gone)[-1].topics:
                with contextlib.suppress(KeyError):
                    self._gauge.remove(gone, topic)

    def samples(self, group: str) -> list[LagSample]:
        return list(self._rings.get(group, ()))

    def latest(self) -> dict[str, dict[str, int]]:
        """group -> topic -> lag, at the last sample."""
        return {group: dict(ring[-1].topics) for group, ring in self._rings.items() if ring}

    def rates(self) -> Rates:
        """Messages a second stored (in all, per user topic) and consumed, between the last two samples."""
        if len(self._activity) < 2:
            return Rates(0.0, 0.0, {})
        before, after = self._activity
        seconds = max(after.at - before.at, 1e-3)
        topics = {t: max(0, n - before.stored.get(t, n)) / seconds for t, n in after.stored.items()}
        return Rates(sum(topics.values()), max(0, after.consumed - before.consumed) / seconds, topics)

    async def run(self, pop: PopService) -> None:
        """Until cancelled: a sample at once, then every `interval` seconds."""
        while True:
            try:
                self.sample(pop)
            except Exception:
                log.exception("sampling the groups' lag failed; the next sample tries again")
            await asyncio.sleep(self.interval)


def _stored(pop: PopService) -> dict[str, int]:
    stored = {}
    for topic in pop.topics.all():
        if is_public_topic(topic.name):
            stored[topic.name] = sum(pop.store.queue_offsets(topic.name, q)[1] for q in range(topic.read_queues))
    return stored
