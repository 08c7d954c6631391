"""A message's trace on this broker: every record with its id (libs.store.lookup), and for each consumer group
that reads one of them, the group's position there (its consume window, else its committed offset).

A group reads a copy in a topic it subscribes to, and the copies in its own retry topic. A
broadcast group's clients each keep their own offsets: it is traced by client elsewhere
(`GET /v1/groups/{group}/lag`), not here. What a dead-letter copy means is the gateway's
to say; its group is in the topic's name.
"""

from __future__ import annotations

from libs.broker_api.trace import CopyModel, GroupPositionModel, TraceAnswer
from libs.message import MessageRecord
from libs.names import is_public_topic, retry_topic
from services.broker.consume.pop import PopService
from services.broker.consume.window import WindowKey

MAX_COPIES = 64


def trace(pop: PopService, message_id: str, begin: int, end: int) -> TraceAnswer:
    records = pop.store.query_id(message_id, begin, end, limit=MAX_COPIES)
    copies = sorted(records, key=lambda r: r.physical_offset)
    positions = [p for record in copies for p in _positions(pop, record)]
    return TraceAnswer(copies=[_copy(r) for r in copies], positions=positions)


def _copy(record: MessageRecord) -> CopyModel:
    return CopyModel(
        topic=record.topic,
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        stored_at=record.store_timestamp,
        born_at=record.born_timestamp,
        reconsume_times=record.reconsume_times,
        properties=dict(record.properties),
    )


def _positions(pop: PopService, record: MessageRecord) -> list[GroupPositionModel]:
    found = []
    for config in pop.groups.all():
        if config.broadcast:
            continue
        reads = record.topic == retry_topic(config.name) or (
            is_public_topic(record.topic) and pop.groups.subscription(config.name, record.topic) is not None
        )
        if reads:
            found.append(_position(pop, config.name, record))
    return found


def _position(pop: PopService, group: str, record: MessageRecord) -> GroupPositionModel:
    offset = record.queue_offset
    low, high = pop.store.queue_offsets(record.topic, record.queue_id)
    window = pop.windows.get(WindowKey(group, record.topic, record.queue_id))
    leased = window.in_flight.get(offset) if window is not None else None
    if window is not None:
        consumer = window.committed
        done = offset < window.cursor and leased is None and offset not in window.returned
    else:
        stored = pop.offsets.get(group, record.topic, record.queue_id)
        consumer = min(max(low if stored is None else stored, low), high)
        done = offset < consumer
    # a lease `ending` is a failed attempt being handed on: done here, its retry copy goes on
    in_flight = leased is not None and not leased.ending
    position = "in_flight" if in_flight else "done" if done or leased is not None else "waiting"
    return GroupPositionModel(
        group=group,
        topic=record.topic,
        queue_id=record.queue_id,
        queue_offset=offset,
        consumer_offset=consumer,
        position=position,
        attempt=leased.attempt if leased is not None else 0,
        lease_expires_at=leased.expires_at if leased is not None else None,
    )
