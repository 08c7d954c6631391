"""Dead letters: peek at a group's DLQ, and send dead letters back to the group (redrive).

`%DLQ%{group}` is an ordinary topic of one queue; nothing consumes it. A
redrive copies a dead letter into the group's retry queue for its original
topic, with its message id and a fresh attempt count, so only this group sees
it again. "Redrive all" moves a cursor through the DLQ (the group's consumer
offset of its DLQ queue), so repeating it does not send anything twice; a
redrive by id sends the named messages whatever the cursor says.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from libs.codec import decode_record, encode_record
from libs.filters import FilterType
from libs.message import MessageRecord
from libs.names import dlq_topic, retry_topic
from libs.store.message_store import PullResult
from services.broker.consume.pop import PopService
from services.broker.consume.redelivery import original_topic, redriven_copy

CHUNKS_PER_SECOND = 10


@dataclass(slots=True)
class Redrive:
    redriven: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    remaining: int = 0


class DeadLetters:
    def __init__(self, pop: PopService) -> None:
        self.pop = pop

    def peek(self, group: str, offset: int, max_count: int) -> PullResult:
        self.pop.groups.get(group)
        topic = dlq_topic(group)
        if self.pop.topics.find(topic) is None:
            return PullResult([], 0, 0, 0)
        low, high = self.pop.store.queue_offsets(topic, 0)
        return self.pop.store.pull(topic, 0, min(max(offset, low), high), max_count)

    async def redrive(self, group: str, message_ids: list[str] | None, max_messages: int, per_second: int) -> Redrive:
        self.pop.groups.get(group)
        topic = dlq_topic(group)
        if self.pop.topics.find(topic) is None:
            return Redrive(not_found=list(message_ids or []))
        if message_ids is not None:
            return await self._by_id(group, topic, message_ids[:max_messages], per_second)
        return await self._all(group, topic, max_messages, per_second)

    async def _all(self, group: str, topic: str, max_messages: int, per_second: int) -> Redrive:
        low, high = self.pop.store.queue_offsets(topic, 0)
        cursor = min(max(self.pop.offsets.get(group, topic, 0) or low, low), high)
        done = Redrive()
        chunk = max(1, per_second // CHUNKS_PER_SECOND)
        while cursor < high and len(done.redriven) < max_messages:
            result = self.pop.store.pull(topic, 0, cursor, min(chunk, max_messages - len(done.redriven)))
            await self._send_back(group, [decode_record(raw) for raw in result.records], done, per_second)
            cursor = result.next_offset
            self.pop.offsets.commit(group, topic, 0, cursor)
        done.remaining = high - cursor
        return done

    async def _by_id(self, group: str, topic: str, message_ids: list[str], per_second: int) -> Redrive:
        done = Redrive()
        found: list[MessageRecord] = []
        for message_id in message_ids:
            copies = self.pop.store.query_id(message_id, 0, 2**62, where=topic.__eq__)
            if copies:
                found.append(max(copies, key=lambda r: r.queue_offset))
            else:
                done.not_found.append(message_id)
        chunk = max(1, per_second // CHUNKS_PER_SECOND)
        for start in range(0, len(found), chunk):
            await self._send_back(group, found[start : start + chunk], done, per_second)
        return done

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
