"""Scheduled messages on the broker: system topics, storing until due, delivering when due.

A put whose record asks for a delay (DELAY level or TIMER_DELIVER_MS) is stored
in `SCHEDULE_TOPIC_XXXX` (queue = level - 1) or the timer topic instead of its
topic, its destination kept in properties (libs.delay). The timer service reads
those queues' units (due times, no bodies) and, when a message is due, asks for
its delivery by CommitLog offset: the broker puts it back in its real topic,
with its message id, so the body never crosses the network twice.
"""

from __future__ import annotations

import time
from dataclasses import replace

from libs.codec import decode_record, encode_record, peek_head
from libs.delay import due_at, from_schedule, is_scheduled, to_schedule
from libs.errors import InvalidMessage, TopicNotFound
from libs.message import MessageRecord
from libs.names import SCHEDULE_TOPIC, TIMER_TOPIC
from services.broker.topics import TopicTable


def schedule_batch(body: bytes, levels: tuple[int, ...], now_ms: int | None = None) -> tuple[bytes, dict[int, int]]:
    """The put body with every delayed record moved to its schedule queue; record index -> due time."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    parts: list[bytes] = []
    scheduled: dict[int, int] = {}
    offset = index = 0
    while offset < len(body):
        head = peek_head(body, offset)
        raw = body[offset : offset + head.total_size]
        if is_scheduled(head.properties):
            moved = to_schedule(decode_record(raw, verify_crc=False), levels, now)
            parts.append(encode_record(moved))
            scheduled[index] = due_at(moved)
        else:
            parts.append(raw)
        offset += head.total_size
        index += 1
    return b"".join(parts), scheduled


def delivery(raw: bytes, topics: TopicTable) -> tuple[MessageRecord, int]:
    """The stored scheduled record as it goes to its real topic, and when it was due; a clear error when it cannot."""
    record = decode_record(raw)
    if record.topic not in (SCHEDULE_TOPIC, TIMER_TOPIC):
        raise InvalidMessage(f"the record at {record.physical_offset} is in {record.topic}, not a schedule queue")
    delivered = from_schedule(record)
    config = topics.find(delivered.topic)
    if config is None:
        raise TopicNotFound(f"topic {delivered.topic!r} of the scheduled message no longer exists")
    if delivered.queue_id >= config.write_queues:  # the topic shrank meanwhile: keep it on a queue that exists
        delivered = replace(delivered, queue_id=delivered.queue_id % config.write_queues)
    return delivered, due_at(record)
