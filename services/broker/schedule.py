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
import uuid
from dataclasses import dataclass, replace

from prometheus_client import CollectorRegistry, Counter

from libs.codec import decode_record, encode_record, peek_head
from libs.delay import due_at, from_schedule, is_scheduled, to_schedule
from libs.errors import InvalidMessage, TopicNotFound
from libs.events import EventWriter
from libs.message import MessageRecord, Prop
from libs.names import SCHEDULE_TOPIC, TIMER_TOPIC
from libs.store.message_store import MessageStore
from services.broker.topics import TopicTable


@dataclass(frozen=True, slots=True)
class ScheduleQueuesAtStart:
    """The schedule queues' ends when the store was opened, before any write, and an id of that start.

    A timer cursor past its queue's end at start is past a tail the broker lost with its
    CommitLog (an ASYNC_FLUSH crash): the queue's offsets are used again from that end, so the
    timer lowers such a cursor to it, once per start, instead of skipping what is stored there.
    """

    incarnation: str
    ends: dict[tuple[str, int], int]

    @classmethod
    def read(cls, store: MessageStore, topics: TopicTable) -> ScheduleQueuesAtStart:
        ends = {}
        for topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
            config = topics.get(topic)
            for queue_id in range(max(config.read_queues, config.write_queues)):
                ends[(topic, queue_id)] = store.queue_offsets(topic, queue_id)[1]
        return cls(uuid.uuid4().hex, ends)


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
    delivered = replace(delivered, properties={**delivered.properties, Prop.DEDUP: delivery_token(record)})
    config = topics.find(delivered.topic)
    if config is None:
        raise TopicNotFound(f"topic {delivered.topic!r} of the scheduled message no longer exists")
    if delivered.queue_id >= config.write_queues:  # the topic shrank meanwhile: keep it on a queue that exists
        delivered = replace(delivered, queue_id=delivered.queue_id % config.write_queues)
    return delivered, due_at(record)


def delivery_token(record: MessageRecord) -> str:
    """The DEDUP token of a scheduled record's delivery: the same for every delivery of it, so it is stored once.

    A timer repeats deliveries made since its last checkpoint after a crash, and a delivery
    whose flush timed out may be asked again; a copy the timer rolled (seed 003) keeps the
    properties and due time of the record it copies, so its delivery has the same token.
    Two retries of one message differ in their due time, their attempt count (reconsume
    times) and the retry put's own token (group, failed copy, attempt).
    """
    own = record.properties.get(Prop.DEDUP)
    token = f"due:{due_at(record)}:{record.reconsume_times}"
    return token if own is None else f"{token}:{own}"


def rolled(raw: bytes) -> MessageRecord:
    """The stored scheduled record as re-put at the log's end (seed 003's roll): in the timer topic, due as before."""
    record = decode_record(raw)
    if record.topic not in (SCHEDULE_TOPIC, TIMER_TOPIC):
        raise InvalidMessage(f"the record at {record.physical_offset} is in {record.topic}, not a schedule queue")
    properties = dict(record.properties)
    times = properties.get(Prop.TIMER_ROLL_TIMES, "0")
    properties[Prop.TIMER_ROLL_TIMES] = str(int(times) + 1 if times.isdigit() else 1)
    return replace(
        record,
        topic=TIMER_TOPIC,
        queue_id=0,
        properties=properties,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=0,
    )


def needed_offset(
    store: MessageStore, level_queues: int, levels: dict[int, int], timer: int, wheel_offset: int | None
) -> int | None:
    """The lowest CommitLog offset of a scheduled message the timer has not passed yet (None: none).

    With no cursors (before the timer's first report) every scheduled message still indexed counts.
    Offsets whose records are gone already (below the log's start) keep nothing.
    """
    cursors = [(SCHEDULE_TOPIC, q, levels.get(q, 0)) for q in range(level_queues)] + [(TIMER_TOPIC, 0, timer)]
    start = store.commitlog.min_offset
    offsets = [] if wheel_offset is None or wheel_offset < start else [wheel_offset]
    for topic, queue_id, cursor in cursors:
        first = _first_kept(store, topic, queue_id, cursor)
        if first is not None:
            offsets.append(first)
    return min(offsets, default=None)


def _first_kept(store: MessageStore, topic: str, queue_id: int, cursor: int) -> int | None:
    """The CommitLog offset of the queue's first unit from `cursor` on whose record is still there."""
    low, high = store.queue_offsets(topic, queue_id)
    queue = store.queues.get(topic, queue_id)
    position = max(cursor, low)
    while position < high:
        units = queue.read(position, 256)
        if not units:
            return None
        for physical, _, _ in units:
            if physical >= store.commitlog.min_offset:
                return physical
        position += len(units)
    return None


def guard_scheduled(store: MessageStore, topics: TopicTable, events: EventWriter, registry: CollectorRegistry) -> None:
    """Retention keeps every scheduled message until the timer's first report; losses are told loudly."""
    queues = topics.get(SCHEDULE_TOPIC).write_queues
    store.retention.needed_before_report = lambda: needed_offset(store, queues, {}, 0, None)
    lost = Counter(
        "petrel_broker_scheduled_lost",
        "Pending scheduled messages disk pressure deleted before they could be rolled",
        registry=registry,
    )

    def on_lost(record: MessageRecord) -> None:
        lost.inc()
        events.emit(
            "delay_lost",
            message_id=record.message_id,
            topic=record.properties.get(Prop.REAL_TOPIC),
            deliver_at=due_at(record),
            physical_offset=record.physical_offset,
            reason="disk pressure deleted its CommitLog segment before it could be rolled",
        )

    store.retention.loss_listeners.append(on_lost)
