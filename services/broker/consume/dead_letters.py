"""Dead letters: peek at a group's DLQ, and send dead letters back to the group (redrive).

`%DLQ%{group}` is an ordinary topic of one queue; nothing consumes it. A
redrive copies a dead letter into the group's retry queue for its original
topic, with its message id and a fresh attempt count, so only this group sees
it again. A redriven message has left the DLQ: "redrive all" moves a cursor
through the DLQ (the group's consumer offset of its DLQ queue), a redrive by id
marks what it sent (RedrivenMarks). The listing starts at the cursor and passes
the marks, so it shows what is still dead; neither form sends a message twice,
and a redrive by id of a message already redriven answers it not found.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from libs.codec import decode_record, encode_record
from libs.filters import FilterType
from libs.message import MessageRecord
from libs.names import dlq_topic, retry_topic
from libs.store.message_store import PullResult
from services.broker.consume.pop import PopService
from services.broker.consume.redelivery import original_topic, redriven_copy
from services.broker.consume.redriven import RedrivenMarks

CHUNKS_PER_SECOND = 10

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Redrive:
    redriven: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    remaining: int = 0


class DeadLetters:
    def __init__(self, pop: PopService, redriven: RedrivenMarks) -> None:
        self.pop = pop
        self.redriven = redriven

    def peek(self, group: str, offset: int, max_count: int) -> PullResult:
        """The dead letters still in the DLQ from `offset` on: from the redrive cursor, the marked ones passed."""
        self.pop.groups.get(group)
        topic = dlq_topic(group)
        if self.pop.topics.find(topic) is None:
            return PullResult([], 0, 0, 0)
        low, high = self.pop.store.queue_offsets(topic, 0)
        cursor = max(offset, self._cursor(group, topic))
        records: list[bytes] = []
        while cursor < high and len(records) < max_count:
            result = self.pop.store.pull(topic, 0, cursor, max_count - len(records))
            records += [r for r in result.records if not self.redriven.is_marked(group, decode_record(r).queue_offset)]
            if not result.records or result.next_offset <= cursor:
                cursor = max(cursor, result.next_offset)
                break
            cursor = result.next_offset
        return PullResult(records, cursor, low, high)

    def _cursor(self, group: str, topic: str) -> int:
        """The redrive cursor: what lies before it has left the DLQ."""
        low, high = self.pop.store.queue_offsets(topic, 0)
        return min(max(self.pop.offsets.get(group, topic, 0) or low, low), high)

    async def redrive(self, group: str, message_ids: list[str] | None, max_messages: int, per_second: int) -> Redrive:
        self.pop.groups.get(group)
        topic = dlq_topic(group)
        if self.pop.topics.find(topic) is None:
            return Redrive(not_found=list(message_ids or []))
        if message_ids is not None:
            done = await self._by_id(group, topic, message_ids[:max_messages], per_second)
        else:
            done = await self._all(group, topic, max_messages, per_second)
        cursor = self._cursor(group, topic)
        done.remaining = self.pop.store.queue_offsets(topic, 0)[1] - cursor - self.redriven.count_from(group, cursor)
        await self._prune(group, cursor)
        return done

    async def _all(self, group: str, topic: str, max_messages: int, per_second: int) -> Redrive:
        high = self.pop.store.queue_offsets(topic, 0)[1]
        cursor = self._cursor(group, topic)
        done = Redrive()
        chunk = max(1, per_second // CHUNKS_PER_SECOND)
        while cursor < high and len(done.redriven) < max_messages:
            result = self.pop.store.pull(topic, 0, cursor, min(chunk, max_messages - len(done.redriven)))
            records = [decode_record(raw) for raw in result.records]
            dead = [r for r in records if not self.redriven.is_marked(group, r.queue_offset)]
            await self._send_back(group, dead, done, per_second)
            cursor = result.next_offset
            self.pop.offsets.commit(group, topic, 0, cursor)
        return done

    async def _by_id(self, group: str, topic: str, message_ids: list[str], per_second: int) -> Redrive:
        done = Redrive()
        found: list[MessageRecord] = []
        cursor = self._cursor(group, topic)
        for message_id in message_ids:
            copies = self.pop.store.query_id(message_id, 0, 2**62, where=topic.__eq__)
            latest = max(copies, key=lambda r: r.queue_offset) if copies else None
            if latest is None or latest.queue_offset < cursor or self.redriven.is_marked(group, latest.queue_offset):
                done.not_found.append(message_id)  # never dead here, or redriven already
            elif all(r.queue_offset != latest.queue_offset for r in found):
                found.append(latest)
        chunk = max(1, per_second // CHUNKS_PER_SECOND)
        for start in range(0, len(found), chunk):
            sent = len(done.redriven)
            try:
                await self._send_back(group, found[start : start + chunk], done, per_second)
            finally:
                stored = found[start : start + len(done.redriven) - sent]
                cursor = await self.redriven.mark(group, [r.queue_offset for r in stored], cursor)
                self.pop.offsets.commit(group, topic, 0, cursor)
        return done

    async def _prune(self, group: str, cursor: int) -> None:
        """Drop the marks the cursor passed, once the cursor is persisted (a crash keeps one or the other)."""
        try:
            await self.pop.offsets.persist()
        except Exception:
            log.exception(
                "persisting the redrive cursor of %s failed; its passed marks stay until the next redrive", group
            )
            return
        await self.redriven.prune(group, cursor)

    async def _send_back(self, group: str, records: list[MessageRecord], done: Redrive, per_second: int) -> None:
        if not records:
            return
        started = asyncio.get_running_loop().time()
        copies = []
        for record in records:
            topic = original_topic(record)
            subscription = self.pop.groups.subscription(group, topic)
            if subscription is None:
                subscription = await self.pop.groups.subscribe(group, topic, FilterType.TAG, "*")
            await self.pop.ensure_topic(retry_topic(group), subscription.retry_queue_id + 1)
            copies.append(redriven_copy(record, retry_topic(group), subscription.retry_queue_id))
        # A flush timeout (SYNC_FLUSH) stored them: they count as redriven, the cursor passes them.
        outcome = await self.pop.store.put_reporting(b"".join(encode_record(c) for c in copies))
        for copy in copies[: len(outcome.stored)]:
            done.redriven.append(copy.message_id or "")
            self.pop.events.emit("redriven", message_id=copy.message_id, topic=original_topic(copy), group=group)
        if outcome.failure is not None:
            raise outcome.failure
        pause = len(records) / per_second - (asyncio.get_running_loop().time() - started)
        if pause > 0:
            await asyncio.sleep(pause)
