"""ConsumerOffsets: each group's committed offset per (topic, queue), in memory, persisted.

Commits only touch memory; every `persist_interval` seconds (and at shutdown)
the offsets changed since the last round are written through SQLAlchemy. A
crash can thus replay at most that interval's worth of messages — at least once,
never lost.

At start, before the store takes a write, `clamp` lowers every offset that is
past its queue's end: under ASYNC_FLUSH a crash of the machine can lose the
CommitLog's unflushed tail while the offsets that consumed it were persisted,
and the queue offsets the lost messages had are then given to new messages.
Left ahead, an offset would skip those new messages. This covers plain
consumer offsets and the POP groups' progress alike (both are kept here).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from libs.tasks import cancelled
from services.broker.metadata import OffsetKey, OffsetStore

log = logging.getLogger(__name__)


class ConsumerOffsets:
    def __init__(self, store: OffsetStore, persist_interval: float) -> None:
        self.store = store
        self.persist_interval = persist_interval
        self._offsets: dict[OffsetKey, int] = {}
        self._dirty: set[OffsetKey] = set()
        self._forgotten: set[str] = set()
        """Owners whose stored offsets are to be deleted on the next persist."""
        self._task: asyncio.Task[None] | None = None

    async def load(self) -> None:
        self._offsets = await asyncio.to_thread(self.store.load)

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get((group, topic, queue_id))

    def of_group(self, group: str) -> dict[tuple[str, int], int]:
        return {(t, q): o for (g, t, q), o in self._offsets.items() if g == group}

    def all(self) -> dict[OffsetKey, int]:
        return dict(self._offsets)

    def owners(self) -> set[str]:
        """Every group (or broadcast `group@client`) that has an offset here."""
        return {g for g, _, _ in self._offsets}

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = (group, topic, queue_id)
        if self._offsets.get(key) != offset:
            self._offsets[key] = offset
            self._dirty.add(key)

    async def clamp(self, queue_end: Callable[[str, int], int]) -> list[tuple[OffsetKey, int, int]]:
        """Lower each offset past `queue_end(topic, queue_id)` to it and persist at once: (key, was, now) each."""
        clamped = []
        for key, offset in sorted(self._offsets.items()):
            end = queue_end(key[1], key[2])
            if offset > end:
                clamped.append((key, offset, end))
                self.commit(*key, end)
        for (group, topic, queue_id), was, end in clamped:
            log.warning(
                "consumer offset of %s on %s/%d was %d, past the queue's end %d (a lost CommitLog tail?): "
                "lowered to %d, so the messages stored there from now on are delivered",
                group,
                topic,
                queue_id,
                was,
                end,
                end,
            )
        try:
            await self.persist()
        except Exception:
            log.exception("persisting the lowered consumer offsets failed; the periodic round will try again")
        return clamped

    def forget(self, owner: str) -> None:
        """Drop every offset of an owner (a broadcast client gone for good), here and on disk."""
        for key in [k for k in self._offsets if k[0] == owner]:
            del self._offsets[key]
            self._dirty.discard(key)
        self._forgotten.add(owner)

    async def persist(self) -> None:
        if self._forgotten:
            forgotten, self._forgotten = self._forgotten, set()
            try:
                await asyncio.to_thread(self.store.remove_owners, forgotten)
            except Exception:
                self._forgotten |= forgotten
                raise
        if not self._dirty:
            return
        changed = {key: self._offsets[key] for key in self._dirty}
        self._dirty.clear()
        try:
            await asyncio.to_thread(self.store.save, changed)
        except Exception:
            self._dirty.update(changed)
            raise

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="consumer-offsets")

    async def stop(self) -> None:
        if self._task is not None:
            await cancelled(self._task)
        await self.persist()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.persist_interval)
            try:
                await self.persist()
            except Exception:
                log.exception("persisting consumer offsets failed; will try again")
