"""TopicTable: the broker's topics, in memory for lookups, persisted on every change.

`data_version` increases with each change; nameservers compare it on heartbeats
to know when a broker's registration is stale.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from libs.errors import AlreadyExists, QueuesNotEmpty, TopicNotFound
from libs.names import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from libs.topic import Perm, TopicConfig
from services.broker.metadata import TopicStore


@dataclass(frozen=True, slots=True)
class TopicChange:
    """One change of the table: `name` now has `config` (None: removed), at `data_version`."""

    data_version: int
    name: str
    config: TopicConfig | None


class TopicTable:
    def __init__(self, store: TopicStore) -> None:
        self.store = store
        self._topics: dict[str, TopicConfig] = {}
        self.data_version = 0
        self._listeners: list[Callable[[TopicChange], Awaitable[None]]] = []
        self._writing = asyncio.Lock()

    async def load(self) -> None:
        self._topics = {t.name: t for t in await asyncio.to_thread(self.store.load)}
        self.data_version = 1

    def on_change(self, listener: Callable[[TopicChange], Awaitable[None]]) -> None:
        self._listeners.append(listener)

    def get(self, name: str) -> TopicConfig:
        config = self._topics.get(name)
        if config is None:
            raise TopicNotFound(f"topic {name!r} does not exist on this broker")
        return config

    def find(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    async def put(
        self, config: TopicConfig, *, held: Callable[[int], int] | None = None, create_only: bool = False
    ) -> bool:
        """Create or update (`change` to `config`, whatever it was); True when the topic is new."""
        _, created = await self.change(config.name, lambda _: config, held=held, create_only=create_only)
        return created

    async def change(
        self,
        name: str,
        merge: Callable[[TopicConfig | None], TopicConfig],
        *,
        held: Callable[[int], int] | None = None,
        create_only: bool = False,
    ) -> tuple[TopicConfig, bool]:
        """The topic as `merge` makes it from the one held (None: none yet), and whether it is new.
        Listeners run before it returns.

        `merge` runs under the writers' lock: two changes of different fields, at once, both hold.

        Writes are serialised: two first receives of a new group both creating its retry
        topic must not both insert it. `create_only`: AlreadyExists when the topic exists.

        `held(queue_id)`: how many messages a queue holds (within retention). Given, fewer
        queues are refused (QueuesNotEmpty, nothing changed) while a queue to be removed holds
        any, and the check cannot race a send: the removed queues first stop taking writes
        (a send checks its queue and appends with no await between), then are counted.
        """
        async with self._writing:
            old = self._topics.get(name)
            if create_only and old is not None:
                raise AlreadyExists(f"topic {name!r} exists (If-None-Match: * creates only)")
            config = merge(old)
            if old is not None and held is not None and _span(config) < _span(old):
                await self._set(replace(old, write_queues=min(old.write_queues, config.write_queues)))
                counts = {q: n for q in range(_span(config), _span(old)) if (n := held(q))}
                if counts:
                    await self._set(old)
                    raise QueuesNotEmpty(
                        f"topic {config.name!r}: {_queues_held(counts)} would be removed with their messages; "
                        "wait until retention has removed them, or delete the topic",
                        queues=[{"queue_id": q, "messages": n} for q, n in sorted(counts.items())],
                    )
            await self._set(config)
        return config, old is None

    async def _set(self, config: TopicConfig) -> None:
        if self._topics.get(config.name) != config:
            await asyncio.to_thread(self.store.save, config)
            self._topics[config.name] = config
            await self._changed(config.name, config)

    async def delete(self, name: str) -> None:
        self.get(name)
        await asyncio.to_thread(self.store.remove, name)
        del self._topics[name]
        await self._changed(name, None)

    async def _changed(self, name: str, config: TopicConfig | None) -> None:
        self.data_version += 1
        change = TopicChange(self.data_version, name, config)
        for listener in self._listeners:
            await listener(change)


def _span(config: TopicConfig) -> int:
    """The queues a topic has (readable or writable)."""
    return max(config.read_queues, config.write_queues)


def _queues_held(counts: dict[int, int]) -> str:
    return ", ".join(f"queue {q} holds {n} message{'s' if n != 1 else ''}" for q, n in sorted(counts.items()))


def system_topics(levels: int) -> list[TopicConfig]:
    """Every broker's own topics: delay levels and the timer, transactions' half, op and check-max queues."""
    return [
        TopicConfig(SCHEDULE_TOPIC, levels, levels, Perm.READ_WRITE),
        TopicConfig(TIMER_TOPIC, 1, 1, Perm.READ_WRITE),
        TopicConfig(TRANS_HALF_TOPIC, 1, 1, Perm.READ_WRITE),
        TopicConfig(TRANS_OP_HALF_TOPIC, 1, 1, Perm.READ_WRITE),
        TopicConfig(TRANS_CHECK_MAX_TIME_TOPIC, 1, 1, Perm.READ_WRITE),
    ]


async def ensure_system_topics(topics: TopicTable, levels: int) -> None:
    for config in system_topics(levels):
        if topics.find(config.name) != config:
            await topics.put(config)
